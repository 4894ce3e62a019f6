"""The kinds of table the sink writes, each made small by a few micro-batches, for Apache Hudi to read
(tests/test_java_hudi_reads.py). A maker takes the shared SparkSession and a table path and writes the table."""

from __future__ import annotations

from hoodie_stream import DebeziumSink, HoodieStreamSink, HoodieTable, write
from hoodie_stream.cli.rollback import rollback
from hoodie_stream.compaction.offline import clean_table, compact_table
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.archived_timeline import archive_files
from hoodie_stream.storage import storage_for

DDL = "id long, ts long, city string, v string"
DDL_DELETE = DDL + ", _hoodie_is_deleted boolean"
BASE = {
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.datasource.write.partitionpath.field": "city",
    "compaction.schedule.enabled": "false",
    "clean.async.enabled": "false",
}
CITIES = ["sf", "nyc", "sao_paulo"]


def _rows(ids, ts, tag, city=None):
    return [(i, ts, city or CITIES[i % 3], f"{tag}{i}", False) for i in ids]


def _batches(spark, path, options, batches, storage_options=None):
    sink = HoodieStreamSink(path, {**BASE, **options}, storage_options=storage_options)
    try:
        for batch_id, (rows, ddl) in enumerate(batches):
            sink(spark.createDataFrame(rows, ddl), batch_id)
    finally:
        sink.close()


def _upserts_and_deletes(extra_last=()):
    """Insert 12 keys, update some, delete some (with a late version that must lose), insert more."""
    return [
        (_rows(range(12), 10, "a"), DDL_DELETE),
        (_rows([1, 2, 3, 13], 20, "b") + _rows([4], 5, "late"), DDL_DELETE),
        ([(5, 30, CITIES[2], "d5", True), (6, 30, CITIES[0], "d6", True), (7, 1, CITIES[1], "x7", False)], DDL_DELETE),
        (_rows([1, 8, 14, 15], 40, "c") + [(*m, False) for m in extra_last], DDL_DELETE),
    ]


def plain(spark, path, storage_options=None):
    """The default sink: the first micro-batch bulk inserted, then the chain's upserts and deletes in log files."""
    _batches(spark, path, {}, _upserts_and_deletes(), storage_options)


def chain_only(spark, path):
    """Every micro-batch through the chain (log-only file slices), non-partitioned."""
    opts = {"hoodie.stream.bulk_insert.first.batch": "false", "hoodie.datasource.write.partitionpath.field": ""}
    _batches(spark, path, opts, _upserts_and_deletes())


def global_index_moves(spark, path):
    """Keys move to another partition (global index): deleted from the old one, inserted in the new one."""
    moves = [(1, 50, "nyc", "moved1"), (2, 50, "sf", "moved2"), (9, 50, "sf", "moved9")]
    _batches(spark, path, {"hoodie.datasource.write.hive_style_partitioning": "true"}, _upserts_and_deletes(moves))


def url_encoded(spark, path):
    """Hive-style, URL-encoded partition paths of values with '/', ' ' and '%'."""
    odd = ["a/b", "x y", "50%"]
    batches = [
        ([(i, 10, odd[i % 3], f"a{i}") for i in range(9)], DDL),
        ([(1, 20, "a/b", "b1"), (4, 20, "x y", "b4")], DDL),
    ]
    opts = {
        "hoodie.datasource.write.hive_style_partitioning": "true",
        "hoodie.datasource.write.partitionpath.urlencode": "true",
    }
    _batches(spark, path, opts, batches)


def complex_keys(spark, path):
    """Complex key generator: a two-field record key and two partition fields."""
    ddl = "id long, region string, ts long, city string, v string"
    batches = [
        ([(i % 4, f"r{i % 2}", 10, CITIES[i % 3], f"a{i}") for i in range(8)], ddl),
        ([(1, "r1", 20, CITIES[1], "b"), (0, "r0", 20, CITIES[0], "b")], ddl),
    ]
    opts = {
        "hoodie.datasource.write.recordkey.field": "id,region",
        "hoodie.datasource.write.partitionpath.field": "region,city",
        "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.ComplexKeyGenerator",
    }
    _batches(spark, path, opts, batches)


def timestamp_keys(spark, path):
    """Timestamp-based key generator: partitions by day of an epoch-millisecond field."""
    day = 86_400_000
    batches = [
        ([(i, 1_700_000_000_000 + (i % 3) * day, "c", f"a{i}") for i in range(9)], DDL),
        ([(2, 1_700_000_000_000 + 5 * day, "c", "b2")], DDL),
    ]
    opts = {
        "hoodie.datasource.write.partitionpath.field": "ts",
        "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
        "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
        "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd",
        "hoodie.keygen.timebased.timezone": "UTC",
    }
    _batches(spark, path, opts, batches)


def schema_evolution(spark, path):
    """A column added by a later micro-batch, and an int column widened to long."""
    batches = [
        ([(i, 10, CITIES[i % 3], i) for i in range(6)], "id long, ts long, city string, n int"),
        (
            [(1, 20, CITIES[1], 2**40, "new1"), (7, 20, CITIES[1], 7, "new7")],
            "id long, ts long, city string, n long, extra string",
        ),
    ]
    _batches(spark, path, {}, batches)


def partial_update_markers(spark, path):
    """A string column holding the partial-update marker keeps the key's stored value."""
    marker = "__debezium_unavailable_value"
    batches = [
        ([r[:4] for r in _rows(range(6), 10, "a")], DDL),
        ([(1, 20, CITIES[1], marker), (2, 20, CITIES[2], "b2")], DDL),
    ]
    _batches(spark, path, {"hoodie.write.partial.update.mode": "IGNORE_MARKERS"}, batches)


def debezium(spark, path):
    """A DebeziumSink table (its payload class and ordering field) from real PostgreSQL connector messages."""
    from debezium_model import load_set
    from test_debezium_sink import kafka_df

    records = load_set("pg_flink_products_schema.jsonl")
    topic = records[0]["topic"]
    sink = DebeziumSink(path, tables={topic: {"hoodie.datasource.write.recordkey.field": "id", "path": path}})
    try:
        for i in range(0, len(records), 6):
            sink(kafka_df(spark, records[i : i + 6]), i // 6)
    finally:
        sink.close()


def pending_compaction(spark, path):
    """Log files written under a pending compaction plan (the new slice named by the plan's instant)."""
    _batches(spark, path, {}, _upserts_and_deletes()[:2])
    list(compact_table(path, schedule=True, run=False, spark=spark))
    more = _upserts_and_deletes()[2:]
    sink = HoodieStreamSink(path, {**BASE})
    try:
        for batch_id, (rows, ddl) in enumerate(more, start=2):
            sink(spark.createDataFrame(rows, ddl), batch_id)
    finally:
        sink.close()


def inline_compaction(spark, path):
    """Inline compaction every 2 delta commits."""
    opts = {"compaction.schedule.enabled": "true", "compaction.async.enabled": "false", "compaction.delta_commits": "2"}
    _batches(spark, path, opts, _upserts_and_deletes())


def async_compaction(spark, path):
    """Async compaction every 2 delta commits (the sink's default mode), waited for when the sink closes."""
    opts = {"compaction.schedule.enabled": "true", "compaction.async.enabled": "true", "compaction.delta_commits": "2"}
    _batches(spark, path, opts, _upserts_and_deletes())


def compacted_and_cleaned(spark, path):
    """Offline compaction after every micro-batch, then a clean keeping one commit."""
    sink = HoodieStreamSink(path, {**BASE})
    try:
        for batch_id, (rows, ddl) in enumerate(_upserts_and_deletes()):
            sink(spark.createDataFrame(rows, ddl), batch_id)
            list(compact_table(path, spark=spark))
    finally:
        sink.close()
    clean_table(path, {"clean.retain_commits": "1"})


def rolled_back(spark, path):
    """The last delta commit rolled back (its files deleted, a rollback instant), then one more micro-batch."""
    batches = _upserts_and_deletes()
    _batches(spark, path, {}, batches[:3])
    last = Timeline(storage_for(path)).commits_timeline()[-1].timestamp
    rollback(path, last)
    sink = HoodieStreamSink(path, {**BASE})
    try:
        sink(spark.createDataFrame(*batches[3]), 3)
    finally:
        sink.close()


def archived(spark, path):
    """Inline compaction every 2 delta commits, cleaning keeping 2 commits and archiving keeping 3 to 5: after 9
    micro-batches the oldest instants (a compaction among them) are in `.hoodie/archived/`, its small archive files
    merged."""
    opts = {
        "compaction.schedule.enabled": "true",
        "compaction.async.enabled": "false",
        "compaction.delta_commits": "2",
        "clean.retain_commits": "2",
        "hoodie.keep.min.commits": "3",
        "hoodie.keep.max.commits": "5",
        "hoodie.archive.merge.files.batch.size": "2",  # every two small archive files are merged
    }
    more = [(_rows([n % 16, 16 + n], 50 + n, f"e{n}-"), DDL_DELETE) for n in range(5)]
    _batches(spark, path, opts, _upserts_and_deletes() + more)
    table = HoodieTable(path)
    archived = table.archived_timeline().completed(["commit", "deltacommit"])
    assert len(archived) >= 4 and len(table.timeline.commits_timeline()) <= 5, "the table was not archived"
    versions = [v for v, _info in archive_files(table.storage)]
    assert len(versions) < max(versions), f"no archive files were merged: {versions}"


def batch_writes(spark, path):
    """Batch writes (`hoodie_stream.write`), one commit each: a bulk insert, an insert (operation INSERT), and a
    delete of keys only (operation DELETE, applied by arrival; the global index finds their partitions)."""
    operation = "hoodie.datasource.write.operation"
    write(spark.createDataFrame(*_upserts_and_deletes()[0]), path, {**BASE, operation: "bulk_insert"})
    write(spark.createDataFrame(_rows([20, 21, 22], 50, "i"), DDL_DELETE), path, {**BASE, operation: "insert"})
    write(spark.createDataFrame([(1,), (9,), (21,)], "id long"), path, {**BASE, operation: "delete"})


MAKERS = {
    "plain": plain,
    "chain_only": chain_only,
    "global_index_moves": global_index_moves,
    "url_encoded": url_encoded,
    "complex_keys": complex_keys,
    "timestamp_keys": timestamp_keys,
    "schema_evolution": schema_evolution,
    "partial_update_markers": partial_update_markers,
    "debezium": debezium,
    "pending_compaction": pending_compaction,
    "inline_compaction": inline_compaction,
    "async_compaction": async_compaction,
    "compacted_and_cleaned": compacted_and_cleaned,
    "rolled_back": rolled_back,
    "archived": archived,
    "batch_writes": batch_writes,
}
