"""What the sink reports of a micro-batch, without Spark: a key moved to another partition (global index) is
counted as a move, not as a delete, by the write task, the coordinator, the metrics row, the commit's extra
metadata and the command line, while the write stats' numDeletes count its old copy's delete as Hudi's writers do;
the per-batch log line names the table (and, for a DebeziumSink, the topic)."""

import json
import logging

import pyarrow as pa

from hoodie_stream.__main__ import main
from hoodie_stream.chain.columns import FILE_ID, KEY, KIND, PARTITION, SEQ, RecordKind
from hoodie_stream.chain.stages import BatchContext, WriteSpec
from hoodie_stream.debezium import DebeziumSink
from hoodie_stream.format.timeline.commit_metadata import RECORDS_MOVED_KEY, CommitMetadata, WriteStat
from hoodie_stream.format.write.writer import HoodieWriter
from hoodie_stream.storage import storage_for
from hoodie_stream.streaming_sink import write_function as wf
from hoodie_stream.streaming_sink.batch_metrics import log_batch, result_figures
from hoodie_stream.streaming_sink.coordinator import BatchResult, parse_task_results

INSTANT = "20260101000000001"


def test_the_write_task_counts_the_deletes_of_moved_keys(tmp_path, monkeypatch):
    written = []

    def append_log(storage, instant, partition, file_id, *args, deletes=None, **kwargs):
        keys, ordering = deletes
        written.append((file_id, keys.to_pylist(), ordering.to_pylist()))
        return WriteStat(file_id=file_id, path=f"{partition}/.{file_id}_{instant}.log.1_0-0-0", num_deletes=len(keys))

    monkeypatch.setattr(wf, "append_log", append_log)
    monkeypatch.setattr(wf.BufferedWriter, "_slice_of", lambda self, partition, file_id, table: (INSTANT, "", False))
    context = BatchContext(storage_for(str(tmp_path)), INSTANT, "upsert", "ts", ("id", "ts"))
    writer = wf.BufferedWriter(wf.StreamWriteFunction(context, WriteSpec(None, 1 << 30, 1 << 30)), "0-0-0", 0)
    kinds = [RecordKind.DELETE_MOVED, RecordKind.DELETE_ORDERED, RecordKind.DELETE_MOVED, RecordKind.DELETE_MOVED]
    writer.add(
        pa.table(
            {
                "id": pa.array([1, 2, 3, 4], pa.int64()),
                "ts": pa.array([5, 6, 7, 8], pa.int64()),
                KEY: ["1", "2", "3", "4"],
                PARTITION: ["p1"] * 4,
                FILE_ID: ["f-a", "f-a", "f-b", "f-b"],
                KIND: pa.array(kinds, pa.int8()),
                SEQ: pa.array([0, 1, 2, 3], pa.int64()),
            }
        )
    )
    writer.flush_all()
    # moved keys' deletes apply by arrival (no ordering value), the others by their ordering value
    assert written == [("f-a", ["1", "2"], [None, 6]), ("f-b", ["3", "4"], [None, None])]
    stats, _flushes, moved = parse_task_results(zip(*[c.to_pylist() for c in writer.results().columns]))
    assert sum(s.num_deletes for s in stats) == 4 and moved == 3


def test_metrics_count_deletes_apart_from_moves():
    """200 deletes and 393 keys moved: numDeletes says 593, the sink's figures say 200 and 393."""
    rows = [
        ("stat", json.dumps(WriteStat(file_id=f"f{i}", path=f"p/f{i}", num_deletes=n).to_dict()))
        for i, n in enumerate([300, 293])
    ]
    rows.append(
        (
            "flushes",
            json.dumps(
                {"bucket": 0, "task": 0, "end": 2, "measured": 1, "peak_buffered": 1, "peak_real": 1, "moved": 393}
            ),
        )
    )
    stats, flushes, moved = parse_task_results(rows)
    result = BatchResult(INSTANT, stats, flushes, moved=moved)
    assert (result.num_deletes, result.num_moved) == (200, 393)
    assert "deletes=200, moves=393" in repr(result)
    figures = result_figures(result)
    assert (figures["records_deleted"], figures["records_moved"]) == (200, 393)
    meta = CommitMetadata({"p": stats}, extra_metadata={RECORDS_MOVED_KEY: "393"})
    assert (meta.records_deleted, meta.records_moved) == (200, 393)
    other = CommitMetadata({"p": stats})  # a commit that does not record moves (another writer's)
    assert (other.records_deleted, other.records_moved) == (593, None)


def test_commits_and_summary_report_moves_apart(capsys, tmp_path):
    schema = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64())])
    writer = HoodieWriter.create(
        str(tmp_path / "t"),
        table_name="t",
        record_key_fields=["id"],
        schema=schema,
        precombine_field="ts",
        partition_fields=["city"],
    )
    txn = writer.start(operation="INSERT")
    base = txn.write_base("sf", pa.table({"id": [1, 2, 3], "city": ["sf"] * 3, "ts": [1, 1, 1]}, schema))
    first = txn.commit()
    txn = writer.start()  # keys 1 and 2 move to nyc, key 3 is deleted
    txn.append_log(
        "sf", base.file_id, first, deletes=(pa.array(["1", "2", "3"]), None), base_file=base.path.rsplit("/", 1)[-1]
    )
    txn.insert_log_only("nyc", pa.table({"id": [1, 2], "city": ["nyc"] * 2, "ts": [2, 2]}, schema))
    second = txn.commit({RECORDS_MOVED_KEY: "2"})
    assert main(["commits", str(tmp_path / "t"), "--json"]) == 0
    commits = json.loads(capsys.readouterr().out)
    assert [(c["instant"], c["records_deleted"], c["records_moved"]) for c in commits] == [
        (first, 0, None),
        (second, 1, 2),
    ]
    assert main(["summary", str(tmp_path / "t"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [(c["records_deleted"], c["records_moved"]) for c in summary["commits"]] == [(0, None), (1, 2)]


def test_the_batch_line_names_the_table_and_topic(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="hoodie_stream")
    sink = DebeziumSink(str(tmp_path / "lake"))._sink("pg.public.orders", ["id"])
    row = {
        "batch_id": 3,
        "instant": INSTANT,
        "records_written": 314,
        "records_inserted": 187,
        "records_updated": 127,
        "records_deleted": 13,
        "records_moved": 4,
        "files_written": 8,
        "batch_seconds": 0.89,
    }
    log_batch(logging.getLogger("hoodie_stream"), row, sink.log_name)
    assert caplog.messages == [
        f"topic 'pg.public.orders', table 'pg_public_orders' at {sink.path}: batch 3 committed as {INSTANT}: "
        "331 records (187 inserts, 127 updates, 13 deletes, 4 moves), 8 files, 0.89 s"
    ]
    assert sink.path.endswith("/lake/pg_public_orders")
