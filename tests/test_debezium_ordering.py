"""Property test (hypothesis): random Debezium event histories per key (inserts, updates, deletes, re-inserts,
snapshot rows, redeliveries, positions out of order across micro-batches, several Kafka partitions) streamed through
DebeziumSink give, after every micro-batch, the table the plain-Python model of Debezium semantics says, as hudi-rs
reads it."""

import base64
import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from debezium_model import KAFKA_DDL, final_rows
from hoodie_stream import DebeziumSink
from hoodie_stream.debezium import table_name
from oracle import rs_read
from test_debezium_sink import assert_table_matches

TOPIC = "pg9.public.items"
ROW = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "field": "price",
    },
]
SOURCE = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "string", "optional": True, "field": "snapshot"},
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": False, "field": "schema"},
    {"type": "string", "optional": False, "field": "table"},
    {"type": "int64", "optional": True, "field": "txId"},
    {"type": "int64", "optional": True, "field": "lsn"},
    {"type": "int64", "optional": True, "field": "xmin"},
]
SCHEMA = {
    "type": "struct",
    "name": f"{TOPIC}.Envelope",
    "optional": False,
    "fields": [
        {"type": "struct", "optional": True, "name": f"{TOPIC}.Value", "field": "before", "fields": ROW},
        {"type": "struct", "optional": True, "name": f"{TOPIC}.Value", "field": "after", "fields": ROW},
        {
            "type": "struct",
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "field": "source",
            "fields": SOURCE,
        },
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
    ],
}
SCHEMA_TEXT = json.dumps(SCHEMA, separators=(",", ":"))
PARTITIONS = 3


def unscaled(cents):
    return base64.b64encode(
        cents.to_bytes(max(1, (cents + (cents < 0)).bit_length() // 8 + 1), "big", signed=True)
    ).decode()


def message(op, key, lsn, cents, ts, identity_full):
    row = {"id": key, "name": f"item-{key}-{ts}", "price": unscaled(cents)}
    before = None
    if op == "d":
        before = row if identity_full else ({"id": key, "name": None, "price": None} if ts % 2 else None)
    payload = {
        "before": before,
        "after": None if op == "d" else row,
        "source": {
            "version": "2.7.3.Final",
            "connector": "postgresql",
            "name": "pg9",
            "ts_ms": 1700000000000 + ts,
            "snapshot": "true" if op == "r" else "false",
            "db": "shop",
            "schema": "public",
            "table": "items",
            "txId": None if lsn is None else 500 + ts,
            "lsn": lsn,
            "xmin": None,
        },
        "op": op,
        "ts_ms": 1700000000500 + ts,
    }
    return '{"schema":' + SCHEMA_TEXT + ',"payload":' + json.dumps(payload, separators=(",", ":")) + "}"


event = st.tuples(
    st.sampled_from(["c", "u", "u", "d", "r"]),  # op
    st.integers(0, 7),  # key
    st.one_of(st.none(), st.integers(1, 60)),  # LSN (none: an incremental-snapshot row)
    st.integers(-(10**6), 10**6),  # price in cents
    st.booleans(),  # REPLICA IDENTITY FULL
)
history = st.lists(
    st.tuples(event, st.integers(0, 3)),  # (event, redeliveries of it later in the stream)
    min_size=1,
    max_size=40,
)


def stream(events, cuts):
    """Kafka records (a key's events in its partition, offsets per partition) cut into micro-batches."""
    records, offsets, later = [], [0] * PARTITIONS, []
    for ts, ((op, key, lsn, cents, full), redeliver) in enumerate(events):
        if op != "r" and lsn is None:
            lsn = 1 + ts % 61
        value = message(op, key, lsn, cents, ts, full)
        records.append((key, value))
        if op == "d" and ts % 3:
            records.append((key, None))  # its tombstone
        later.extend([(key, value)] * redeliver)
    records.extend(later)  # redelivered after a connector restart: the same events again, at new offsets
    out = []
    for key, value in records:
        partition = key % PARTITIONS
        out.append(
            {
                "key": json.dumps({"id": key}),
                "value": value,
                "topic": TOPIC,
                "partition": partition,
                "offset": offsets[partition],
            }
        )
        offsets[partition] += 1
    bounds = sorted({min(c, len(out)) for c in cuts} | {0, len(out)})
    return [out[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(history, st.lists(st.integers(1, 60), max_size=3))
# a late update after a delete in a later batch; a delete of a key not yet seen, then its late insert
@example([(("c", 1, 5, 100, False), 0), (("d", 1, 50, 100, False), 0), (("u", 1, 10, 200, False), 0)], [1, 3])
@example([(("d", 1, 50, 100, True), 0), (("c", 1, 10, 200, False), 0), (("u", 2, 3, 1, False), 0)], [1])
def test_random_histories_give_the_models_table(spark, tmp_path_factory, events, cuts):
    base = tmp_path_factory.mktemp("cdc")
    sink = DebeziumSink(str(base))
    path = base / table_name(TOPIC)
    batches = stream(events, cuts)
    try:
        for b, batch in enumerate(batches):
            df = spark.createDataFrame(
                [tuple(r[c] for c in ("key", "value", "topic", "partition", "offset")) for r in batch], KAFKA_DDL
            )
            sink(df, b)
            expected = final_rows([r for bb in batches[: b + 1] for r in bb], ["id"], "postgresql")
            table = rs_read(str(path)) if path.exists() else None
            assert_table_matches(table, expected, ["id"], f"after batch {b} of {len(batches)}")
    finally:
        sink.close()
