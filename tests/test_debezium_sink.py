"""DebeziumSink end to end: real Debezium messages (tests/data/debezium) streamed as Kafka-source rows from files
through a streaming query, every table read by hudi-rs after every micro-batch and compared with the plain-Python
model of Debezium semantics (tests/debezium_model.py)."""

import json

import pytest

from debezium_model import KAFKA_DDL, final_rows, load_set
from hoodie_stream import DebeziumSink
from hoodie_stream.debezium import table_name
from oracle import META, _norm, rs_read

# (message set, record key, connector, messages per micro-batch)
SETS = [
    ("pg_flink_products_schema.jsonl", ["id"], "postgresql", 5),
    ("mysql_flink_products_schema.jsonl", ["id"], "mysql", 4),
    ("mysql_risingwave_customers_schema.jsonl", ["id"], "mysql", 3),
    ("pg_risingwave_chbench_neworder.jsonl", ["no_w_id", "no_d_id", "no_o_id"], "postgresql", 60),
    ("pg_risingwave_chbench_district.jsonl", ["d_w_id", "d_id"], "postgresql", 5),
    ("compat_transferia_pg_replica_identity_full.jsonl", None, "postgresql", 1),
    ("compat_transferia_mysql_customers3_crud.jsonl", None, "mysql", 2),
]


def write_batch(directory, index, records):
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".batch-{index:04d}.json"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    tmp.rename(directory / f"batch-{index:04d}.json")


def table_rows(table, key_fields):
    """{record key tuple: row} of a hudi-rs read, values normalized, meta columns left out."""
    out = {}
    if table is None:
        return out
    for row in table.drop_columns([c for c in META if c in table.column_names]).to_pylist():
        out[tuple(row[k] for k in key_fields)] = row
    return out


def assert_table_matches(table, expected, key_fields, context):
    got = table_rows(table, key_fields)
    assert sorted(got, key=repr) == sorted(expected, key=repr), f"{context}: keys differ"
    for key, row in expected.items():
        for column, value in row.items():
            assert _norm(got[key][column]) == _norm(value), f"{context}: key {key} column {column!r}"


def key_fields_of(records, given):
    if given is not None:
        return given
    key = json.loads(next(r["key"] for r in records if r["key"]))
    return [f["field"] for f in key["schema"]["fields"]]


@pytest.mark.parametrize(("name", "key", "connector", "per_batch"), SETS, ids=[s[0] for s in SETS])
def test_real_messages_stream_into_tables_that_match_the_model(spark, tmp_path, name, key, connector, per_batch):
    records = load_set(name)
    topic = records[0]["topic"]
    key_fields = key_fields_of(records, key)
    tables = {topic: {"hoodie.datasource.write.recordkey.field": ",".join(key)}} if key else None
    sink = DebeziumSink(str(tmp_path / "lake"), tables=tables)
    source, chk = tmp_path / "in", tmp_path / "chk"
    batches = [records[i : i + per_batch] for i in range(0, len(records), per_batch)]
    write_batch(source, 0, batches[0])
    stream = spark.readStream.schema(KAFKA_DDL).option("maxFilesPerTrigger", 1).json(str(source))
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(chk)).start()
    path = tmp_path / "lake" / table_name(topic)
    try:
        for i, batch in enumerate(batches):
            if i:
                write_batch(source, i, batch)
            query.processAllAvailable()
            expected = final_rows([r for b in batches[: i + 1] for r in b], key_fields, connector)
            assert_table_matches(rs_read(str(path)), expected, key_fields, f"{name} after batch {i}")
    finally:
        query.stop()
        sink.close()
