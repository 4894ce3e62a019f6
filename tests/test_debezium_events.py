"""Debezium events flattened into rows (hoodie_stream.debezium.events), Spark-free, against the plain-Python model
(tests/debezium_model.py) on every real message set of tests/data/debezium, with schemas and without (the schema
given per topic), plus the ordering value, the policies and the errors."""

import dataclasses
import decimal
import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debezium_model import event_row, load_set, order_value
from hoodie_stream.debezium import events, json_envelope, types, undeclared
from hoodie_stream.errors import HoodieFormatError
from oracle import _norm

# (message set, record key (None: the Kafka key's fields), VariableScaleDecimal mode)
SCHEMA_SETS = [
    ("pg_flink_products_schema.jsonl", ["id"], (38, 10)),
    ("mysql_flink_products_schema.jsonl", ["id"], (38, 10)),
    ("mysql_risingwave_customers_schema.jsonl", ["id"], (38, 10)),
    ("pg_risingwave_chbench_warehouse.jsonl", ["w_id"], (38, 10)),
    ("pg_risingwave_chbench_district.jsonl", ["d_w_id", "d_id"], (38, 10)),
    ("pg_risingwave_chbench_neworder.jsonl", ["no_w_id", "no_d_id", "no_o_id"], (38, 10)),
    ("mysql_paimon_alltypes_decimal_string.jsonl", ["_id"], (38, 10)),
    ("compat_transferia_pg_basic_types_crud.jsonl", None, "string"),
    ("compat_transferia_pg_replica_identity_full.jsonl", None, (38, 10)),
    ("compat_transferia_mysql_customers3_crud.jsonl", None, (38, 10)),
    ("compat_seatunnel_mysql_alltypes_decimal_numeric.jsonl", ["id"], (38, 10)),
]
# bare messages (schemas.enable=false) and the set whose embedded schema is theirs
BARE_SETS = [
    ("pg_flink_products_noschema.jsonl", "pg_flink_products_schema.jsonl", ["id"]),
    ("mysql_risingwave_customers_noschema.jsonl", "mysql_risingwave_customers_schema.jsonl", ["id"]),
    ("mysql_seatunnel_products_noschema.jsonl", "mysql_flink_products_schema.jsonl", ["id"]),
]
# the row schema of pg_toast_authors_noschema (PostgreSQL inventory.authors), as Debezium describes such a table
AUTHORS = {
    "type": "struct",
    "name": "dbserver2.inventory.authors.Value",
    "fields": [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "first_name"},
        {"type": "string", "optional": True, "field": "last_name"},
        {"type": "string", "optional": True, "field": "biography"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "field": "dob"},
    ],
}


def kafka_table(records):
    return pa.table(
        {
            "key": pa.array([r["key"] for r in records], pa.string()),
            "value": pa.array([r["value"] for r in records], pa.string()),
            "partition": pa.array([r["partition"] for r in records], pa.int32()),
            "offset": pa.array([r["offset"] for r in records], pa.int64()),
        }
    )


def embedded_schemas(records):
    values = [r["value"] for r in records if r["value"] is not None and r["value"].startswith('{"schema"')]
    return [(g.schema, "test") for g in json_envelope.group_by_schema(pa.array(values))]


def kafka_key_fields(records):
    key = json.loads(next(r["key"] for r in records if r["key"]))
    return [f["field"] for f in key["schema"]["fields"]] if "schema" in key else list(key)


def assert_rows_match_model(records, out, key_fields, connector, schema=None):
    expected = [event_row(r, key_fields, connector, schema) for r in records]
    expected = [e[3] for e in expected if e is not None]
    got = out.to_pylist()
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        for column, value in e.items():
            ours = g[column]
            if isinstance(ours, str) and isinstance(value, decimal.Decimal):  # VariableScaleDecimal as text
                ours = decimal.Decimal(ours)
            assert ours == value or _norm(ours) == _norm(value), f"row {i} column {column!r}: {ours!r} != {value!r}"
    assert set(got[0]) == set(expected[0]) if got else True


@pytest.mark.parametrize(("name", "key", "variable_scale"), SCHEMA_SETS, ids=[s[0] for s in SCHEMA_SETS])
def test_every_real_set_with_schemas_flattens_as_the_model_says(name, key, variable_scale):
    records = load_set(name)
    by_topic = {}
    for r in records:
        by_topic.setdefault(r["topic"], []).append(r)
    for topic, part in by_topic.items():
        key_fields = key or kafka_key_fields(part)
        envelopes = embedded_schemas(part)
        spec = events.topic_spec(topic, envelopes, key_fields, variable_scale=variable_scale, truncate="skip")
        out = events.flatten(kafka_table(part), spec)
        assert out.schema == spec.schema
        assert_rows_match_model(part, out, key_fields, spec.connector)


@pytest.mark.parametrize(("name", "twin", "key"), BARE_SETS, ids=[s[0] for s in BARE_SETS])
def test_bare_sets_flatten_with_the_schema_given(name, twin, key):
    records = load_set(name)
    schema = embedded_schemas(load_set(twin))[0][0]
    spec = events.topic_spec(records[0]["topic"], [(schema, "given")], key, value_schema=events.bare_envelope(schema))
    out = events.flatten(kafka_table(records), spec)
    assert_rows_match_model(records, out, key, spec.connector, schema)


def test_a_bare_set_with_only_the_row_schema_given():
    records = load_set("pg_toast_authors_noschema.jsonl")
    envelope = events.bare_envelope(json.dumps(AUTHORS))
    spec = events.topic_spec(records[0]["topic"], [(envelope, "given")], ["id"], value_schema=envelope)
    assert spec.connector == events.POSTGRESQL
    out = events.flatten(kafka_table(records), spec)
    assert_rows_match_model(records, out, ["id"], spec.connector, envelope)
    assert out.column("dob").to_pylist()[0].year == 1930


def test_deletes_take_their_key_from_the_kafka_key_when_before_lacks_it():
    """REPLICA IDENTITY DEFAULT: a delete's before holds only the key, or is null (DEBEZIUM-NOTES PG-2)."""
    records = load_set("pg_toast_authors_noschema.jsonl")
    update = json.loads(records[0]["value"])
    delete = dict(update, op="d", before=None, after=None)
    key_only = dict(update, op="d", before={"id": 1001, "first_name": None}, after=None)
    rows = [
        {"key": '{"id":1001}', "value": json.dumps(delete), "partition": 0, "offset": 5},
        {
            "key": '{"schema":{"type":"struct","fields":[{"type":"int32","field":"id"}]},"payload":{"id":1002}}',
            "value": json.dumps(dict(key_only, before={"id": None})),
            "partition": 0,
            "offset": 6,
        },
        {"key": '{"id":1003}', "value": None, "partition": 0, "offset": 7},
    ]
    envelope = events.bare_envelope(AUTHORS)
    spec = events.topic_spec("t", [(envelope, "given")], ["id"], value_schema=envelope)
    out = events.flatten(kafka_table(rows), spec)
    assert out.column("id").to_pylist() == [1001, 1002]
    assert out.column("_hoodie_is_deleted").to_pylist() == [True, True]
    assert out.column("_change_operation_type").to_pylist() == ["d", "d"]
    no_key = [dict(rows[0], key=None)]
    with pytest.raises(HoodieFormatError, match=r"topic 't' partition 0 offset 5: a delete whose row lacks its key"):
        events.flatten(kafka_table(no_key), spec)


def _truncate_and_message(records):
    event = json.loads(records[0]["value"])
    truncate = dict(event, op="t", before=None, after=None)
    message = dict(event, op="m", before=None, after=None)
    return [
        records[0],
        {"key": None, "value": json.dumps(truncate), "partition": 2, "offset": 41},
        {"key": None, "value": json.dumps(message), "partition": 2, "offset": 42},
    ]


def test_truncate_fails_by_default_naming_topic_partition_offset_and_policies_skip():
    rows = _truncate_and_message(load_set("pg_toast_authors_noschema.jsonl"))
    envelope = events.bare_envelope(AUTHORS)
    spec = events.topic_spec("db.inventory.authors", [(envelope, "given")], ["id"], value_schema=envelope)
    with pytest.raises(HoodieFormatError, match=r"topic 'db.inventory.authors' partition 2 offset 41: a truncate"):
        events.flatten(kafka_table(rows), spec)
    skip_both = events.topic_spec("x", [(envelope, "g")], ["id"], value_schema=envelope, truncate="skip")
    assert events.flatten(kafka_table(rows), skip_both).column("id").to_pylist() == [1001]
    fail_messages = events.topic_spec(
        "x", [(envelope, "g")], ["id"], value_schema=envelope, truncate="skip", message="fail"
    )
    with pytest.raises(HoodieFormatError, match=r"partition 2 offset 42: a logical decoding message"):
        events.flatten(kafka_table(rows), fail_messages)


def test_an_undecodable_field_is_named_with_its_record():
    records = load_set("mysql_flink_products_schema.jsonl")[:3]
    broken = json.loads(records[1]["value"])
    broken["payload"]["after"]["weight"] = "heavy"
    records[1] = dict(records[1], value=json.dumps(broken, separators=(",", ":")))
    spec = events.topic_spec(records[0]["topic"], embedded_schemas(records[:1]), ["id"])
    with pytest.raises(HoodieFormatError, match=r"partition 0 offset 1"):
        events.flatten(kafka_table(records), spec)


def _with_payload(record, change):
    message = json.loads(record["value"])
    change(message["payload"])
    return dict(record, value=json.dumps(message, separators=(",", ":")))


def _cut(records):
    """The records as Kafka Connect JSON cut to their payloads by Spark in a planned micro-batch (kafka.py), with
    the one schema of the records: (Kafka table, its schema text)."""
    texts = [json.loads(r["value"]) for r in records]
    schema = json.dumps(texts[0]["schema"], separators=(",", ":"))
    payloads = [dict(r, value=json.dumps(t["payload"], separators=(",", ":"))) for r, t in zip(records, texts)]
    table = kafka_table(payloads)
    return table.append_column(events.SCHEMA_CODE, pa.array([0] * len(records), pa.int32())), schema


@pytest.mark.parametrize("cut", [False, True], ids=["whole messages", "cut to their payloads"])
def test_fields_the_schema_does_not_declare_are_ignored_as_kafka_connect_does_and_reported(cut):
    """Kafka Connect's JsonConverter reads a struct by its schema's fields (convertToConnect) and passes over any
    other field of the payload: the rows are those of the messages without them, and their paths are reported."""
    records = load_set("pg_flink_products_schema.jsonl")[:6]
    topic = records[0]["topic"]

    def add(i, payload):
        payload["after"]["colour"] = "red"  # an undeclared column of the row
        payload["source"]["origin"] = {"lsn": i}  # nested, a struct
        payload["note"] = i if i % 2 else f"text {i}"  # top level, of another type in each message

    extended = [_with_payload(r, lambda p, i=i: add(i, p)) if i in (1, 2, 4) else r for i, r in enumerate(records)]
    spec = events.topic_spec(topic, embedded_schemas(records[:1]), ["id"])
    if cut:
        table, schema = _cut(extended)
        spec = dataclasses.replace(spec, known_schemas=(schema,))
        plain, _ = _cut(records)
    else:
        table, plain = kafka_table(extended), kafka_table(records)
    found = set()
    assert events.flatten(table, spec, found).equals(events.flatten(plain, spec))
    assert found == {"after.colour", "source.origin", "note"}
    found = set()
    events.flatten(table.slice(1, 1), spec, found)  # the undeclared fields of one type: pyarrow's inference
    assert found == {"after.colour", "source.origin", "note"}
    found = set()
    events.flatten(plain, spec, found)
    assert found == set()


def test_a_payload_that_does_not_fit_its_schema_names_topic_partition_offset_and_field():
    records = load_set("pg_flink_products_schema.jsonl")[:4]
    topic = records[0]["topic"]
    spec = events.topic_spec(topic, embedded_schemas(records[:1]), ["id"])
    for change, problem in [
        (lambda p: p["after"].update(id="101"), "field 'after.id' holds a string \"101\", its schema declares int32"),
        (lambda p: p["after"].update(id=101.5), "field 'after.id' holds a number 101.5, its schema declares int32"),
        (lambda p: p["source"].update(lsn=[1]), "field 'source.lsn' holds an array [1], its schema declares int64"),
        (lambda p: p.update(after="x"), "field 'after' holds a string \"x\", its schema declares struct"),
    ]:
        bad = list(records)
        bad[2] = _with_payload(records[2], change)
        for table in (kafka_table(bad), _cut(bad)[0]):
            known = None if events.SCHEMA_CODE not in table.column_names else (_cut(bad)[1],)
            with pytest.raises(HoodieFormatError) as e:
                events.flatten(table, dataclasses.replace(spec, known_schemas=known))
            assert str(e.value) == (
                f"topic {topic!r} partition 0 offset {records[2]['offset']}: the payload does not match its "
                f"schema: {problem}"
            )
    bad = list(records)
    bad[3] = dict(records[3], value=records[3]["value"][:-30] + "}")  # cut short: no JSON
    with pytest.raises(HoodieFormatError, match=rf"topic {topic!r} partition 0 offset {records[3]['offset']}: "):
        events.flatten(kafka_table(bad), spec)


def test_undeclared_fields_are_logged_once_per_topic_and_field(caplog):
    class Accumulator:
        value: frozenset = frozenset()

        def add(self, more):
            self.value = self.value | more

    class Context:
        def accumulator(self, value, param):
            assert param.addInPlace(param.zero(value), {("t", "f")}) == {("t", "f")}
            return Accumulator()

    fields = undeclared.UndeclaredFields()
    assert fields.log_new() == []
    context = Context()
    acc = fields.accumulator(context)
    assert fields.accumulator(context) is acc
    undeclared.report(acc, "pg.public.orders", {"after.colour", "note"})
    undeclared.report(acc, "pg.public.orders", {"after.colour"})
    caplog.set_level("INFO", logger="hoodie_stream")
    assert fields.log_new() == [("pg.public.orders", "after.colour"), ("pg.public.orders", "note")]
    undeclared.report(acc, "pg.public.orders", {"after.colour"})
    undeclared.report(acc, "my.shop.items", {"after.colour"})
    assert fields.log_new() == [("my.shop.items", "after.colour")]
    lines = [r.getMessage() for r in caplog.records if r.name == "hoodie_stream"]
    assert lines == [
        "topic 'pg.public.orders': field 'after.colour' of the payloads is not declared by the schema their messages "
        "carry; it is ignored, as Kafka Connect's JsonConverter ignores it",
        "topic 'pg.public.orders': field 'note' of the payloads is not declared by the schema their messages carry; "
        "it is ignored, as Kafka Connect's JsonConverter ignores it",
        "topic 'my.shop.items': field 'after.colour' of the payloads is not declared by the schema their messages "
        "carry; it is ignored, as Kafka Connect's JsonConverter ignores it",
    ]
    caplog.clear()
    for _ in range(2):  # without an accumulator (flatten() outside a sink): once per process
        undeclared.report(None, "a.b.unique_topic", {"extra"})
    assert [r.getMessage()[:35] for r in caplog.records] == ["topic 'a.b.unique_topic': field 'ex"]


def test_unwrapped_events_and_other_connectors_are_refused_by_name():
    with pytest.raises(HoodieFormatError, match="not a Debezium change event"):
        events.envelope_parts({"type": "struct", "fields": [{"field": "id", "type": "int32"}]}, "topic 'x'")
    sqlserver = {
        "type": "struct",
        "fields": [
            {"field": "after", "type": "struct", "fields": []},
            {"field": "op", "type": "string"},
            {"field": "source", "type": "struct", "name": "io.debezium.connector.sqlserver.Source", "fields": []},
        ],
    }
    with pytest.raises(HoodieFormatError, match="sqlserver.Source"):
        events.connector_of(sqlserver, "topic 'x'")


def test_schema_versions_merge_new_columns_at_the_end_and_widen_but_refuse_other_changes():
    v1 = pa.schema([("id", pa.int32()), ("price", pa.decimal128(10, 2)), ("w", pa.float32())])
    v2 = pa.schema([("id", pa.int64()), ("price", pa.decimal128(12, 2)), ("w", pa.float64()), ("n", pa.string())])
    merged = events.merged_rows([v1, v2], ["a", "b"])
    assert merged == pa.schema(
        [("id", pa.int64()), ("price", pa.decimal128(12, 2)), ("w", pa.float64()), ("n", pa.string())]
    )
    with pytest.raises(HoodieFormatError, match=r"topic 't' partition 1 offset 9: column 'id' changed from int32"):
        events.merged_rows([v1, pa.schema([("id", pa.string())])], ["a", "topic 't' partition 1 offset 9"])
    with pytest.raises(HoodieFormatError, match="column 'price'"):
        events.merged_rows([v1, pa.schema([("price", pa.decimal128(12, 3))])], ["a", "b"])


def test_a_table_follows_events_of_narrower_types_and_widens_as_hudi_allows():
    """A table column takes events of its type or narrower ones (written as the table's), and widens as Hudi 0.15
    lets it: a decimal only to more digits in an Avro fixed of the same size (its write check compares sizes)."""
    from hoodie_stream.debezium.sink import _follows

    d = pa.decimal128
    assert _follows(d(10, 2), d(11, 2))  # 5 bytes both
    assert not _follows(d(10, 2), d(12, 2))  # 5 -> 6 bytes: Hudi refuses the schema
    assert _follows(d(12, 2), d(10, 2))  # narrower: written as decimal(12, 2), the table stays
    assert not _follows(d(10, 2), d(11, 3))
    assert _follows(pa.int32(), pa.int64()) and _follows(pa.int64(), pa.int32())
    assert not _follows(pa.int64(), pa.string())


# -- the ordering value -------------------------------------------------------------------------------------------
binlog = st.tuples(st.integers(0, 10**6), st.integers(0, 2**32 - 1), st.integers(0, 2**31 - 1)) | st.none()


@settings(max_examples=200, deadline=None)
@given(st.lists(binlog, min_size=1, max_size=30))
def test_mysql_order_sorts_as_the_numeric_position(positions):
    """(file number, pos, row) compared as numbers, events without a position first; mysql-bin.000009 <
    mysql-bin.000010 whatever the digits."""
    files = [None if p is None else f"mysql-bin.{p[0]:06d}" for p in positions]
    out = events.mysql_order(
        pa.array(files, pa.string()),
        pa.array([None if p is None else p[1] for p in positions], pa.int64()),
        pa.array([None if p is None else p[2] for p in positions], pa.int32()),
        lambda i: f"record {i}",
    ).to_pylist()
    sources = [{} if p is None else {"file": f, "pos": p[1], "row": p[2]} for f, p in zip(files, positions)]
    assert out == [order_value(s, "mysql") for s in sources]
    by_value = sorted(range(len(positions)), key=lambda i: out[i])
    by_tuple = sorted(range(len(positions)), key=lambda i: (-1,) if positions[i] is None else positions[i])
    assert [out[i] for i in by_value] == [out[i] for i in by_tuple]
    assert all(v >= 0 for v, p in zip(out, positions) if p is not None)
    assert all(v == decimal.Decimal(-1) for v, p in zip(out, positions) if p is None)


def test_mysql_seq_is_hudis_and_bad_positions_are_named():
    seq = events.mysql_seq(pa.array(["mysql-bin.000004", "", None]), pa.array([157230, 4, 5]))
    assert seq.to_pylist() == ["000004.157230", None, None]
    with pytest.raises(HoodieFormatError, match="record 0: binlog file 'mysql-bin' does not end in a number"):
        events.mysql_order(pa.array(["mysql-bin"]), pa.array([1]), pa.array([0], pa.int32()), lambda i: f"record {i}")
    with pytest.raises(HoodieFormatError, match="record 1: binlog position -3"):
        events.mysql_order(
            pa.array(["b.1", "b.2"]), pa.array([1, -3]), pa.array([0, 0], pa.int32()), lambda i: f"record {i}"
        )


DDL_SETS = [  # (bare set, its row as a Spark DDL, record key, the Connect schema the model reads it with)
    (
        "pg_flink_products_noschema.jsonl",
        "id INT NOT NULL, name STRING, description STRING, weight DOUBLE",
        ["id"],
        "pg_flink_products_schema.jsonl",
    ),
    (
        "mysql_risingwave_customers_noschema.jsonl",
        "id INT NOT NULL, first_name STRING, last_name STRING, email STRING",
        ["id"],
        "mysql_risingwave_customers_schema.jsonl",
    ),
    (
        "pg_toast_authors_noschema.jsonl",
        "id INT NOT NULL, first_name STRING, last_name STRING, biography STRING, dob TIMESTAMP_NTZ",
        ["id"],
        None,
    ),
]


@pytest.mark.parametrize(("name", "text", "key", "twin"), DDL_SETS, ids=[s[0] for s in DDL_SETS])
def test_bare_sets_flatten_with_a_spark_ddl_of_the_row(name, text, key, twin):
    from hoodie_stream.debezium import ddl

    records = load_set(name)
    envelope = events.bare_envelope(ddl.row_schema(text, "test"))
    spec = events.topic_spec(records[0]["topic"], [(envelope, "given")], key, value_schema=envelope)
    out = events.flatten(kafka_table(records), spec)
    model_schema = embedded_schemas(load_set(twin))[0][0] if twin else events.bare_envelope(AUTHORS)
    assert_rows_match_model(records, out, key, spec.connector, model_schema)


def test_a_ddl_decimal_reads_base64_and_numbers_and_other_types_are_refused_by_name():
    from hoodie_stream.debezium import ddl
    from hoodie_stream.errors import HoodieConfigError

    row = ddl.row_schema("id BIGINT NOT NULL, price DECIMAL(10, 2), at TIMESTAMP, d DATE", "t")
    assert [(f["field"], f["type"], f.get("name")) for f in row["fields"]] == [
        ("id", "int64", None),
        ("price", "bytes", types.CONNECT_DECIMAL),
        ("at", "string", types.ZONED_TIMESTAMP),
        ("d", "int32", "io.debezium.time.Date"),
    ]
    price = row["fields"][1]
    assert types.decode(pa.array(["AeI6"]), price).to_pylist() == [decimal.Decimal("1234.50")]
    assert types.decode(pa.array([1234.5]), price).to_pylist() == [decimal.Decimal("1234.50")]
    with pytest.raises(HoodieConfigError, match="column 'tags' of type MAP has no default Debezium encoding"):
        ddl.row_schema("id INT, tags MAP<STRING, STRING>", "t")
