"""A plain-Python model of Debezium semantics (the tests' oracle for the CDC path): values decoded by the standard
library from the Connect schema, each change event read with `json`, and a key's table row taken from its event
with the greatest position (PostgreSQL: LSN; MySQL: binlog file number, position, row, compared as numbers; no
position orders first; ties by Kafka partition, then offset), absent when that event is a delete."""

import base64
import datetime
import decimal
import json
import pathlib
import struct

DATA = pathlib.Path(__file__).parent / "data" / "debezium"
EPOCH = datetime.datetime(1970, 1, 1)
EXACT = decimal.Context(prec=100)  # the default context rounds to 28 digits
CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
KAFKA_DDL = "key string, value string, topic string, partition int, offset long"


def load_set(name):
    """The records of a message set of tests/data/debezium (dicts of key, value, topic, partition, offset)."""
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def decode_value(field, value):
    """A raw JSON value of a Connect field as Python holds it."""
    if value is None:
        return None
    name = field.get("name")
    if name == CONNECT_DECIMAL and not isinstance(value, str):  # decimal.format=NUMERIC
        return decimal.Decimal(value)
    if name == CONNECT_DECIMAL:
        return decimal.Decimal(int.from_bytes(base64.b64decode(value), "big", signed=True)).scaleb(
            -int(field["parameters"]["scale"]), EXACT
        )
    if name == VARIABLE_SCALE_DECIMAL:
        return decimal.Decimal(int.from_bytes(base64.b64decode(value["value"]), "big", signed=True)).scaleb(
            -value["scale"], EXACT
        )
    if name in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        return datetime.date(1970, 1, 1) + datetime.timedelta(days=value)
    if name in ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time"):
        return time_of_day(EPOCH + datetime.timedelta(milliseconds=value))
    if name == "io.debezium.time.MicroTime":
        return time_of_day(EPOCH + datetime.timedelta(microseconds=value))
    if name == "io.debezium.time.NanoTime":
        return time_of_day(EPOCH + datetime.timedelta(microseconds=value // 1000))
    if name in ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp"):
        return EPOCH + datetime.timedelta(milliseconds=value)
    if name == "io.debezium.time.MicroTimestamp":
        return EPOCH + datetime.timedelta(microseconds=value)
    if name == ZONED_TIMESTAMP:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(datetime.timezone.utc)
    if field.get("type") == "bytes":
        return base64.b64decode(value)
    if field.get("type") == "struct" and isinstance(value, dict):
        return {f["field"]: decode_value(f, value.get(f["field"])) for f in field.get("fields", [])}
    if field.get("type") in ("float", "float32"):
        return float(struct.unpack("f", struct.pack("f", value))[0])
    if field.get("type") in ("float64", "double"):
        return float(value)
    return value


def time_of_day(moment):
    """A time of day as the table holds it: microseconds since midnight."""
    t = moment.time()
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def _image_fields(schema):
    parts = {f["field"]: f for f in schema["fields"]}
    image = parts.get("after") or parts.get("before")
    return image["fields"]


def _position(source, connector):
    if connector == "postgresql":
        lsn = source.get("lsn")
        return None if lsn is None else (lsn,)
    file, pos = source.get("file"), source.get("pos")
    if not file or pos is None:
        return None
    return (int(file.rsplit(".", 1)[1]), pos, source.get("row") or 0)


def order_value(source, connector):
    """The model's `_event_order`."""
    p = _position(source, connector)
    if p is None:
        return decimal.Decimal(-1)
    if connector == "postgresql":
        return decimal.Decimal(p[0])
    return decimal.Decimal(p[0] * 10**20 + p[1] * 10**10 + p[2])


def event_row(record, key_fields, connector, schema=None):
    """(record key tuple, sort key, is delete, row dict) of one Kafka record holding a change event, None for a
    tombstone or a truncate/message event."""
    if record["value"] is None:
        return None
    message = json.loads(record["value"])
    if "schema" in message and "payload" in message:
        schema, payload = message["schema"], message["payload"]
    else:
        payload = message
    op = payload["op"]
    if op not in ("c", "u", "r", "d"):
        return None
    fields = _image_fields(schema)
    image = payload.get("before" if op == "d" else "after") or {}
    row = {f["field"]: decode_value(f, image.get(f["field"])) for f in fields}
    if op == "d" and any(row.get(k) is None for k in key_fields):
        key = json.loads(record["key"])
        key = key.get("payload", key) if "schema" in key else key
        by_name = {f["field"]: f for f in fields}
        for k in key_fields:
            if row.get(k) is None:
                row[k] = decode_value(by_name[k], key[k])
    source = payload["source"]
    row.update(
        {
            "_change_operation_type": op,
            "_upstream_event_processed_ts_ms": payload.get("ts_ms"),
            "db_shard_source_partition": source.get("name"),
            "_event_origin_ts_ms": source.get("ts_ms"),
            "_event_order": order_value(source, connector),
            "_hoodie_is_deleted": op == "d",
        }
    )
    if connector == "postgresql":
        row.update(
            {
                "_event_lsn": source.get("lsn"),
                "_event_tx_id": source.get("txId"),
                "_event_xmin": source.get("xmin"),
                "db_schema_source_partition": source.get("schema"),
            }
        )
    else:
        file, pos = source.get("file"), source.get("pos")
        suffix = file.rsplit(".", 1)[1] if file and "." in file else None
        row.update(
            {
                "_event_bin_file": file,
                "_event_pos": pos,
                "_event_row": source.get("row"),
                "_event_seq": None if suffix is None or pos is None else f"{suffix}.{pos}",
            }
        )
    position = _position(source, connector)
    sort_key = ((0,) if position is None else (1, *position), record["partition"], record["offset"])
    return tuple(row[k] for k in key_fields), sort_key, op == "d", row


def final_rows(records, key_fields, connector, schema=None):
    """{record key tuple: row} of the table after all `records` (any order of arrival)."""
    best = {}
    for record in records:
        event = event_row(record, key_fields, connector, schema)
        if event is None:
            continue
        key, sort_key, is_delete, row = event
        if key not in best or sort_key > best[key][0]:
            best[key] = (sort_key, is_delete, row)
    return {k: row for k, (_, is_delete, row) in best.items() if not is_delete}
