"""Changelog (CDC) reads through Spark and chains of tables: a bronze table written by HoodieStreamSink with
`hoodie.table.cdc.enabled=true` (a bulk-inserted first micro-batch, then upserts, deletes, in-batch duplicates and
partition moves, with async compaction every 2 delta commits), read with `spark.read` / `spark.readStream` and
`hoodie.datasource.query.incremental.format=cdc`, and applied to a silver table (`changelog_rows` into a
HoodieStreamSink): after every silver commit, silver holds what bronze held at the bronze commit its micro-batch
read up to."""

import json

import pyarrow as pa
import pytest

from crash_harness import completed, kill_when, pending, start_child, timeline_state
from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.spark import register
from oracle import rows
from stream_model import COLUMNS, OPTIONS, events_df, generate_batches, write_batch_file

N_BATCHES = 6
CDC_OPTIONS = {
    "hoodie.datasource.query.type": "incremental",
    "hoodie.datasource.query.incremental.format": "cdc",
}
FLAT = {**CDC_OPTIONS, "hoodie.stream.read.cdc.flat": "true"}
DATA = [c for c in COLUMNS if c != "_hoodie_is_deleted"]


def live_rows(table, as_of=None):
    """The data columns of a snapshot, sorted (deleted records are not in a snapshot)."""
    return rows(table.read(as_of=as_of), DATA)


@pytest.fixture(scope="module")
def bronze(spark, tmp_path_factory):
    register(spark)
    path = str(tmp_path_factory.mktemp("changelog") / "bronze")
    build_bronze(spark, path)
    return path


def build_bronze(spark, path):
    """The bronze table (also read by Apache Hudi's CDC query in tests/test_java_hudi_changelog.py)."""
    options = dict(
        OPTIONS,
        **{
            "hoodie.table.cdc.enabled": "true",
            "compaction.schedule.enabled": "true",
            "compaction.delta_commits": "2",
        },
    )
    sink = HoodieStreamSink(path, options)
    try:
        for i, events in enumerate(generate_batches(N_BATCHES, seed=11, keys_per_batch=30, monotonic=True)):
            sink(events_df(spark, events), i)
    finally:
        sink.close()  # waits for the running compaction


def assert_replays(table):
    """Applying each commit's changes in order to the records before it gives the table as of that commit, through
    compactions."""
    commits = table.timeline.commits_timeline()
    changes = table.read_changes(flat=True).to_pylist()
    state: dict = {}
    data_commits = [i.timestamp for i in commits if not table.timeline.read_commit_metadata(i.timestamp).is_compaction]
    for ts in data_commits:
        for change in (c for c in changes if c["ts_ms"] == ts):
            key = change["_hoodie_record_key"]
            if change["op"] == "d":
                assert state.pop((key, change["_hoodie_partition_path"]))["v"] == change["v"]
            else:
                assert (key, change["_hoodie_partition_path"]) not in state or change["op"] == "u"
                state[(key, change["_hoodie_partition_path"])] = change
        model = pa.Table.from_pylist(list(state.values())) if state else None
        assert (rows(model, DATA) if model is not None else []) == live_rows(table, ts), ts
    return changes


def test_the_changelog_replays_every_commit_of_bronze(bronze):
    """Every kind of change occurs, through the bulk insert and compactions."""
    table = HoodieTable(bronze)
    assert [i.action for i in table.timeline.commits_timeline()].count("commit") >= 2  # bulk insert, a compaction
    changes = assert_replays(table)
    assert {c["op"] for c in changes} == {"i", "u", "d"}


def test_the_sink_logs_changes_on_local_disk_and_on_the_s3_server(spark, location):
    """Every log file a delta commit wrote has its .cdc file, found where its write stat says, and the changes
    replay the table."""
    sink = location.sink(dict(OPTIONS, **{"hoodie.table.cdc.enabled": "true", "compaction.schedule.enabled": "false"}))
    try:
        for i, events in enumerate(generate_batches(3, seed=5, keys_per_batch=20, monotonic=True)):
            sink(events_df(spark, events), i)
    finally:
        sink.close()
    table = location.table()
    stats = [
        s
        for inst in table.timeline.commits_timeline()
        for s in table.timeline.read_commit_metadata(inst.timestamp).all_write_stats()
        if s.is_delta
    ]
    assert stats and all(s.cdc_stats for s in stats)
    logged = {p for s in stats for p in s.cdc_stats}
    assert logged <= {i.path for i in location.storage.list("", recursive=True) if i.path.endswith(".cdc")}
    assert {c["op"] for c in assert_replays(table)} >= {"i", "u"}


def test_spark_batch_reads_are_the_tables(spark, bronze):
    table = HoodieTable(bronze)
    first = table.timeline.commits_timeline()[0].timestamp
    for options, flat in ((CDC_OPTIONS, False), (FLAT, True)):
        for begin in ("0", first):
            got = (
                spark.read.format("hoodie")
                .options(**options)
                .option("hoodie.datasource.read.begin.instanttime", begin)
                .load(bronze)
            )
            want = table.read_changes(start=None if begin == "0" else begin, flat=flat)
            assert got.columns == want.column_names
            assert rows(got.toArrow()) == rows(want)
    json_rows = table.read_changes().to_pylist()
    assert all(r["before"] is None for r in json_rows if r["op"] == "i")
    assert all(r["after"] is None for r in json_rows if r["op"] == "d")
    afters = [(json.loads(r["after"]), r["ts_ms"]) for r in json_rows if r["op"] != "d"]
    # the delta commits' changes, logged in .cdc files, carry the data fields as Hudi reads them; those of the bulk
    # insert's base files, inferred, the whole record
    assert any("_hoodie_commit_time" not in a for a, _ in afters) and any("_hoodie_commit_time" in a for a, _ in afters)
    assert all(a["_hoodie_commit_time"] == ts for a, ts in afters if "_hoodie_commit_time" in a)


def test_a_changelog_read_of_a_table_without_cdc_fails_naming_the_option(spark, tmp_path):
    path = str(tmp_path / "plain")
    sink = HoodieStreamSink(path, OPTIONS)
    try:
        sink(events_df(spark, generate_batches(1, seed=3)[0]), 0)
    finally:
        sink.close()
    reader = spark.read.format("hoodie").options(**CDC_OPTIONS).option("hoodie.datasource.read.begin.instanttime", "0")
    with pytest.raises(Exception, match=r"It isn't a CDC hudi table on .*hoodie\.table\.cdc\.enabled=true"):
        reader.load(path).collect()
    with pytest.raises(Exception, match=r"It isn't a CDC hudi table on .*hoodie\.table\.cdc\.enabled=true"):
        spark.readStream.format("hoodie").options(**CDC_OPTIONS).load(path).writeStream.format("noop").start()


def silver_batches(silver_table, checkpoint):
    """(silver commit, bronze instant its micro-batch read up to) for every silver delta commit."""
    out = []
    for inst in silver_table.timeline.completed(["deltacommit", "commit"]):
        meta = silver_table.timeline.read_commit_metadata(inst.timestamp)
        if meta.is_compaction:
            continue
        ((_identifier, batch_id),) = json.loads(meta.extra_metadata["_hudi_streaming_sink_checkpoint"]).items()
        with open(f"{checkpoint}/offsets/{batch_id}", encoding="utf-8") as f:
            offset = json.loads(f.read().splitlines()[-1])
        out.append((inst.timestamp, offset["instant"]))
    return out


def assert_silver_follows_bronze(bronze, silver, checkpoint):
    bronze_table, silver_table = HoodieTable(bronze), HoodieTable(silver)
    pairs = silver_batches(silver_table, checkpoint)
    data_commits = [
        i.timestamp
        for i in bronze_table.timeline.commits_timeline()
        if not bronze_table.timeline.read_commit_metadata(i.timestamp).is_compaction
    ]
    assert [b for _s, b in pairs] == data_commits  # one silver commit per bronze data commit, in order
    for silver_ts, bronze_ts in pairs:
        assert live_rows(silver_table, silver_ts) == live_rows(bronze_table, bronze_ts), (silver_ts, bronze_ts)
    return pairs


def test_a_changelog_stream_keeps_silver_equal_to_bronze_after_every_commit(spark, bronze, tmp_path):
    silver, checkpoint = str(tmp_path / "silver"), str(tmp_path / "chk")
    silver_sink = HoodieStreamSink(silver, dict(OPTIONS, **{"hoodie.table.name": "silver"}))
    try:
        run_changelog_stream(spark, bronze, silver_sink, checkpoint)
    finally:
        silver_sink.close()
    assert_silver_follows_bronze(bronze, silver, checkpoint)
    deleted = {r["id"] for r in HoodieTable(bronze).read_changes(flat=True).to_pylist() if r["op"] == "d"}
    assert deleted and not deleted <= set(HoodieTable(bronze).read()["id"].to_pylist())


@pytest.mark.slow
def test_sigkill_of_the_changelog_query_then_restart(bronze, tmp_path):
    """The changelog query (one bronze commit per micro-batch, into silver) is SIGKILLed once silver holds two
    commits, then restarted from its checkpoint: after every silver commit silver equals bronze as of the commit
    read up to, and every bronze data commit is applied once."""
    silver, chk = str(tmp_path / "silver"), str(tmp_path / "chk")

    def start(run):
        return start_child("spark_read_crash_child.py", [bronze, silver, chk, "cdc"], tmp_path / f"run-{run}.log")

    proc = start(1)
    kill_when(
        proc, tmp_path / "run-1.log", lambda: len(completed(timeline_state(silver), "deltacommit")) >= 2, "two commits"
    )
    killed_at = len(completed(timeline_state(silver), "deltacommit"))
    proc = start(2)
    assert proc.wait(180) == 0, (tmp_path / "run-2.log").read_text(errors="replace")[-3000:]
    pairs = assert_silver_follows_bronze(bronze, silver, chk)
    assert killed_at < len(pairs)


def test_the_flat_option_needs_the_cdc_format(spark, bronze):
    with pytest.raises(Exception, match="hoodie.stream.read.cdc.flat applies to changelog queries"):
        spark.read.format("hoodie").option("hoodie.stream.read.cdc.flat", "true").load(bronze)


def run_changelog_stream(spark, bronze, silver_sink, checkpoint):
    """The changelog of bronze into silver, one bronze commit per micro-batch, up to bronze's latest commit."""
    from hoodie_stream.spark import changelog_rows

    query = (
        spark.readStream.format("hoodie")
        .options(**FLAT)
        .option("hoodie.datasource.read.streaming.max.commits", "1")
        .load(bronze)
        .writeStream.foreachBatch(lambda df, batch_id: silver_sink(changelog_rows(df), batch_id))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(300)
    finally:
        query.stop()
    assert query.exception() is None


@pytest.mark.slow
def test_sigkill_of_the_bronze_writer_mid_commit(spark, tmp_path, monkeypatch):
    """The query writing bronze (CDC on, async compaction every 2 delta commits) is SIGKILLed with a delta commit in
    flight; the changelog stream then reads bronze into silver and stops before the half-written commit; bronze's
    writer restarts (rolling it back) and finishes; the changelog stream resumes: after every silver commit silver
    equals bronze as of the commit read, each bronze data commit applied once."""
    register(spark)
    source, bronze, silver, chk = (str(tmp_path / n) for n in ("in", "bronze", "silver", "chk"))
    for i, events in enumerate(generate_batches(N_BATCHES, seed=5, keys_per_batch=30, monotonic=True)):
        write_batch_file(source, i, events)
    monkeypatch.setenv(
        "HOODIE_TEST_SINK_OPTIONS",
        json.dumps(
            {"hoodie.table.cdc.enabled": "true", "compaction.schedule.enabled": "true", "compaction.delta_commits": "2"}
        ),
    )

    def start(run):
        return start_child("crash_child.py", [source, bronze, str(tmp_path / "bronze-chk")], tmp_path / f"w{run}.log")

    proc = start(1)

    def in_flight_after_two():
        state = timeline_state(bronze) if (tmp_path / "bronze" / ".hoodie").exists() else {}
        return len(completed(state, "deltacommit")) >= 2 and bool(pending(state, "deltacommit"))

    kill_when(proc, tmp_path / "w1.log", in_flight_after_two, "a third delta commit in flight", timeout=360)
    in_flight = pending(timeline_state(bronze), "deltacommit")
    assert in_flight

    silver_sink = HoodieStreamSink(silver, dict(OPTIONS, **{"hoodie.table.name": "silver"}))
    try:
        run_changelog_stream(spark, bronze, silver_sink, chk)
        read_up_to = [b for _s, b in silver_batches(HoodieTable(silver), chk)]
        assert read_up_to and max(read_up_to) < min(in_flight)  # nothing of the killed commit
        proc = start(2)
        assert proc.wait(300) == 0, (tmp_path / "w2.log").read_text(errors="replace")[-3000:]
        run_changelog_stream(spark, bronze, silver_sink, chk)
    finally:
        silver_sink.close()
    pairs = assert_silver_follows_bronze(bronze, silver, chk)
    assert len(pairs) > len(read_up_to)
