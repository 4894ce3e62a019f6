"""Compaction that keeps up: plans ordered by log bytes and bounded by IO (Hudi's log file size based, bounded IO
strategy), a plan IO budget from the measured pace, scheduler pools by weight, and async compaction running beside
micro-batches instead of between them."""

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hoodie_stream import HoodieStreamSink
from hoodie_stream.chain.scheduler_pools import (
    COMPACTION_POOL,
    POOLS,
    WRITE_POOL,
    ensure_pool,
    fair_scheduling,
    in_pool,
    pool_weight,
)
from hoodie_stream.compaction.operation import CompactionOperation, plan_operations
from hoodie_stream.compaction.pace import INITIAL_MB_PER_TASK, MARGIN, CompactionPace
from hoodie_stream.compaction.plan import order_and_bound, pending_plans, schedule_compaction
from hoodie_stream.format.file_group.fs_view import FileSystemView
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.options import parse_compaction_options
from oracle import rs_read
from stream_model import OPTIONS, TableModel, events_df, generate_batches, table_rows


# -- plan strategy (Spark-free) --------------------------------------------------------------------------------
def _op(i, log_bytes, io_mb, log_files=1):
    return CompactionOperation(
        file_id=f"f{i}",
        partition="p",
        base_instant="1",
        log_files=tuple(f".f{i}_1.log.{n + 1}_0-1-0" for n in range(log_files)),
        metrics={
            "TOTAL_LOG_FILES_SIZE": float(log_bytes),
            "TOTAL_IO_MB": float(io_mb),
            "TOTAL_LOG_FILES": float(log_files),
        },
    )


def _hudi_rule(ops, target, overdue=None):
    """Hudi's LogFileSizeBasedCompactionStrategy over BoundedIOCompactionStrategy, as documented: order by total log
    size, largest first; take operations while the remaining target IO is positive, each taken one subtracting its
    IO (so the one that exhausts the target is still taken). Plus this project's rule: slices with `overdue` log
    files or more first, the most log files (then log bytes) first."""
    late = sorted(
        (o for o in ops if overdue is not None and len(o.log_files) >= overdue),
        key=lambda o: (-len(o.log_files), -o.metrics["TOTAL_LOG_FILES_SIZE"]),
    )
    rest = [o for o in ops if o not in late]
    ordered = late + sorted(rest, key=lambda o: -o.metrics["TOTAL_LOG_FILES_SIZE"])
    if target is None:
        return ordered
    taken, remaining = [], target
    for op in ordered:
        if remaining > 0:
            taken.append(op)
            remaining -= op.metrics["TOTAL_IO_MB"]
    return taken


@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.floats(0.01, 500), st.integers(1, 40)), max_size=30),
    st.one_of(st.none(), st.integers(1, 3000)),
    st.one_of(st.none(), st.integers(1, 40)),
)
def test_plan_takes_most_log_bytes_first_within_target_io(slices, target, overdue):
    ops = [_op(i, log, io, files) for i, (log, io, files) in enumerate(slices)]
    chosen = order_and_bound(ops, target, overdue)
    expected = _hudi_rule(ops, target, overdue)

    def shape(o):
        return (len(o.log_files), o.metrics["TOTAL_LOG_FILES_SIZE"], o.metrics["TOTAL_IO_MB"])

    assert [shape(o) for o in chosen] == [shape(o) for o in expected]
    if ops and overdue is None:
        assert chosen, "a plan always takes the slice with the most log bytes"
        left_out = {o.file_id for o in ops} - {o.file_id for o in chosen}
        most = max((o.metrics["TOTAL_LOG_FILES_SIZE"] for o in chosen), default=0)
        assert all(o.metrics["TOTAL_LOG_FILES_SIZE"] <= most for o in ops if o.file_id in left_out)
    if target is not None and len(chosen) < len(ops):
        assert sum(o.metrics["TOTAL_IO_MB"] for o in chosen) >= target  # cut only once the target is reached
        assert sum(o.metrics["TOTAL_IO_MB"] for o in chosen[:-1]) < target


def test_compaction_target_io_option():
    assert parse_compaction_options().target_io_mb is None
    assert parse_compaction_options({"compaction.target_io": "512"}).target_io_mb == 512
    with pytest.raises(Exception, match="compaction.target_io"):
        parse_compaction_options({"compaction.target_io": "0"})


# -- the measured pace (Spark-free) ----------------------------------------------------------------------------
class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _pace(**options):
    clock = _Clock()
    return CompactionPace(parse_compaction_options(options), clock), clock


def test_plan_budget_follows_the_commit_rate_and_the_measured_pace():
    pace, clock = _pace(**{"compaction.delta_commits": "5"})
    assert pace.plan_budget_mb(2) is None  # no commit seen: nothing to bound by
    pace.delta_committed()
    clock.now += 40  # a slow first load, then a commit every 2 s
    for _ in range(6):
        pace.delta_committed()
        clock.now += 2
    assert pace.seconds_between_commits() == 2
    assert pace.plan_interval_seconds() == 10
    assert pace.plan_budget_mb(2) == pytest.approx(INITIAL_MB_PER_TASK * 2 * 10 * MARGIN)
    pace.compacted(100.0, 20.0, tasks=2)  # 5 MB/s measured with two tasks: 2.5 MB/s a task
    assert pace.plan_budget_mb(1) == pytest.approx(2.5 * 10 * MARGIN)
    assert pace.plan_budget_mb(2) == pytest.approx(5 * 10 * MARGIN)
    pace.compacted(300.0, 20.0)  # 15 MB/s with one task: the average moves towards it
    assert 2.5 < pace.mb_per_second < 15


@pytest.mark.parametrize(
    ("trigger", "expected"),
    [("num_commits", 30.0), ("time_elapsed", 60.0), ("num_and_time", 60.0), ("num_or_time", 30.0)],
)
def test_plan_interval_follows_the_trigger_strategy(trigger, expected):
    pace, clock = _pace(
        **{"compaction.trigger.strategy": trigger, "compaction.delta_commits": "10", "compaction.delta_seconds": "60"}
    )
    for _ in range(3):
        pace.delta_committed()
        clock.now += 3
    assert pace.plan_interval_seconds() == expected


# -- scheduler pools ----------------------------------------------------------------------------------------------
def test_the_sink_pools_have_their_weights_and_a_declared_pool_wins(spark):
    sc = spark.sparkContext
    assert sc.getConf().get("spark.scheduler.mode") == "FAIR"
    for name, (weight, _min_share) in POOLS.items():
        assert ensure_pool(sc, name)
        assert pool_weight(sc, name) == weight
    # a pool the session declares (as an allocation file does) is used as declared
    scheduler = sc._jvm.org.apache.spark.scheduler
    root = sc._jsc.sc().taskScheduler().rootPool()
    root.addSchedulable(scheduler.Pool("user_declared", scheduler.SchedulingMode.withName("FAIR"), 0, 7))
    POOLS["user_declared"] = (1, 0)
    try:
        assert ensure_pool(sc, "user_declared") and pool_weight(sc, "user_declared") == 7
    finally:
        del POOLS["user_declared"]
    # a pool the caller chose for its thread wins over the sink's; the thread's pool is restored after
    sc.setLocalProperty("spark.scheduler.pool", "user_declared")
    try:
        with in_pool(sc, WRITE_POOL, keep_callers=True) as used:
            assert used == "user_declared"
        with in_pool(sc, COMPACTION_POOL) as used:
            assert used == COMPACTION_POOL and sc.getLocalProperty("spark.scheduler.pool") == COMPACTION_POOL
        assert sc.getLocalProperty("spark.scheduler.pool") == "user_declared"
    finally:
        sc.setLocalProperty("spark.scheduler.pool", None)


# -- planning over a table ----------------------------------------------------------------------------------------
def _table_with_logs(spark, base, batches=4, seed=31):
    sink = HoodieStreamSink(base, OPTIONS)
    model = TableModel()
    for i, events in enumerate(generate_batches(batches, seed=seed, keys_per_batch=200, key_space=400)):
        sink(events_df(spark, events), i)
        model.apply_batch(events)
    sink.close()
    return model


def test_bounded_plans_skip_pending_file_groups_and_take_turns(spark, tmp_path):
    """compaction.target_io=1 (MB): each plan takes the slices with the most log bytes among the file groups no
    pending plan holds, until their IO reaches 1 MB; plans scheduled one after the other cover every slice with
    logs exactly once."""
    base = str(tmp_path / "t")
    model = _table_with_logs(spark, base)
    tl = Timeline(base)
    mb = 1024.0 * 1024.0
    slices = {
        (s.partition, s.file_id): (sum(s.log_sizes), 2 * (s.base_size + sum(s.log_sizes)) / mb)
        for s in FileSystemView(base, tl).latest_slices()
        if s.log_files
    }
    assert len(slices) >= 3
    opts = parse_compaction_options({"compaction.target_io": "1"})
    covered = []
    plans = 0
    while True:
        instant = schedule_compaction(base, Timeline(base), opts, force=True)
        if instant is None:
            break
        plans += 1
        planned = [(op.partition, op.file_id) for op in plan_operations(pending_plans(Timeline(base))[instant])]
        assert not set(planned) & set(covered), "a file group of a pending plan planned again"
        # expected: the rest by log bytes, largest first, until 1 MB of IO is reached
        expected, budget = [], 1.0
        for group in sorted(set(slices) - set(covered), key=lambda g: -slices[g][0]):
            if budget <= 0:
                break
            expected.append(group)
            budget -= slices[group][1]
        assert [slices[g][0] for g in planned] == [slices[g][0] for g in expected]
        covered += planned
    assert sorted(covered) == sorted(slices) and plans > 1
    from hoodie_stream.compaction.service import run_pending_compactions

    done = run_pending_compactions(spark, base, opts)
    assert len(done) == plans
    from hoodie_stream import HoodieTable

    assert table_rows(HoodieTable(base).read()) == model.rows()


def test_async_compaction_runs_beside_a_micro_batch(spark, tmp_path):
    """In FAIR mode a running compaction does not wait for a gap between micro-batches: while a micro-batch is
    written, compaction operations keep starting (one Spark job each), tasks run in `hoodie_write` and in
    `hoodie_compaction` at the same moments, and both readers see the model afterwards."""
    from pyspark.sql import functions as F

    base = str(tmp_path / "t")
    options = {
        "hoodie.table.name": "beside",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.partitionpath.field": "part",
        "compaction.schedule.enabled": "false",
        "compaction.tasks": "1",
    }
    sink = HoodieStreamSink(base, options)

    def batch(b, n):
        return (
            spark.range(0, n, numPartitions=2)
            .withColumn("ts", F.lit(b).cast("long"))
            .withColumn("part", (F.col("id") % 16).cast("string"))
            .withColumn("payload", F.sha2(F.concat(F.col("id").cast("string"), F.lit(str(b))), 512))
        )

    for b in range(2):
        sink(batch(b, 200_000), b)
    schedule_compaction(base, Timeline(base), sink.options.compaction, force=True)
    sc = spark.sparkContext
    pools = {name: sc._jsc.sc().getPoolForName(name) for name in (WRITE_POOL, COMPACTION_POOL)}
    seen = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            running = {n: (p.get().runningTasks() if p.isDefined() else 0) for n, p in pools.items()}
            seen.append(running)
            for name in pools:
                if not pools[name].isDefined():
                    pools[name] = sc._jsc.sc().getPoolForName(name)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        sink.services.after_commit(spark)  # scheduling is off: starts the async run of the pending plan
        deadline = time.monotonic() + 60
        while not any(s[COMPACTION_POOL] for s in seen) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(s[COMPACTION_POOL] for s in seen), "the compaction never started"
        tracker = sc.statusTracker()
        before = set(tracker.getJobIdsForGroup(sink.services._group))
        sink(batch(2, 200_000), 2)  # written while the compaction runs (16 operations, one at a time)
        during = set(tracker.getJobIdsForGroup(sink.services._group)) - before
    finally:
        stop.set()
        sampler.join()
    services = sink.services
    assert services.wait_idle(300)
    sink.close()
    assert not services.errors
    assert during, "no compaction operation started while the micro-batch was written"
    both = [s for s in seen if s[WRITE_POOL] and s[COMPACTION_POOL]]
    assert both, "no moment with a micro-batch task and a compaction task running together"
    assert Timeline(base).completed(["commit"]), "the compaction did not complete"
    from hoodie_stream import HoodieTable

    expected = {i: 2 for i in range(200_000)}
    for reader, rows in (("ours", HoodieTable(base).read()), ("hudi-rs", rs_read(base))):
        got = dict(zip(rows.column("id").to_pylist(), rows.column("ts").to_pylist()))
        assert got == expected, reader


@pytest.mark.parametrize("compaction", ["completes", "fails"])
def test_a_due_plan_waits_for_max_pending_then_back_pressure_is_the_last_resort(
    spark, tmp_path, monkeypatch, caplog, compaction
):
    """With hoodie.stream.compaction.max.pending=1 and a compaction that cannot progress, a plan due after the
    next commit is not written (pending stays 1) and the writer goes on; once it is overdue for a whole trigger
    interval (compaction.delta_commits commits) the writer waits, with a warning, until the compaction
    completed; then the overdue plan is written. A compaction that fails instead ends the wait (the writer goes on,
    the plan stays requested). Both readers see the model."""
    import logging

    from hoodie_stream import HoodieTable
    from hoodie_stream.compaction import service

    release = threading.Event()
    real = service.run_pending_compactions

    def held_back(*args, **kwargs):
        release.wait(120)
        if compaction == "fails":
            raise RuntimeError("compaction failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(service, "run_pending_compactions", held_back)
    base = str(tmp_path / "t")
    options = dict(
        OPTIONS,
        **{
            "compaction.schedule.enabled": "true",
            "compaction.delta_commits": "2",
            "hoodie.stream.compaction.max.pending": "1",
        },
    )
    sink = HoodieStreamSink(base, options)
    services = sink.services
    model = TableModel()
    pending = []
    caplog.set_level(logging.WARNING, logger="hoodie_stream")
    timers = []
    real_back_pressure = services._back_pressure

    def back_pressure():  # the compaction is let go 1.5 s after the writer starts waiting for it
        if services.overdue >= 2 and not timers:
            timers.append(threading.Timer(1.5, release.set))
            timers[0].start()
        real_back_pressure()

    services._back_pressure = back_pressure
    for i, events in enumerate(generate_batches(7, seed=37, monotonic=True)):
        sink(events_df(spark, events), i)
        model.apply_batch(events)
        pending.append(len(pending_plans(Timeline(base))))
    services.wait_idle(300)
    assert max(pending) == 1, pending
    assert timers and services.back_pressure_seconds >= 1.0
    assert any("waits for compaction to catch up" in r.message for r in caplog.records)
    sink.close()
    assert table_rows(HoodieTable(base).read()) == model.rows()
    if compaction == "fails":
        assert services.errors and all(str(e) == "compaction failed" for e in services.errors)
        assert any("failed while the writer waited" in r.message for r in caplog.records)
        assert not Timeline(base).completed(["commit"]) and len(pending_plans(Timeline(base))) == 1
        assert real(spark, base, parse_compaction_options()), "the plan runs once compaction works again"
    else:
        assert not services.errors
        commits = [i.timestamp for i in Timeline(base).completed(["commit"])]
        assert len(commits) >= 2, "the held-back plan and the overdue one both completed"
    assert table_rows(rs_read(base)) == model.rows()


def test_the_scheduling_mode_is_read_from_the_context_conf():
    """FAIR or FIFO from the context's own conf (one lookup), case-insensitively; FIFO when unset."""

    class Context:
        def __init__(self, conf):
            self._conf = conf

        def getConf(self):  # a copy of every entry: not what the check reads
            raise AssertionError("getConf() copies the whole conf")

    assert fair_scheduling(Context({"spark.scheduler.mode": "fair"}))
    assert not fair_scheduling(Context({"spark.scheduler.mode": "FIFO"}))
    assert not fair_scheduling(Context({}))
