"""Writes both ways between this project and Apache Hudi itself (0.15.0 and 1.2.0, tests/java_hudi.py), on one table:

- Hudi's Spark writer (upsert and delete, MERGE_ON_READ, the table's key, ordering field, partition field and payload
  class) commits into a table the sink created, after the full compaction Hudi's Spark indexes need (they find keys
  in base files only); then the sink continues: its index state sees every key Hudi inserted, updated, moved or
  deleted;
- the sink continues tables Hudi created with its defaults (metadata table, its index, inline compaction);
- Hudi runs compaction (`CALL run_compaction`) on plans the sink scheduled and cleaning (`CALL run_clean`), the sink
  runs the plans Hudi scheduled, and writes and compacts on after them.

After every step a plain-Python model of the table (record key -> row), `HoodieTable.read` and Hudi's snapshot read
must agree, row for row."""

from __future__ import annotations

import pyarrow as pa
import pytest

import java_hudi as jh
from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.compaction.offline import compact_table
from oracle import META

pytestmark = [pytest.mark.java_hudi, pytest.mark.spark]

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.string())])
CITIES = ["sf", "nyc", "sao_paulo"]
SINK = {
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.datasource.write.partitionpath.field": "city",
    "compaction.schedule.enabled": "false",
    "clean.async.enabled": "false",
}


def hudi_options(version: str, name: str, global_index: bool = True, **extra) -> dict[str, str]:
    """Hudi's Spark writer options for the same table: key, ordering and partition fields, MERGE_ON_READ, the
    global simple index (a key that changes partition moves, as the sink's global index does; else Hudi's default
    index); 1.2.0 writes table version 6 (without it, it upgrades the table to 9)."""
    opts = {
        "hoodie.table.name": name,
        "hoodie.datasource.write.table.type": "MERGE_ON_READ",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.partitionpath.field": "city",
        "hoodie.upsert.shuffle.parallelism": "2",
        "hoodie.insert.shuffle.parallelism": "2",
        "hoodie.delete.shuffle.parallelism": "2",
    }
    if global_index:
        opts["hoodie.index.type"] = "GLOBAL_SIMPLE"
        opts["hoodie.simple.index.update.partition.path"] = "true"
    if version != "0.15.0":
        opts["hoodie.write.table.version"] = "6"
        opts["hoodie.write.auto.upgrade"] = "false"
    opts.update(extra)
    return opts


class Model:
    """The table as a dict: record key -> (ts, city, v). Event-time ordering (DefaultHoodieRecordPayload, what the
    sink creates): an upsert wins with a ts at least the stored one; commit-time ordering
    (OverwriteWithLatestAvroPayload, Hudi 0.15's default for the tables its Spark writer creates): the later write."""

    def __init__(self, event_time=True):
        self.rows: dict[int, tuple] = {}
        self.event_time = event_time

    def follow(self, path):
        """Take the ordering of the table at `path` from its payload class."""
        payload = HoodieTable(path).config.props.get("hoodie.compaction.payload.class", "")
        self.event_time = payload.rpartition(".")[2] in ("DefaultHoodieRecordPayload", "EventTimeAvroPayload")
        return self

    def upsert(self, rows):
        for i, ts, city, v in rows:
            if i not in self.rows or not self.event_time or ts >= self.rows[i][0]:
                self.rows[i] = (ts, city, v)

    def delete(self, ids):
        for i in ids:
            self.rows.pop(i, None)

    def expected(self):
        return sorted((i, *r) for i, r in self.rows.items())


def table_rows(table: pa.Table | None):
    if table is None:
        return []
    return sorted(tuple(r[c] for c in ("id", "ts", "city", "v")) for r in table.to_pylist())


def check(path, model, hudi, context):
    """Model, HoodieTable.read and Hudi's snapshot hold the same rows; ours and Hudi's agree on the meta columns."""
    ours = HoodieTable(path).read()
    assert table_rows(ours) == model.expected(), f"{context}: HoodieTable.read differs from the model"
    theirs = hudi.read(path, jh.snapshot())
    assert table_rows(theirs) == model.expected(), f"{context}: Hudi {hudi.version} differs from the model"
    ok, why = jh.same_rows(ours, theirs, sorted(META + ["id", "ts", "city", "v"]))
    assert ok, f"{context}: Hudi {hudi.version} vs HoodieTable.read: {why}"


def rows_table(rows):
    """Rows for Hudi's writer, with the table's `_hoodie_is_deleted` column (false)."""
    table = pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], SCHEMA)
    return table.append_column("_hoodie_is_deleted", pa.array([False] * len(rows), pa.bool_()))


def sink_write(spark, path, batches, model, start_id=0, **options):
    sink = HoodieStreamSink(path, {**SINK, **options})
    try:
        for batch_id, (rows, deletes) in enumerate(batches, start=start_id):
            data = [(*r, False) for r in rows] + [(i, 10**6, city, "", True) for i, city in deletes]
            ddl = "id long, ts long, city string, v string, _hoodie_is_deleted boolean"
            sink(spark.createDataFrame(data, ddl), batch_id)
            model.upsert(rows)
            model.delete(i for i, _ in deletes)
    finally:
        sink.close()


def initial(n, ts=10, tag="a"):
    return [(i, ts, CITIES[i % 3], f"{tag}{i}") for i in range(n)]


@pytest.mark.parametrize("version", jh.VERSIONS)
def test_hudi_writes_into_a_sink_table_after_a_full_compaction_and_the_sink_continues(
    java_hudi, spark, tmp_path, version
):
    hudi = java_hudi(version)
    path = str(tmp_path / "t")
    model = Model()
    # the sink: a bulk-inserted first batch, then updates, a partition move, deletes and inserts into log files
    sink_write(
        spark,
        path,
        [(initial(12), []), ([(1, 20, "sf", "b1"), (4, 20, "nyc", "b4"), (12, 20, "sf", "n12")], [(2, "sao_paulo")])],
        model,
    )
    check(path, model, hudi, "after the sink")
    # what a user does before writing with Hudi's Spark writer: a full compaction, every latest slice a base file
    list(compact_table(path, spark=spark))
    assert all(not s["log_files"] for s in HoodieTable(path).file_slices().to_pylist()), "a slice kept log files"
    # Hudi: updates (one moves partition, one is late), inserts, then deletes
    ups = [
        (1, 30, "nyc", "h1"),
        (5, 30, "sao_paulo", "h5"),
        (7, 5, "nyc", "late7"),
        (20, 30, "sf", "h20"),
        (12, 30, "sf", "h12"),
    ]
    hudi.write(path, rows_table(ups), hudi_options(version, "t"))
    model.upsert(ups)
    check(path, model, hudi, "after Hudi's upsert")
    deleted = [(3, 40, "sf", ""), (20, 40, "sf", "")]
    hudi.write(path, rows_table(deleted), hudi_options(version, "t", **{"hoodie.datasource.write.operation": "delete"}))
    model.delete(i for i, *_ in deleted)
    check(path, model, hudi, "after Hudi's delete")
    # the sink again: its index state must see what Hudi inserted, updated, moved and deleted
    batches = [
        (
            [
                (20, 50, "nyc", "s20"),
                (1, 50, "nyc", "s1"),
                (5, 50, "sf", "s5"),
                (12, 25, "sf", "late12"),
                (3, 50, "sf", "s3"),
            ],
            [(7, "nyc")],
        ),
        ([(30, 60, "sf", "s30")], [(1, "nyc")]),
    ]
    sink_write(spark, path, batches, model, start_id=2)
    check(path, model, hudi, "after the sink continued")


SHAPES = {  # Hudi's writer options beyond its defaults, and the sink's matching options
    "partitioned": ({}, {}),
    "nonpartitioned_bloom": (
        {
            "hoodie.datasource.write.partitionpath.field": "",
            "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
            "hoodie.index.type": "BLOOM",
        },
        {"hoodie.datasource.write.partitionpath.field": ""},
    ),
}


@pytest.mark.parametrize(
    ("version", "shape"), [("0.15.0", "partitioned"), ("0.15.0", "nonpartitioned_bloom"), ("1.2.0", "partitioned")]
)
def test_the_sink_continues_a_table_hudi_created_with_its_defaults(java_hudi, spark, tmp_path, version, shape):
    """Hudi's defaults (the metadata table, its index, its payload class) and inline compaction every 2 delta commits;
    partitioned with Hudi's default index, or not partitioned with the bloom index."""
    hudi = java_hudi(version)
    path = str(tmp_path / "t")
    model = Model()
    hudi_extra, sink_extra = SHAPES[shape]
    inline = {"hoodie.compact.inline": "true", "hoodie.compact.inline.max.delta.commits": "2"}
    opts = hudi_options(version, "t", global_index=False, **inline)
    opts.update(hudi_extra)
    writes = [
        initial(9),
        [(1, 20, "nyc", "b1"), (9, 20, "sf", "b9")],
        [(2, 30, "sao_paulo", "c2"), (10, 30, "nyc", "c10")],
    ]
    for rows in writes:
        hudi.write(path, rows_table(rows), opts)
        model.follow(path).upsert(rows)
    hudi.write(path, rows_table([(4, 40, "nyc", "")]), {**opts, "hoodie.datasource.write.operation": "delete"})
    model.delete([4])
    check(path, model, hudi, "after Hudi")
    batches = [
        ([(1, 50, "nyc", "s1"), (10, 5, "nyc", "late10"), (11, 50, "sf", "s11"), (2, 50, "sf", "moved2")], [(9, "sf")]),
        ([(4, 60, "nyc", "back4"), (11, 60, "sf", "s11b")], [(0, "sf")]),
    ]
    sink_write(spark, path, batches, model, **sink_extra)
    check(path, model, hudi, "after the sink continued")
    list(compact_table(path, spark=spark))
    check(path, model, hudi, "after the sink's offline compaction")


@pytest.mark.parametrize("version", jh.VERSIONS)
def test_hudi_runs_the_sinks_plans_and_cleans_and_the_sink_runs_hudis_plans(java_hudi, spark, tmp_path, version):
    hudi = java_hudi(version)
    path = str(tmp_path / "t")
    model = Model()
    sink_write(spark, path, [(initial(9), []), ([(1, 20, "nyc", "b1"), (10, 20, "sf", "n10")], [(3, "sf")])], model)
    # a plan the sink scheduled, run by Hudi
    scheduled = [line for line in compact_table(path, schedule=True, run=False, spark=spark) if "scheduled" in line]
    assert scheduled, "the sink scheduled no compaction"
    keep_v6 = "" if version == "0.15.0" else "hoodie.write.table.version=6,hoodie.write.auto.upgrade=false"
    write_version = f", options => '{keep_v6}'" if keep_v6 else ""
    hudi.sql(f"CALL run_compaction(op => 'execute', path => '{path}'{write_version})")
    table = HoodieTable(path)
    assert not table.timeline.pending(["compaction"]), "Hudi left the sink's plan pending"
    check(path, model, hudi, "after Hudi ran the sink's plan")
    # the sink writes and compacts inline after it
    inline = {
        "compaction.schedule.enabled": "true",
        "compaction.async.enabled": "false",
        "compaction.delta_commits": "1",
    }
    sink_write(
        spark, path, [([(1, 30, "sf", "c1"), (11, 30, "nyc", "n11")], [(4, "nyc")])], model, start_id=2, **inline
    )
    check(path, model, hudi, "after the sink's next batch and inline compaction")
    # Hudi cleans (by table name: its procedure takes no path)
    name = f"sink_{version.replace('.', '_')}"
    hudi.sql(f"CREATE TABLE IF NOT EXISTS {name} USING hudi LOCATION '{path}'")
    hudi.sql(f"CALL run_clean(table => '{name}', retain_commits => 1{write_version})")
    assert HoodieTable(path).timeline.completed(["clean"]), "Hudi's clean completed no clean instant"
    check(path, model, hudi, "after Hudi's clean")
    # a plan Hudi scheduled, run by the sink's offline compaction, then the sink writes on
    sink_write(spark, path, [([(2, 40, "sao_paulo", "d2")], [(5, "sao_paulo")])], model, start_id=3)
    every_commit = ",".join(filter(None, ["hoodie.compact.inline.max.delta.commits=1", keep_v6]))
    hudi.sql(f"CALL run_compaction(op => 'schedule', path => '{path}', options => '{every_commit}')")
    pending = HoodieTable(path).timeline.pending(["compaction"])
    assert pending, "Hudi scheduled no compaction"
    done = [line for line in compact_table(path, schedule=False, run=True, spark=spark) if "completed" in line]
    assert done == [f"completed compaction {pending[0].timestamp}"]
    check(path, model, hudi, "after the sink ran Hudi's plan")
    sink_write(spark, path, [([(6, 50, "sf", "e6"), (12, 50, "nyc", "n12")], [(1, "sf")])], model, start_id=4)
    check(path, model, hudi, "after the sink wrote on")


def test_without_the_full_compaction_hudis_index_misses_keys_in_log_files(java_hudi, spark, tmp_path):
    """Why the compaction above is needed: keys the chain wrote into log-only file slices are invisible to Hudi's
    Spark indexes (they read base files only), so Hudi's upsert of such a key inserts it a second time."""
    hudi = java_hudi("0.15.0")
    path = str(tmp_path / "t")
    sink_write(spark, path, [(initial(6), [])], Model(), **{"hoodie.stream.bulk_insert.first.batch": "false"})
    assert all(not s["base_file"] for s in HoodieTable(path).file_slices().to_pylist())
    hudi.write(path, rows_table([(1, 20, "nyc", "h1")]), hudi_options("0.15.0", "t"))
    keys = [r["id"] for r in hudi.read(path, jh.snapshot()).to_pylist()]
    assert sorted(keys) == [0, 1, 1, 2, 3, 4, 5], "Hudi's index found a key held in a log file only"


def test_the_sink_continues_a_table_hudis_streaming_sink_wrote_with_async_compaction(java_hudi, spark, tmp_path):
    """Hudi 0.15's Structured Streaming sink (its defaults: async compaction for MERGE_ON_READ, here every 2 delta
    commits), a delete by `_hoodie_is_deleted`; then the sink continues, running any plan Hudi left pending."""
    hudi = java_hudi("0.15.0")
    path = str(tmp_path / "t")
    model = Model()
    opts = hudi_options("0.15.0", "t", global_index=False, **{"hoodie.compact.inline.max.delta.commits": "2"})
    writes = [
        initial(9),
        [(1, 20, "nyc", "b1"), (9, 20, "sf", "b9")],
        [(2, 30, "sao_paulo", "c2")],
        [(5, 40, "sao_paulo", "d5")],
    ]
    batches = [rows_table(rows) for rows in writes]
    gone = rows_table([(4, 50, "nyc", "")])
    batches.append(gone.set_column(4, "_hoodie_is_deleted", pa.array([True])))
    hudi.stream_write(path, batches, opts)
    model.follow(path)
    for rows in writes:
        model.upsert(rows)
    model.delete([4])
    timeline = HoodieTable(path).timeline
    assert len(timeline.completed(["deltacommit"])) == len(batches), "Hudi's stream wrote one delta commit a batch"
    assert timeline.completed(["commit"]) or timeline.pending(["compaction"]), "Hudi scheduled no compaction"
    check(path, model, hudi, "after Hudi's stream")
    inline = {
        "compaction.schedule.enabled": "true",
        "compaction.async.enabled": "false",
        "compaction.delta_commits": "1",
        # Hudi's stream recorded its batch ids 0-4 under the default writer identifier, which the sink shares:
        # batches called without a streaming query (no query id to tell them apart) take another identifier, or
        # the sink would skip them as written (exactly once)
        "hoodie.datasource.write.streaming.checkpoint.identifier": "hoodie-stream",
    }
    batches = [([(1, 60, "nyc", "s1"), (12, 60, "sf", "s12")], [(9, "sf")]), ([(2, 70, "sf", "moved2")], [])]
    sink_write(spark, path, batches, model, **inline)
    assert not HoodieTable(path).timeline.pending(["compaction"]), "a compaction plan stayed pending"
    check(path, model, hudi, "after the sink continued and compacted")
