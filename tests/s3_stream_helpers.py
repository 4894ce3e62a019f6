"""Helpers of the streaming tests on the S3 server (tests/s3_server.py): starting a query of the stream model's
batches on an `s3://` table, reading the table back through hudi-rs and HoodieTable with the same storage options,
and checking that no data file of an unfinished instant is left behind."""

from __future__ import annotations

import json

import pyarrow as pa

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.checkpoints.batch_checkpoint import CHECKPOINT_KEY
from hoodie_stream.format.file_group.file_names import parse_base_file_name, parse_log_file_name
from hoodie_stream.storage import storage_for
from stream_model import OPTIONS, SCHEMA_DDL, table_rows

# leases that expire, renew and give up quickly (the defaults are 300 s, 30 s and 60 s)
FAST_LEASE = {
    "hoodie.write.lock.storage.validity.timeout.secs": "4",
    "hoodie.write.lock.storage.renew.interval.secs": "0.5",
    "hoodie.write.lock.wait_time_ms": "1500",
}


def sink_options(**extra: str) -> dict[str, str]:
    return {**OPTIONS, **FAST_LEASE, **extra}


def start_query(spark, sink: HoodieStreamSink, source: str, checkpoint: str):
    """A streaming query of the JSON batch files in `source` (one file per micro-batch) through `sink`."""
    stream = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(source)
    return stream.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start()


def rs_rows(uri: str, storage_options: dict[str, str]) -> list[dict]:
    """The table's rows as hudi-rs reads them (snapshot), in the model's shape."""
    from hudi import HudiReadOptions, HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(uri).with_storage_options(storage_options).build()
    batches = table.read(HudiReadOptions())
    return table_rows(pa.Table.from_batches(batches) if batches else None)


def our_rows(uri: str, storage_options: dict[str, str]) -> list[dict]:
    return table_rows(HoodieTable(uri, storage_options=storage_options).read())


def assert_table_is(uri: str, storage_options: dict[str, str], expected: list[dict], context: str) -> None:
    """Both readers see exactly `expected` (the model's rows)."""
    assert rs_rows(uri, storage_options) == expected, f"{context}: hudi-rs"
    assert our_rows(uri, storage_options) == expected, f"{context}: HoodieTable"


def completed_batches(uri: str, storage_options: dict[str, str]) -> list[tuple[str, dict[str, int]]]:
    """(instant, {writer identifier: batch id}) of every completed delta commit, in timeline order (a commit
    carries the checkpoints of the table's earlier writers forward, as Hudi does)."""
    table = HoodieTable(uri, storage_options=storage_options)
    out = []
    for inst in table.timeline.completed(["deltacommit"]):
        entries = json.loads(table.timeline.read_commit_metadata(inst.timestamp).extra_metadata[CHECKPOINT_KEY])
        out.append((inst.timestamp, {k: int(v) for k, v in entries.items()}))
    return out


def identifier(query_id: str) -> str:
    """The writer identifier of a streaming query through a sink with the default checkpoint identifier."""
    return f"default_single_writer-{query_id}"


def assert_only_committed_files(uri: str, storage_options: dict[str, str]) -> None:
    """Every data file under the table root (outside .hoodie) is listed by a completed commit: nothing an
    unfinished or rolled back instant wrote is left where a reader could find it."""
    table = HoodieTable(uri, storage_options=storage_options)
    done = {i.timestamp for i in table.timeline.commits_timeline()}
    listed = {stat.path for ts in done for stat in table.timeline.read_commit_metadata(ts).all_write_stats()}
    storage = storage_for(uri, storage_options)
    for info in storage.list("", recursive=True):
        if info.path.startswith(".hoodie/"):
            continue
        name = info.path.rpartition("/")[2]
        if parse_log_file_name(name) is not None or parse_base_file_name(name) is not None:
            assert info.path in listed, f"{info.path}: no completed commit lists this data file"


def pending_instants(uri: str, storage_options: dict[str, str]) -> list[str]:
    """Names of the timeline files of instants that are not completed (requested / inflight; a compaction
    completes as `<instant>.commit`)."""
    storage = storage_for(uri, storage_options)
    names = [info.path.rpartition("/")[2] for info in storage.list(".hoodie")]
    done = {n.split(".")[0] for n in names if n.count(".") == 1 and n.split(".")[0].isdigit()}  # a compaction
    return sorted(n for n in names if n.endswith((".requested", ".inflight")) and n.split(".")[0] not in done)


def writing_instants(storage):
    """Pending delta commits that have markers: their log files are being written."""
    names = {info.path.rpartition("/")[2] for info in storage.list(".hoodie")}
    pending = {n.split(".")[0] for n in names if n.endswith(".deltacommit.inflight")} - {
        n.split(".")[0] for n in names if n.endswith(".deltacommit")
    }
    return sorted(ts for ts in pending if storage.list(f".hoodie/.temp/{ts}", recursive=True))
