"""spark.readStream.format("hoodie") (hoodie_stream.spark.stream_reader): a stream chained behind a running sink
(bronze -> silver) ends with the second table equal to the first; each micro-batch holds the records of the commits
since the last offset, once, and compaction commits bring nothing again; startOffset and trigger(availableNow)."""

import json

import pyarrow as pa
import pytest

from crash_harness import completed, kill_when, start_child, timeline_state
from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.spark import register
from oracle import rows
from stream_model import COLUMNS, OPTIONS, SCHEMA_DDL, generate_batches, write_batch_file

MAX_COMMITS = "hoodie.datasource.read.streaming.max.commits"
START_OFFSET = "hoodie.datasource.streaming.startOffset"
N_BATCHES = 6


def upserts(n, seed):
    """Micro-batches of upserts only (the model's batches with their deletes turned into updates)."""
    return [[dict(e, _hoodie_is_deleted=False) for e in batch] for batch in generate_batches(n, seed=seed)]


def data_rows(table):
    return rows(table, COLUMNS)


@pytest.fixture(scope="module", params=[6, 9])
def chained(spark, tmp_path_factory, request):
    """Query 1 writes bronze (async compaction every 2 delta commits) from JSON files, at table version 6 and at 9
    (Hudi 1.x's: offsets are completion times); query 2 reads bronze with readStream.format("hoodie") while query 1
    runs and writes silver through a second sink."""
    register(spark)
    tmp = tmp_path_factory.mktemp("chain")
    source, bronze, silver = str(tmp / "in"), str(tmp / "bronze"), str(tmp / "silver")
    version = {"hoodie.write.table.version": str(request.param)}
    bronze_sink = HoodieStreamSink(
        bronze, dict(OPTIONS, **{"compaction.schedule.enabled": "true", "compaction.delta_commits": "2"}, **version)
    )
    silver_sink = HoodieStreamSink(silver, dict(OPTIONS, **{"hoodie.table.name": "silver"}))
    batches = upserts(N_BATCHES, seed=7)
    write_batch_file(source, 0, batches[0])
    q1 = (
        spark.readStream.schema(SCHEMA_DDL)
        .option("maxFilesPerTrigger", 1)
        .json(source)
        .writeStream.foreachBatch(bronze_sink)
        .option("checkpointLocation", str(tmp / "chk1"))
        .start()
    )
    q1.processAllAvailable()  # bronze exists before query 2 opens it
    stream = spark.readStream.format("hoodie").load(bronze).select(*COLUMNS)
    q2 = (
        stream.writeStream.foreachBatch(silver_sink)
        .option("checkpointLocation", str(tmp / "chk2"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        for i, events in enumerate(batches[1:], start=1):
            write_batch_file(source, i, events)
            q1.processAllAvailable()
        q1.stop()
        bronze_sink.close()  # waits for the running compaction
        q2.processAllAvailable()
    finally:
        q1.stop()
        q2.stop()
        bronze_sink.close()
        silver_sink.close()
    return bronze, silver, q2


def test_chained_stream_ends_with_equal_tables(chained):
    bronze, silver, query = chained
    bronze_table, silver_table = HoodieTable(bronze), HoodieTable(silver)
    actions = [i.action for i in bronze_table.timeline.commits_timeline()]
    assert actions.count("deltacommit") == N_BATCHES and "commit" in actions  # compactions ran meanwhile
    assert data_rows(silver_table.read()) == data_rows(bronze_table.read())
    # the silver stream ran several micro-batches while bronze was written (not one at the end)
    assert len(silver_table.timeline.completed(["deltacommit"])) > 1


def test_one_commit_per_micro_batch_no_duplicates(spark, chained, tmp_path):
    """max.commits=1 with trigger(availableNow): one micro-batch per delta commit (compaction commits make none),
    each holding rows of its commit only; no (key, commit time) twice; the newest streamed version of every key is
    the table's."""
    bronze = chained[0]
    table = HoodieTable(bronze)
    delta_commits = [i.timestamp for i in table.timeline.commits_timeline() if i.action == "deltacommit"]
    seen = []
    query = (
        spark.readStream.format("hoodie")
        .option(MAX_COMMITS, "1")
        .load(bronze)
        .writeStream.foreachBatch(lambda df, epoch: seen.append((epoch, df.toArrow())))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert [epoch for epoch, _ in seen] == list(range(len(delta_commits)))
    for (_, batch), ts in zip(seen, delta_commits):
        assert set(batch["_hoodie_commit_time"].to_pylist()) <= {ts}
    streamed = pa.concat_tables([batch for _, batch in seen]).to_pylist()
    pairs = [(r["_hoodie_record_key"], r["_hoodie_commit_time"]) for r in streamed]
    assert len(pairs) == len(set(pairs))
    newest = {}
    for r in streamed:
        if (
            r["_hoodie_record_key"] not in newest
            or r["_hoodie_commit_time"] > newest[r["_hoodie_record_key"]]["_hoodie_commit_time"]
        ):
            newest[r["_hoodie_record_key"]] = r
    assert data_rows(pa.Table.from_pylist(list(newest.values()))) == data_rows(table.read())


def test_start_offset_instant_and_latest(spark, chained, tmp_path):
    """startOffset=<instant> with availableNow and no limit: one micro-batch, exactly HoodieTable's incremental read
    after that instant (on version 9 a completion time: the commits that completed after it); startOffset=latest:
    no rows."""
    bronze = chained[0]
    table = HoodieTable(bronze)
    deltas = [i for i in table.timeline.commits_timeline() if i.action == "deltacommit"]
    start, after = deltas[len(deltas) // 2].timestamp, deltas[len(deltas) // 2].timestamp
    if table.timeline.layout >= 2:  # the completion time; the incremental read from the next commit's instant on
        start, after = deltas[len(deltas) // 2].completion_time, deltas[len(deltas) // 2 + 1].timestamp
    assert table.config.version in (6, 9)

    def run(offset, name):
        seen = []
        query = (
            spark.readStream.format("hoodie")
            .option(START_OFFSET, offset)
            .load(bronze)
            .writeStream.foreachBatch(lambda df, epoch: seen.append(df.toArrow()))
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        return seen

    seen = run(start, "instant")
    assert len(seen) == 1
    # bronze's async compaction may rewrite a slice between the two reads: a record's file name is all it changes
    columns = [c for c in seen[0].column_names if c != "_hoodie_file_name"]
    assert rows(seen[0], columns) == rows(table.read("incremental", start=after), columns)
    # latest: Spark runs a first micro-batch from the initial offset to itself, which holds nothing
    assert sum(batch.num_rows for batch in run("latest", "latest")) == 0


@pytest.mark.slow
def test_sigkill_of_the_reading_query_then_restart(chained, tmp_path):
    """The reading query (one bronze commit per micro-batch, into silver) is SIGKILLed once silver holds two
    commits, then restarted from its checkpoint: silver ends equal to bronze, with one delta commit per bronze
    delta commit and every Spark batch committed once."""
    bronze = chained[0]
    silver, chk = str(tmp_path / "silver"), str(tmp_path / "chk")

    def start(run):
        return start_child("spark_read_crash_child.py", [bronze, silver, chk, "rows"], tmp_path / f"run-{run}.log")

    proc = start(1)
    kill_when(
        proc, tmp_path / "run-1.log", lambda: len(completed(timeline_state(silver), "deltacommit")) >= 2, "two commits"
    )
    killed_at = len(completed(timeline_state(silver), "deltacommit"))
    proc = start(2)
    assert proc.wait(180) == 0, (tmp_path / "run-2.log").read_text(errors="replace")[-3000:]

    bronze_table, silver_table = HoodieTable(bronze), HoodieTable(silver)
    assert data_rows(silver_table.read()) == data_rows(bronze_table.read())
    bronze_commits = bronze_table.timeline.completed(["deltacommit"])
    silver_commits = silver_table.timeline.completed(["deltacommit"])
    assert killed_at < len(silver_commits) == len(bronze_commits)
    batch_ids = []
    for inst in silver_commits:
        extra = silver_table.timeline.read_commit_metadata(inst.timestamp).extra_metadata
        ((_identifier, batch_id),) = json.loads(extra["_hudi_streaming_sink_checkpoint"]).items()
        batch_ids.append(int(batch_id))
    assert batch_ids == list(range(len(bronze_commits)))
