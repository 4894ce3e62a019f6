"""The real CDC pipeline: PostgreSQL -> Debezium's PostgreSQL connector in Kafka Connect -> Kafka -> Spark's Kafka
source -> DebeziumSink, on loopback (tests/cdc_pipeline.py, scripts/cdc-env.sh). The ground truth is the database:
after each workload every Hudi table holds, column by column, what `SELECT * FROM` its source table returns, read by
this project's reader, hudi-rs and Apache Hudi itself."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time

import pytest
from pyspark.errors import StreamingQueryException

from cdc_pipeline import ROOT, unique
from cdc_workload import TABLES, create_tables, differences, random_workload, table_path
from hoodie_stream import DebeziumSink, HoodieTable
from hoodie_stream.debezium.source_check import table_rows
from hoodie_stream.notebook import watch
from oracle import rs_read

WAIT = 180  # seconds for a workload's last change to reach every table


def start_query(spark, env, prefix, lake, chk, per_trigger=None):
    sink = DebeziumSink(str(lake))
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", env.bootstrap)
        .option("subscribePattern", prefix + r"\..*")
        .option("startingOffsets", "earliest")
    )
    if per_trigger is not None:
        source = source.option("maxOffsetsPerTrigger", per_trigger)
    query = source.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(chk)).start()
    return sink, query


def wait_until_equal(db, lake, prefix, schema, tables, query, what):
    deadline = time.monotonic() + WAIT
    while True:
        if query.exception() is not None:
            raise AssertionError(f"{what}: the query failed: {query.exception()}")
        diffs = differences(db, lake, prefix, schema, tables)
        if not diffs:
            return
        assert time.monotonic() < deadline, f"{what}: after {WAIT}s the tables still differ: {diffs}"
        time.sleep(1)


def test_topics_of_several_partitions_and_a_table_created_mid_stream(spark, cdc_env, pg_schema, tmp_path):
    """Topics of three Kafka partitions (a key's events stay in one, in order); a table created while the query runs
    is captured (the publication holds every table), its topic picked up by the query's pattern, its Hudi table
    created; the sink's metrics and watch() show the Kafka source's lag from the query's progress; a truncate stops the micro-batch naming topic, partition and offset, with the table unchanged."""
    schema = pg_schema
    rng = random.Random(5)
    db = cdc_env.sql()
    create_tables(db, schema, rng, items=10, others=3)
    prefix = unique("p")
    connector = cdc_env.connector(
        prefix,
        schema,
        **{"topic.creation.default.partitions": 3, "skipped.operations": "none"},  # truncates too
    )
    lake, chk = tmp_path / "lake", tmp_path / "chk"
    sink, query = start_query(spark, cdc_env, prefix, lake, chk, per_trigger=25)
    lines: list[str] = []
    view = watch(query, sink, out=lines.append, notebook=False)
    late = [("late", ["k1", "k2"], [])]
    try:
        random_workload(db, schema, rng, 15, 100)
        db.execute(f"CREATE TABLE {schema}.late (k1 int, k2 text, v numeric(8, 3), PRIMARY KEY (k1, k2))")
        for i in range(30):
            db.execute(f"INSERT INTO {schema}.late VALUES (%s, %s, %s)", (i % 5, f"k{i}", i / 8))
        db.execute(f"UPDATE {schema}.late SET v = v * 2 WHERE k1 = 1")
        db.execute(f"DELETE FROM {schema}.late WHERE k1 = 2")
        wait_until_equal(db, lake, prefix, schema, TABLES + late, query, "after the workload")
        partitions = {
            r["partition"]
            for r in spark.read.format("kafka")
            .option("kafka.bootstrap.servers", cdc_env.bootstrap)
            .option("subscribe", f"{prefix}.{schema}.items")
            .load()
            .select("partition")
            .distinct()
            .collect()
        }
        assert len(partitions) > 1, partitions  # the keys spread over the topic's partitions

        # the Kafka source's lag in the sink's metrics, from the query's progress: behind while 25 offsets per
        # micro-batch catch up, none behind once caught up
        deadline = time.monotonic() + 30
        while True:
            behind = [b for b in sink.metrics().column("source_offsets_behind").to_pylist() if b is not None]
            if behind and behind[-1] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert behind and max(behind) > 0 and behind[-1] == 0, behind
        # and watch()'s line per micro-batch shows the same lag, from the same progress
        deadline = time.monotonic() + 30
        while not (lags := [int(n) for line in lines for n in re.findall(r"lag (\d+) offsets", line)]) or lags[-1]:
            assert time.monotonic() < deadline, lines[-5:]
            time.sleep(0.5)
        assert max(lags) > 0, lines

        path = table_path(lake, prefix, schema, "late")
        before = table_rows(HoodieTable(path).read(), ["k1", "k2"])
        db.execute(f"TRUNCATE {schema}.late")
        with pytest.raises(StreamingQueryException) as stopped:
            query.awaitTermination(WAIT)
        message = str(stopped.value)
        assert f"topic '{prefix}.{schema}.late' partition" in message and "a truncate event ('t')" in message, message
        assert table_rows(HoodieTable(path).read(), ["k1", "k2"]) == before
    finally:
        view.stop()
        query.stop()
        sink.close()
        connector.delete()
        db.close()


def test_the_demo_ends_with_every_table_equal_to_postgresql(cdc_env, tmp_path):
    """examples/cdc_demo.py (what scripts/run-cdc-demo.sh runs once it started the environment)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "cdc_demo.py"), "--lake", str(tmp_path / "lake")],
        env={**os.environ, **cdc_env.env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "every table equals PostgreSQL", done.stdout
    for table in ("customers", "products", "orders"):
        (row,) = [line.split() for line in lines if line.startswith(table)]
        assert row[1] == row[2] and row[3] == "yes", row


@pytest.mark.java_hudi
def test_snapshot_then_a_random_workload_leave_every_table_equal_to_the_database(
    spark, cdc_env, pg_schema, tmp_path, java_hudi
):
    schema = pg_schema
    rng = random.Random(22)
    db = cdc_env.sql()
    # rows before the connector: Debezium's initial snapshot (the first micro-batch, bulk inserted)
    create_tables(db, schema, rng)
    prefix = unique("p")
    connector = cdc_env.connector(prefix, schema)
    lake, chk = tmp_path / "lake", tmp_path / "chk"
    sink, query = start_query(spark, cdc_env, prefix, lake, chk)
    try:
        wait_until_equal(db, lake, prefix, schema, TABLES, query, "after the snapshot")

        next_id = random_workload(db, schema, rng, 40, 100)
        # an update leaving the TOASTed body unchanged (REPLICA IDENTITY DEFAULT: Debezium sends a placeholder)
        db.execute(f"UPDATE {schema}.docs SET title = title || ' (edited)' WHERE id <= 4")
        # a new column while streaming
        db.execute(f"ALTER TABLE {schema}.items ADD COLUMN note text")
        db.execute(f"UPDATE {schema}.items SET note = 'noted ' || id WHERE id % 3 = 0")
        # types widened (int to bigint, a decimal to more digits in the same Avro fixed size) and a column dropped:
        # later events carry the wider types and lack the column, which stays, null in new rows. (real to double is
        # left out: Apache Hudi reads a float of a log block written before the widening through its decimal text,
        # 0.33333334f as 0.33333334, where PostgreSQL and this project's reader give the float's exact value)
        db.execute(
            f"ALTER TABLE {schema}.items ALTER COLUMN n TYPE bigint, ALTER COLUMN price TYPE numeric(11, 2), "
            "DROP COLUMN legacy"
        )
        db.execute(f"UPDATE {schema}.items SET n = n + 5000000000, price = price + 900000000 WHERE id % 4 = 0")
        dropped_at = next_id
        random_workload(db, schema, rng, 20, next_id)
        wait_until_equal(db, lake, prefix, schema, TABLES, query, "after the workload")
        items = HoodieTable(table_path(lake, prefix, schema, "items")).read().to_pylist()
        assert {r["legacy"] for r in items if r["id"] > dropped_at} <= {None}, "rows inserted after the drop"
        assert "kept" in {r["legacy"] for r in items}, "rows untouched since the drop keep their value"
    finally:
        query.stop()
        sink.close()
        connector.delete()
    # Apache Hudi reads the same rows, and hudi-rs those of the tables it can read
    assert differences(db, lake, prefix, schema, TABLES, java_hudi("0.15.0").read) == {}, "Apache Hudi 0.15.0"
    assert differences(db, lake, prefix, schema, TABLES[1:], rs_read) == {}, "hudi-rs"
    # hudi-rs 0.5.0 refuses the items table in its merge of partial updates (on in DebeziumSink's tables) when a log
    # block's column type is not the table's exactly: the decimal widened above ("partial-update column 'price' has
    # type Decimal128(10, 2) but the table schema expects Decimal128(11, 2)"), and by the table's history the list
    # ("'tags' has type List(...) but the table schema expects List(element ...)"). Apache Hudi reads it (above).
    # When hudi-rs reads it, its rows are the database's
    try:
        assert differences(db, lake, prefix, schema, TABLES[:1], rs_read) == {}, "hudi-rs"
    except Exception as err:
        if not re.search(r"partial-update column '(price|tags)' has type", str(err)):
            raise
    db.close()
