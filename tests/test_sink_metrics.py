"""What the sink tells while a query runs: `sink.metrics()` (one row per micro-batch, checked against the batch's
BatchResult, its commit metadata file and the timeline), the INFO line per committed batch and its option, the
repr of BatchResult, the live view (`hoodie_stream.notebook.watch`), and a script that stops Spark without
closing the sink."""

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
import types

import pyarrow as pa
import pytest

from hoodie_stream import HoodieStreamSink
from hoodie_stream.notebook import Watch, live_view, watch
from hoodie_stream.streaming_sink.batch_metrics import METRICS_SCHEMA, STAGES, BatchMetrics
from stream_model import OPTIONS, SCHEMA_DDL, generate_batches, write_batch_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_BATCHES = 5
SERVICES = {
    "compaction.schedule.enabled": "true",
    "compaction.delta_commits": "2",
    "hoodie.stream.compaction.max.pending": "10",
}


def wait_for(predicate, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def pending_plans_listed(base):
    """Compaction plans requested or inflight and not completed, from the .hoodie directory."""
    names = os.listdir(os.path.join(base, ".hoodie"))
    planned = {n.split(".")[0] for n in names if n.endswith(".compaction.requested")}
    return sum(1 for t in planned if f"{t}.commit" not in names)


def commit_figures(base, instant):
    """Records, bytes and files of a delta commit, from its metadata file."""
    with open(os.path.join(base, ".hoodie", f"{instant}.deltacommit"), "rb") as f:
        meta = json.load(f)
    stats = [s for group in meta["partitionToWriteStats"].values() for s in group]
    moved = int(meta["extraMetadata"]["_hoodie_stream_records_moved"])  # numDeletes counts moved keys' old copies
    return {
        "records_written": sum(s["numWrites"] for s in stats),
        "records_inserted": sum(s["numInserts"] for s in stats),
        "records_updated": sum(s["numUpdateWrites"] for s in stats),
        "records_deleted": sum(s["numDeletes"] for s in stats) - moved,
        "records_moved": moved,
        "bytes_written": sum(s["totalWriteBytes"] for s in stats),
        "files_written": sum(1 for s in stats if s.get("path")),
        "log_files_written": sum(1 for s in stats if s.get("path") and ".log." in s["path"]),
    }


class Recorder:
    """foreachBatch around a sink: what each micro-batch left (its BatchResult and the plans then pending)."""

    def __init__(self, sink):
        self.sink = sink
        self.results = {}

    def __call__(self, df, batch_id):
        self.sink(df, batch_id)
        self.results[batch_id] = (self.sink.last_result, pending_plans_listed(self.sink.path))


def run_stream(spark, tmp_path, sink, batches, on_start=None, function=None):
    source, chk = str(tmp_path / "in"), str(tmp_path / "chk")
    write_batch_file(source, 0, batches[0])
    stream = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(source)
    query = stream.writeStream.foreachBatch(function or sink).option("checkpointLocation", chk).start()
    started = on_start(query) if on_start else None
    try:
        for i, events in enumerate(batches):
            if i:
                write_batch_file(source, i, events)
            query.processAllAvailable()
    finally:
        query.stop()
    return query, started


def test_metrics_rows_match_results_and_commit_metadata(spark, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="hoodie_stream")
    base = str(tmp_path / "t")
    sink = HoodieStreamSink(base, {**OPTIONS, **SERVICES})
    sink.services._kick = lambda: None  # plans are scheduled, never run: the backlog grows
    recorder = Recorder(sink)
    batches = generate_batches(N_BATCHES, seed=5)
    try:
        run_stream(spark, tmp_path, sink, batches, function=recorder)
        wait_for(lambda: all(r["rows_in"] is not None for r in sink.metrics().to_pylist()), what="progress")
        wait_for(
            lambda: all(r["key_by_seconds"] is not None for r in sink.metrics().to_pylist()[1:]),
            what="the chain's stage times",
        )
    finally:
        sink.close()
    metrics = sink.metrics()
    assert metrics.schema.equals(METRICS_SCHEMA)
    rows = metrics.to_pylist()
    assert [r["batch_id"] for r in rows] == sorted(recorder.results) == list(range(N_BATCHES))
    backlog = []
    for r in rows:
        result, pending = recorder.results[r["batch_id"]]
        assert r["instant"] == result.instant is not None
        assert not r["skipped"]
        assert r["bulk_insert"] == (r["batch_id"] == 0)
        assert {k: r[k] for k in commit_figures(base, r["instant"])} == commit_figures(base, r["instant"])
        assert r["records_deleted"] == result.num_deletes and r["records_written"] == result.num_writes
        assert r["records_moved"] == result.num_moved
        assert {c: r[f"flushes_{c}"] for c in ("bucket", "task", "end")} == {
            c: result.flushes.get(c, 0) for c in ("bucket", "task", "end")
        }
        assert r["rows_in"] == len(batches[r["batch_id"]])  # the query's progress: the source's rows
        assert r["source_offsets_behind"] is None  # a file source reports no lag
        assert r["pending_compactions"] == pending
        backlog.append(pending)
        seconds = [r[f"{s}_seconds"] for s in STAGES]
        assert all(s is not None and s >= 0 for s in seconds)
        assert r["batch_seconds"] == pytest.approx(sum(seconds))
        assert r["chain_seconds"] > 0
        chain = [r[f"{s}_seconds"] for s in ("key_by", "assign", "write")]
        if r["bulk_insert"]:
            assert chain == [None] * 3
        else:  # the chain's three Spark stages run one after the other inside its action
            assert all(s >= 0 for s in chain) and sum(chain) <= r["chain_seconds"] + 0.1, (chain, r["chain_seconds"])
        # the line per committed batch, and the readable result
        line = f"table 'stream_model' at {sink.path}: batch {r['batch_id']} committed as {r['instant']}: "
        line += f"{r['records_written'] + r['records_deleted'] + r['records_moved']} records "
        line += f"({r['records_inserted']} inserts, {r['records_updated']} updates, {r['records_deleted']} deletes, "
        line += f"{r['records_moved']} moves), {r['files_written']} files"
        assert [m for m in caplog.messages if m.startswith(line)], line
        text = repr(result)
        assert text.startswith(f"BatchResult(instant={r['instant']!r}, inserts={r['records_inserted']}, ")
        assert f"deletes={r['records_deleted']}, moves={r['records_moved']}, files={r['files_written']}" in text
        assert f"end={r['flushes_end']}" in text
    assert backlog[-1] >= 1 and backlog == sorted(backlog)  # plans scheduled, none run


def test_a_key_moved_to_another_partition_is_a_move_not_a_delete(spark, tmp_path, capsys):
    """Under the global index a key moved to another partition leaves a delete of its old copy, which the commit's
    numDeletes counts as Hudi's writers do; the sink's metrics, result and commits count it as a move."""
    from hoodie_stream.__main__ import main
    from stream_model import events_df

    base = str(tmp_path / "t")
    sink = HoodieStreamSink(base, OPTIONS)
    first = [{"id": i, "city": "chennai", "ts": 1, "v": "a", "_hoodie_is_deleted": False} for i in range(10)]
    moves = [{"id": i, "city": "sao_paulo", "ts": 2, "v": "b", "_hoodie_is_deleted": False} for i in range(6)]
    deletes = [{"id": i, "city": "chennai", "ts": 2, "v": "c", "_hoodie_is_deleted": True} for i in (8, 9)]
    try:
        sink(events_df(spark, first), 0)
        sink(events_df(spark, moves + deletes), 1)
    finally:
        sink.close()
    row = sink.metrics().to_pylist()[-1]
    assert (row["records_deleted"], row["records_moved"], row["records_inserted"]) == (2, 6, 6)
    assert (sink.last_result.num_deletes, sink.last_result.num_moved) == (2, 6)
    figures = commit_figures(base, row["instant"])
    assert (figures["records_deleted"], figures["records_moved"]) == (2, 6)  # numDeletes: 8, as Hudi writes it
    capsys.readouterr()
    assert main(["commits", base, "--json", "--limit", "1"]) == 0
    [commit] = json.loads(capsys.readouterr().out)
    assert (commit["records_deleted"], commit["records_moved"]) == (2, 6)


def test_batch_lines_are_quiet_by_option(spark, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="hoodie_stream")
    sink = HoodieStreamSink(str(tmp_path / "t"), {**OPTIONS, "hoodie.stream.log.batches": "false"})
    try:
        run_stream(spark, tmp_path, sink, generate_batches(2, seed=6))
    finally:
        sink.close()
    assert [r["instant"] is not None for r in sink.metrics().to_pylist()] == [True, True]
    assert not [m for m in caplog.messages if " committed as " in m]


def test_watch_prints_a_line_per_batch(spark, tmp_path):
    lines = []
    sink = HoodieStreamSink(str(tmp_path / "t"), OPTIONS)
    try:
        _query, view = run_stream(
            spark, tmp_path, sink, generate_batches(3, seed=7), on_start=lambda q: watch(q, sink, out=lines.append)
        )
        wait_for(lambda: any("(query ended)" in line for line in lines), what="the last line")
    finally:
        sink.close()
    assert not view.notebook
    rows = sink.metrics().to_pylist()
    for r in rows:
        expected = f"batch {r['batch_id']}, instant {r['instant']}, {r['rows_in']} rows in, {r['records_inserted']} "
        assert [line for line in lines if line.startswith("hoodie-stream: " + expected)], (expected, lines)


class FakeDisplay:
    """IPython.display as a kernel has it: display(..., display_id=True) returns a handle; updates recorded."""

    def __init__(self):
        self.shown = []
        self.updates = []
        outer = self

        class HTML:
            def __init__(self, data):
                self.data = data

        class Handle:
            def update(self, obj):
                outer.updates.append(obj.data)

        self.HTML = HTML
        self._handle = Handle

    def display(self, obj, display_id=False):
        assert display_id is True
        self.shown.append(obj.data)
        return self._handle()


def test_watch_updates_a_notebook_display(spark, tmp_path, monkeypatch):
    fake = FakeDisplay()
    monkeypatch.setattr(live_view, "ipython_display", lambda: fake)
    sink = HoodieStreamSink(str(tmp_path / "t"), OPTIONS)
    try:
        _query, view = run_stream(
            spark, tmp_path, sink, generate_batches(3, seed=8), on_start=lambda q: watch(q, sink, notebook=True)
        )
        wait_for(lambda: fake.updates and "(query ended)" in fake.updates[-1], what="the final display")
    finally:
        sink.close()
    assert view.notebook and len(fake.shown) == 1  # one display, updated in place
    last = sink.metrics().to_pylist()[-1]
    page = fake.updates[-1]
    for text in (
        f"<td style='text-align:left'>{last['batch_id']}</td>",
        f"<td style='text-align:left'>{last['instant']}</td>",
        f"{last['records_inserted']} / {last['records_updated']} / {last['records_deleted']}",
        f"<td style='text-align:left'>{last['rows_in']}</td>",
        "<svg",
    ):
        assert text in page, text
    assert page.count("<rect") >= len(sink.metrics()) - 1  # a bar per batch that wrote records


def test_progress_fills_rows_in_and_the_source_lag():
    metrics = BatchMetrics()

    def progress(batch, rows, *lags):
        sources = [
            types.SimpleNamespace(metrics={} if lag is None else {"maxOffsetsBehindLatest": lag}) for lag in lags
        ]
        return types.SimpleNamespace(batchId=batch, numInputRows=rows, sources=sources)

    metrics.progress(progress(0, 10, "7", None, "12"))  # before the sink's row (listener first)
    metrics.record(0, None, {"chain": 1.0}, 0)
    metrics.record(1, None, {"chain": 2.0}, 1)
    metrics.progress(progress(1, 5, None))
    rows = metrics.table().to_pylist()
    assert [(r["rows_in"], r["source_offsets_behind"]) for r in rows] == [(10, 12), (5, None)]


def test_metrics_keep_the_newest_batches_only():
    """A query that runs for months keeps its driver's memory flat: the rows (and the chains whose stage times are
    not read yet) of the oldest batches are dropped."""

    class Chain:  # a ChainJobs whose stage times Spark's store has
        stage_ids = [1, 2, 3]

        def __init__(self, batch):
            self.batch = batch

        def seconds(self):
            return {"key_by": self.batch, "assign": 0.5, "write": 0.25}

    metrics = BatchMetrics(retained=3)
    for batch in range(10):
        metrics.record(batch, None, {"chain": 1.0}, 0, chain=Chain(batch))
    assert len(metrics) == 3
    assert len(metrics._chains) == 3
    rows = metrics.table().to_pylist()
    assert [(r["batch_id"], r["key_by_seconds"]) for r in rows] == [(7, 7.0), (8, 8.0), (9, 9.0)]
    assert not metrics._chains  # read: nothing kept for them any more
    metrics.record(10, None, {"chain": 1.0}, 0, chain=Chain(10))
    assert [r["batch_id"] for r in metrics.table().to_pylist()] == [8, 9, 10]


CHILD = """
import logging, sys
sys.path.insert(0, {tests!r})
from conftest import spark_builder
from hoodie_stream import HoodieStreamSink
from stream_model import OPTIONS, SCHEMA_DDL, generate_batches, write_batch_file
if {old!r}:  # the services as they were: no check of a stopped SparkContext
    import hoodie_stream.compaction.service as service
    service.spark_stopped = lambda spark: False
spark = spark_builder().getOrCreate()
spark.sparkContext.setLogLevel("OFF")
for i, events in enumerate(generate_batches(8, seed=3, keys_per_batch=400, key_space=2000)):
    write_batch_file({source!r}, i, events)
sink = HoodieStreamSink({table!r}, {{**OPTIONS, "compaction.schedule.enabled": "true", "compaction.delta_commits": "1"}})
stream = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json({source!r})
query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", {chk!r}).trigger(availableNow=True).start()
query.awaitTermination()
spark.stop()  # no sink.close(): async compaction may still run
print("stopped", flush=True)
import faulthandler
faulthandler.dump_traceback_later(120, exit=True)  # a thread keeping the process alive: its stack, then exit 1
"""


@pytest.mark.spark
@pytest.mark.slow
def test_spark_stop_without_close_prints_no_traceback(tmp_path):
    script = CHILD.format(
        tests=os.path.join(ROOT, "tests"),
        old=False,
        source=str(tmp_path / "in"),
        table=str(tmp_path / "t"),
        chk=str(tmp_path / "chk"),
    )
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-6000:]
    assert "stopped" in done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "setCallSite" not in done.stderr


class FakeSink:
    path = "/tables/t"

    def __init__(self):
        self.metrics_log = BatchMetrics()

    def metrics(self):
        return self.metrics_log.table()


def test_watch_renders_each_progress_in_print_mode():
    sink = FakeSink()
    lines = []
    view = Watch(None, sink, out=lines.append, notebook=False)
    view._thread.start()
    for batch in range(3):
        sink.metrics_log.record(batch, None, {"prepare": 0.5, "chain": 1.0}, batch)
        view.update(types.SimpleNamespace(batchId=batch, numInputRows=10 * batch, sources=[]))
    view.update(ended=True)
    view._thread.join(10)
    assert not view._thread.is_alive()
    assert [line.split(",")[0] for line in lines] == ["hoodie-stream: batch 0", "hoodie-stream: batch 1"] + [
        "hoodie-stream: batch 2"
    ] * 2
    assert "20 rows in" in lines[2] and "2 pending compactions" in lines[2] and "1.50 s" in lines[2]
    assert lines[-1].endswith("(query ended)")


def test_watch_of_a_debezium_sink_shows_the_whole_micro_batch():
    """A DebeziumSink has a metrics row per table a micro-batch wrote: the view adds them up, it does not show the
    last table's figures as the batch's."""

    class TwoTables:
        def metrics(self):
            row = {f.name: None for f in METRICS_SCHEMA}
            orders = dict(row, table="orders", batch_id=7, instant="1", rows_in=1000, records_written=1000)
            orders.update(records_inserted=1000, records_updated=0, records_deleted=0, files_written=2)
            orders.update(bytes_written=2048, batch_seconds=1.5, source_offsets_behind=40)
            users = dict(orders, table="users", instant="2", rows_in=3, records_written=3, records_inserted=3)
            users.update(files_written=1, bytes_written=1024, batch_seconds=0.5)
            return pa.Table.from_pylist([orders, users])

    view = Watch(None, TwoTables(), out=print, notebook=False)
    view.progress = types.SimpleNamespace(batchId=7, numInputRows=1003, sources=[])
    row = view.latest()
    assert (row["rows_in"], row["records_inserted"], row["files_written"], row["bytes_written"]) == (
        1003,
        1003,
        3,
        3072,
    )
    assert row["batch_seconds"] == 2.0 and row["instant"] == "1, 2" and row["source_offsets_behind"] == 40
    assert "1003 inserts" in view.text() and "1003 rows in" in view.text()
