"""Debezium events in Confluent's Avro wire format: the real JSON messages re-encoded as Kafka Connect's
AvroConverter would (tests/debezium_avro.py), flattened Spark-free and streamed through DebeziumSink with the
schemas from a schema registry on loopback, against the plain-Python model of the JSON originals."""

import http.server
import json
import threading

import pyarrow as pa
import pytest

from debezium_avro import to_avro
from debezium_model import final_rows, load_set
from hoodie_stream import DebeziumSink
from hoodie_stream.debezium import avro_envelope, events
from hoodie_stream.errors import HoodieFormatError
from oracle import rs_read
from test_debezium_events import SCHEMA_SETS, assert_rows_match_model, embedded_schemas, kafka_key_fields
from test_debezium_sink import assert_table_matches, batch_ids, table_name


def binary_table(records):
    return pa.table(
        {
            "key": pa.array([r["key"] for r in records], pa.binary()),
            "value": pa.array([r["value"] for r in records], pa.binary()),
            "partition": pa.array([r["partition"] for r in records], pa.int32()),
            "offset": pa.array([r["offset"] for r in records], pa.int64()),
        }
    )


def key_connect(records, key_fields):
    """The Connect key schema of a set whose messages carry none: the key fields of its row."""
    schema = embedded_schemas(records)[0][0]
    after = next(f for f in schema["fields"] if f["field"] == "after")
    return {"type": "struct", "fields": [f for f in after["fields"] if f["field"] in key_fields]}


@pytest.mark.parametrize(("name", "key", "variable_scale"), SCHEMA_SETS, ids=[s[0] for s in SCHEMA_SETS])
def test_every_real_set_in_avro_flattens_as_the_model_says(name, key, variable_scale):
    records = [r for r in load_set(name) if r["topic"] == load_set(name)[0]["topic"]]
    key_fields = key or kafka_key_fields(records)
    avro, schemas = to_avro(records)
    value_ids = sorted({int.from_bytes(r["value"][1:5], "big") for r in avro if r["value"] is not None})
    envelopes = [(avro_envelope.connect_schema(schemas[i]), f"id {i}") for i in value_ids]
    spec = events.topic_spec(
        records[0]["topic"],
        envelopes,
        key_fields,
        variable_scale=variable_scale,
        truncate="skip",
        value_format="avro",
        avro_schemas=schemas,
    )
    out = events.flatten(binary_table(avro), spec)
    assert_rows_match_model(records, out, key_fields, spec.connector)


def test_deletes_take_their_key_from_the_avro_kafka_key():
    records = load_set("pg_flink_products_schema.jsonl")
    keyed = []
    for r in records:
        value = json.loads(r["value"])
        if value["payload"]["op"] == "d":  # replica identity DEFAULT: no before image
            value["payload"]["before"] = None
        payload = value["payload"]["after"] or {"id": 111}
        keyed.append(dict(r, key=json.dumps({"id": payload["id"]}), value=json.dumps(value)))
    connect = key_connect(records, ["id"])
    avro, schemas = to_avro(keyed, key_connect=connect)
    envelopes = [(avro_envelope.connect_schema(schemas[1]), "id 1")]
    spec = events.topic_spec("t", envelopes, ["id"], value_format="avro", avro_schemas=schemas)
    out = events.flatten(binary_table(avro), spec)
    assert out.column("id").to_pylist()[-1] == 111 and out.column("_hoodie_is_deleted").to_pylist()[-1]


def test_a_message_out_of_the_wire_format_or_of_an_unknown_id_is_named():
    records = load_set("mysql_flink_products_schema.jsonl")[:3]
    avro, schemas = to_avro(records)
    envelopes = [(avro_envelope.connect_schema(schemas[1]), "id 1")]
    spec = events.topic_spec("t", envelopes, ["id"], value_format="avro", avro_schemas=schemas)
    plain = [dict(avro[0]), dict(avro[1], value=b'{"json": true}'), dict(avro[2])]
    with pytest.raises(HoodieFormatError, match=r"topic 't' partition 0 offset 1: .*Confluent's Avro wire format"):
        events.flatten(binary_table(plain), spec)
    unknown = [dict(avro[0]), dict(avro[1]), dict(avro[2], value=b"\x00\x00\x00\x00\x09" + avro[2]["value"][5:])]
    with pytest.raises(HoodieFormatError, match=r"partition 0 offset 2: Avro schema id 9 is unknown"):
        events.flatten(binary_table(unknown), spec)


# -- through the sink, with a schema registry -----------------------------------------------------------------------
class Registry:
    """A Confluent-compatible schema registry on loopback: GET /schemas/ids/<id>, basic authentication."""

    def __init__(self, schemas, user="svc", secret="s3cr3t-token"):
        self.schemas, self.requests = dict(schemas), []
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                registry.requests.append((self.path, self.headers.get("Authorization")))
                schema_id = int(self.path.rsplit("/", 1)[-1]) if self.path.startswith("/schemas/ids/") else -1
                if schema_id not in registry.schemas:
                    self.send_response(404)
                    self.end_headers()
                    self.wfile.write(b'{"error_code":40403,"message":"Schema not found"}')
                    return
                body = json.dumps({"schema": json.dumps(registry.schemas[schema_id])}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://{user}:{secret}@127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


AVRO_DDL = "key binary, value binary, topic string, partition int, offset long"
AVRO_COLUMNS = ("key", "value", "topic", "partition", "offset")


def test_two_topics_in_avro_stream_into_tables_that_match_the_model(spark, tmp_path, caplog):
    pg = load_set("pg_flink_products_schema.jsonl")
    my = load_set("mysql_risingwave_customers_schema.jsonl")
    pg_avro, pg_schemas = to_avro(pg, first_id=1)
    my_avro, my_schemas = to_avro(my, first_id=100)
    registry = Registry({**pg_schemas, **my_schemas})
    topics = [pg[0]["topic"], my[0]["topic"]]
    sink = DebeziumSink(
        str(tmp_path / "lake"),
        tables={t: {"hoodie.datasource.write.recordkey.field": "id"} for t in topics},
        value_format="avro",
        schema_registry_url=registry.url,
    )
    try:
        for b in range(2):
            batch = pg_avro[b * 8 : (b + 1) * 8] + my_avro[b * 5 : (b + 1) * 5]
            rows = [tuple(r[c] for c in ("key", "value", "topic", "partition", "offset")) for r in batch]
            sink(spark.createDataFrame(rows, AVRO_DDL), b)
            for records, connector, topic in ((pg, "postgresql", topics[0]), (my, "mysql", topics[1])):
                expected = final_rows(records[: (b + 1) * (8 if topic == topics[0] else 5)], ["id"], connector)
                table = rs_read(str(tmp_path / "lake" / table_name(topic)))
                assert_table_matches(table, expected, ["id"], f"{topic} after batch {b}")
        assert {path for path, _ in registry.requests} == {f"/schemas/ids/{i}" for i in [1, 100]}  # once per id
        assert all(auth and auth.startswith("Basic ") for _, auth in registry.requests)
        # one topic alone: the next micro-batch of its schema ids is written in one pass with that plan (the ids
        # read from the wire format by Spark); redelivered events change nothing
        caplog.set_level("INFO", logger="hoodie_stream")
        for b in (2, 3):
            batch = [dict(r, offset=r["offset"] + 100 * b) for r in pg_avro[(b - 2) * 4 : (b - 1) * 4]]
            sink(spark.createDataFrame([tuple(r[c] for c in AVRO_COLUMNS) for r in batch], AVRO_DDL), b)
        assert not [r for r in caplog.records if "planned again" in r.getMessage()]
        assert_table_matches(
            rs_read(str(tmp_path / "lake" / table_name(topics[0]))),
            final_rows(pg, ["id"], "postgresql"),
            ["id"],
            "redelivered",
        )
        # a schema id the registry does not know: the topic, partition and offset, no secret, no table changed
        unknown = dict(my_avro[0], value=b"\x00\x00\x00\x03\xe7" + my_avro[0]["value"][5:], offset=99)
        rows = [tuple(unknown[c] for c in ("key", "value", "topic", "partition", "offset"))]
        with pytest.raises(
            HoodieFormatError, match=rf"topic '{topics[1]}' partition 0 offset 99: Avro schema id 999"
        ) as raised:
            sink(spark.createDataFrame(rows, AVRO_DDL), 4)
        assert "s3cr3t-token" not in str(raised.value) and "svc" not in str(raised.value)
        assert [r.getMessage() for r in caplog.records if "planned again" in r.getMessage()] == [
            f"micro-batch 4 planned again: topic {topics[1]!r} partition 0 offset 99 is not in the plan of topic "
            f"{topics[0]!r} (a new topic)"
        ]
        assert [batch_ids(tmp_path / "lake" / table_name(t)) for t in topics] == [[0, 1, 2, 3], [0, 1]]
    finally:
        sink.close()
        registry.close()
