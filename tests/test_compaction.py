"""Compaction (plan -> execute -> commit; async, inline, offline) checked against the model, hudi-rs and Hudi's
own plan schema."""

import contextlib
import io
import os
import threading

import fastavro
import pytest

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.compaction.execute import compact_operation, run_niced
from hoodie_stream.compaction.offline import compact_table
from hoodie_stream.compaction.operation import plan_operations
from hoodie_stream.compaction.plan import pending_plans, schedule_compaction
from hoodie_stream.compaction.run import run_compaction
from hoodie_stream.errors import HoodieObjectNotFoundError
from hoodie_stream.format.file_group.fs_view import FileSystemView
from hoodie_stream.format.table.markers import marker_dir, marker_name
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.commit_metadata import CommitMetadata
from hoodie_stream.options import parse_compaction_options
from hoodie_stream.storage import Storage, storage_for
from hoodie_stream.storage import local as local_storage
from oracle import assert_same_rows, rs_read
from stream_model import OPTIONS, SCHEMA_DDL, TableModel, events_df, generate_batches, table_rows, write_batch_file

# Hudi's HoodieCompactionPlan schema (hudi-common/src/main/avro/HoodieCompactionOperation.avsc)
HUDI_PLAN_SCHEMA = {
    "namespace": "org.apache.hudi.avro.model",
    "type": "record",
    "name": "HoodieCompactionPlan",
    "fields": [
        {
            "name": "operations",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": {
                        "name": "HoodieCompactionOperation",
                        "type": "record",
                        "fields": [
                            {"name": "baseInstantTime", "type": ["null", "string"]},
                            {
                                "name": "deltaFilePaths",
                                "type": ["null", {"type": "array", "items": "string"}],
                                "default": None,
                            },
                            {"name": "dataFilePath", "type": ["null", "string"], "default": None},
                            {"name": "fileId", "type": ["null", "string"]},
                            {"name": "partitionPath", "type": ["null", "string"], "default": None},
                            {"name": "metrics", "type": ["null", {"type": "map", "values": "double"}], "default": None},
                            {"name": "bootstrapFilePath", "type": ["null", "string"], "default": None},
                        ],
                    },
                },
            ],
            "default": None,
        },
        {"name": "extraMetadata", "type": ["null", {"type": "map", "values": "string"}], "default": None},
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}


def with_compaction(**extra):
    opts = dict(OPTIONS, **{"compaction.schedule.enabled": "true"})
    opts.update({k.replace("_", ".", 1) if k.startswith("compaction_") else k: v for k, v in extra.items()})
    return opts


def compaction_commits(base):
    """Completed compaction instants of a table (a path or a Storage)."""
    tl = Timeline(base)
    return [i.timestamp for i in tl.completed(["commit"]) if tl.read_commit_metadata(i.timestamp).compacted]


def model_as_of(history, instant):
    """Model rows after the last delta commit at or before `instant` (history: [(deltacommit, rows)])."""
    rows = []
    for ts, snapshot in history:
        if ts <= instant:
            rows = snapshot
    return rows


def check_plans_parse_with_hudi_schema(base):
    """Every compaction plan of a table (a path or a Storage) parses with Hudi's plan schema; returns how many."""
    storage = storage_for(base)
    plans = [info.path for info in storage.list(".hoodie") if info.name.endswith(".compaction.requested")]
    for path in plans:
        records = list(fastavro.reader(io.BytesIO(storage.read(path)), reader_schema=HUDI_PLAN_SCHEMA))
        assert len(records) == 1 and records[0]["version"] == 2 and records[0]["operations"], path
        for op in records[0]["operations"]:
            assert op["fileId"] and op["deltaFilePaths"] and op["baseInstantTime"]
    return len(plans)


def test_streaming_query_with_async_compaction_every_3_commits(spark, tmp_path, location):
    source, chk = str(tmp_path / "in"), str(tmp_path / "chk")
    base = location.storage
    batches = generate_batches(15, seed=21, monotonic=True)
    # plans as large as Flink's default target IO (500 GB): each covers every slice with logs, so the
    # read-optimized view after a compaction is the model as of its instant
    sink = location.sink(with_compaction(**{"compaction.delta_commits": "3", "compaction.target_io": "512000"}))
    model, history = TableModel(), []
    write_batch_file(source, 0, batches[0])
    stream = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(source)
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", chk).start()
    checked_idle = 0
    try:
        for i, events in enumerate(batches):
            if i:
                write_batch_file(source, i, events)
            query.processAllAvailable()
            model.apply_batch(events)
            last = Timeline(base).completed(["deltacommit"])[-1].timestamp
            history.append((last, model.rows()))
            assert table_rows(location.table().read()) == model.rows(), f"ours after batch {i}"
            if i % 4 == 3:  # let the compaction thread catch up, then both readers must agree
                assert sink.services.wait_idle(120)
            if not pending_plans(Timeline(base)):
                checked_idle += 1
                assert table_rows(location.rs_read()) == model.rows(), f"hudi-rs after batch {i}"
                done = compaction_commits(base)
                if done:
                    expected_ro = model_as_of(history, done[-1])
                    assert table_rows(location.rs_read("read_optimized")) == expected_ro, f"RO after batch {i}"
                    assert table_rows(location.table().read("read_optimized")) == expected_ro
    finally:
        query.stop()
        sink.close()
    assert sink.services.errors == []
    assert checked_idle >= 4
    assert len(compaction_commits(base)) >= 3
    assert check_plans_parse_with_hudi_schema(base) >= 3
    # each compaction commit is Hudi's COMPACT commit and wrote one base file per operation
    tl = Timeline(base)
    for ts in compaction_commits(base):
        meta = tl.read_commit_metadata(ts)
        assert meta.operation_type == "COMPACT" and meta.compacted
        assert all(s.path.endswith(f"_{ts}.parquet") for s in meta.all_write_stats())


def test_inline_compaction(spark, location):
    base = location.storage
    sink = location.sink(with_compaction(**{"compaction.delta_commits": "2", "compaction.async.enabled": "false"}))
    model, history = TableModel(), []
    for i, events in enumerate(generate_batches(7, seed=22, monotonic=True)):
        sink(events_df(spark, events), i)
        model.apply_batch(events)
        history.append((Timeline(base).completed(["deltacommit"])[-1].timestamp, model.rows()))
        assert not pending_plans(Timeline(base))
        assert table_rows(location.rs_read()) == model.rows()
        done = compaction_commits(base)
        assert len(done) == (i + 1) // 2
        if done:
            assert table_rows(location.rs_read("read_optimized")) == model_as_of(history, done[-1])


def _setup(spark, base, n=4, seed=23, storage_options=None, options=None):
    # compaction not scheduled while the table is built
    sink = HoodieStreamSink(base, {**OPTIONS, **(options or {})}, storage_options=storage_options)
    model = TableModel()
    batches = generate_batches(n + 1, seed=seed, monotonic=True)
    for i, events in enumerate(batches[:n]):
        sink(events_df(spark, events), i)
        model.apply_batch(events)
    sink.close()
    return model, batches[n]


def _both_readers(base, model, context, storage_options=None):
    uri = base.uri if isinstance(base, Storage) else base
    assert table_rows(HoodieTable(base).read()) == model.rows(), context
    assert table_rows(rs_read(uri, storage_options=storage_options)) == model.rows(), context


@pytest.mark.parametrize("step", ["plan_written", "mid_execute", "before_commit"])
def test_crash_during_compaction_then_restart(spark, location, step):
    base = location.storage
    model, next_batch = _setup(spark, location.uri, storage_options=location.storage_options)
    opts = parse_compaction_options()
    tl = Timeline(base)
    instant = schedule_compaction(base, tl, opts, force=True)
    plan = pending_plans(tl)[instant]
    if step in ("mid_execute", "before_commit"):
        tl.transition_to_inflight(instant, "compaction", b"")
        committed = {i.timestamp for i in tl.commits_timeline()}
        ops = plan_operations(plan)[:1] if step == "mid_execute" else plan_operations(plan)
        for n, op in enumerate(ops):
            compact_operation(base, instant, op, committed, opts.max_memory_bytes, f"{n}-1-0")
    # the process died here: readers ignore the unfinished compaction
    _both_readers(base, model, f"after a crash at {step}", location.options)
    # restart: a new sink (new process) with inline compaction; the next batch runs the pending plan
    sink = location.sink(with_compaction(**{"compaction.async.enabled": "false", "compaction.delta_commits": "100"}))
    sink(events_df(spark, next_batch), 100)
    model.apply_batch(next_batch)
    assert instant in compaction_commits(base)
    assert not pending_plans(Timeline(base))
    _both_readers(base, model, f"after restart from {step}", location.options)
    stats = Timeline(base).read_commit_metadata(instant).all_write_stats()
    assert len(stats) == len(plan["operations"])
    for stat in stats:  # exactly one base file per file group for the compaction instant
        assert [
            n
            for n in location.names(stat.partition_path)
            if n.startswith(stat.file_id) and n.endswith(f"_{instant}.parquet")
        ] == [stat.path.rsplit("/", 1)[-1]]


def test_failed_compaction_leaves_the_plan_requested(spark, location):
    base = location.storage
    model, _ = _setup(spark, location.uri, n=3, seed=24, storage_options=location.storage_options)
    tl = Timeline(base)
    opts = parse_compaction_options()
    instant = schedule_compaction(base, tl, opts, force=True)
    op = pending_plans(tl)[instant]["operations"][0]
    directory = op["partitionPath"]
    victim = f"{directory}/{op['deltaFilePaths'][0]}" if directory else op["deltaFilePaths"][0]
    saved = location.read(victim)
    location.remove(victim)  # an operation cannot read its input: the task fails
    with pytest.raises(HoodieObjectNotFoundError, match="does not exist"):
        run_compaction(spark, base, tl, instant, opts.max_memory_bytes)
    tl.reload()
    assert tl.get(instant).is_requested
    assert not [n for n in location.names(directory) if n.endswith(f"_{instant}.parquet")]
    location.write(victim, saved)
    if location.kind == "local":  # a task cancelled while it created a marker leaves the write's temporary file
        marker = marker_name(f"{directory}/{op['fileId']}_0-1-0_{instant}.parquet".lstrip("/"), "CREATE")
        parent, _, name = f"{marker_dir(instant)}/{marker}".rpartition("/")
        os.makedirs(os.path.join(location.uri, parent), exist_ok=True)
        open(os.path.join(location.uri, parent, local_storage.temp_name(name)), "wb").close()
    run_compaction(spark, base, tl, instant, opts.max_memory_bytes)
    _both_readers(base, model, "after the retried compaction", location.options)


def test_bounded_memory_compaction_merges_in_key_ranges(spark, tmp_path):
    base = str(tmp_path / "t")
    model, _ = _setup(spark, base, n=4, seed=25)
    tl = Timeline(base)
    opts = parse_compaction_options()
    instant = schedule_compaction(base, tl, opts, force=True)
    tl.transition_to_inflight(instant, "compaction", b"")
    committed = {i.timestamp for i in tl.commits_timeline()}
    plan = pending_plans(tl)[instant]
    ranges = []
    stats = []
    for n, op in enumerate(plan_operations(plan)):
        stat, k = compact_operation(base, instant, op, committed, 2048, f"{n}-1-0")  # 2 KB "memory"
        stats.append(stat)
        ranges.append(k)
    assert max(ranges) > 1
    tl.complete(instant, "compaction", CommitMetadata({}, True, {}, "COMPACT").with_stats(stats).to_json())
    _both_readers(base, model, "after a compaction merged in key ranges")


@pytest.mark.parametrize(
    "name",
    [
        "trips-mor-avro-v6_trips_8i1u",
        "trips-mor-avro-v6_trips_8i3d",
        "sample-mor-parquet-v6_complexkeygen_hivestyle",
        "sample-mor-parquet-v6_nonpartitioned_rollback",
        "sample-mor-parquet-v6_simplekeygen_nonhivestyle",
    ],
)
def test_offline_compaction_of_real_fixtures(spark, fixture_table, name):
    base = str(fixture_table(name))
    before = rs_read(base)
    with_logs = [fs for fs in FileSystemView(base).latest_slices() if fs.log_files]
    report = list(compact_table(base, spark=spark))
    after = rs_read(base)
    same = [c for c in before.column_names if c != "_hoodie_file_name"]  # records move to new base files
    assert_same_rows(after, before, same, context=f"{name}: hudi-rs snapshot before vs after compaction")
    assert_same_rows(HoodieTable(base).read(), before, same, context=f"{name}: ours after compaction")
    if with_logs:
        assert any(line.startswith("completed compaction") for line in report), report
        # every slice that had logs is now a base file: read-optimized shows everything
        assert_same_rows(rs_read(base, "read_optimized"), before, same, context=f"{name}: RO after compaction")
        check_plans_parse_with_hudi_schema(base)


def test_compaction_one_job_per_operation_at_lowered_priority(spark, tmp_path):
    """Async mode's shape: each operation a Spark job of one task, `concurrency` at a time, `before_task` called
    before each (in FIFO mode the service waits there for a running micro-batch), each submitted inside
    `job_context()`, merging threads niced; the result equals a plain compaction."""
    base = str(tmp_path / "t")
    model, _ = _setup(spark, base, n=3, seed=26)
    tl = Timeline(base)
    opts = parse_compaction_options()
    instant = schedule_compaction(base, tl, opts, force=True)
    ops = len(pending_plans(tl)[instant]["operations"])
    assert ops > 1
    calls, contexts = [], []

    @contextlib.contextmanager
    def job_context():
        contexts.append(threading.current_thread().name)
        yield

    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("one-job-per-operation", "test")
    try:
        stats = run_compaction(
            spark,
            base,
            tl,
            instant,
            opts.max_memory_bytes,
            concurrency=2,
            before_task=lambda: calls.append(1),
            nice=5,
            job_context=job_context,
        )
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert len(calls) == ops and len(stats) == ops
    assert len(contexts) == min(2, ops) and all(name.startswith("hoodie-compact") for name in contexts)
    assert not tracker.getJobIdsForGroup("one-job-per-operation"), "the operations ran in the caller's thread"
    assert Timeline(base).get(instant).is_completed
    _both_readers(base, model, "after a compaction run one operation a job")


def test_merging_thread_runs_niced():
    def priority():
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    assert run_niced(7, priority) == min(19, priority() + 7)
    assert run_niced(0, priority) == priority()
    with pytest.raises(ZeroDivisionError):
        run_niced(3, lambda: 1 / 0)


def test_stop_without_waiting_cancels_the_running_compaction(spark, tmp_path, caplog):
    """close(wait=False) during an async compaction cancels its Spark job: the service thread ends, the plan is
    requested again, nothing is logged as an error, and a later run completes it (removing whatever the cancelled
    task, left running without interruption, may still have written)."""
    import logging
    import time

    from pyspark.sql import functions as F

    base = str(tmp_path / "t")
    sink = HoodieStreamSink(
        base,
        {
            "hoodie.table.name": "stop",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.precombine.field": "ts",
            "compaction.schedule.enabled": "false",
        },
    )
    for b in range(2):  # a first batch of inserts, then an update of every key: logs to merge
        sink(
            spark.range(0, 300_000, numPartitions=2)
            .withColumn("ts", F.lit(b).cast("long"))
            .withColumn("payload", F.sha2(F.col("id").cast("string"), 512)),
            b,
        )
    instant = schedule_compaction(base, Timeline(base), sink.options.compaction, force=True)
    services = sink.services
    caplog.set_level(logging.INFO, logger="hoodie_stream")
    services.after_commit(spark)  # scheduling is off: this starts the async run of the pending plan
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 60
    while not any(tracker.getJobIdsForGroup(services._group)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tracker.getJobIdsForGroup(services._group), "the compaction job never started"
    sink.close(wait=False)
    services._thread.join(60)
    assert not services._thread.is_alive()
    assert Timeline(base).get(instant).is_requested, "cancelled: the plan is requested again"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    assert services.errors == []
    run_compaction(spark, base, Timeline(base), instant, sink.options.compaction.max_memory_bytes)
    assert Timeline(base).get(instant).is_completed
    assert HoodieTable(base).read().num_rows == 300_000
    for fs in FileSystemView(base).latest_slices():
        assert fs.base_instant == instant and not fs.log_files
