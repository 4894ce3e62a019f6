"""Debezium change events in Confluent's Avro wire format, made by the tests from the real JSON messages of
tests/data/debezium: each Connect schema turned into the Avro schema Kafka Connect's AvroConverter registers for it
(semantic names as `connect.name`, Connect's logical types as Avro's, optional fields as unions with null), each
payload encoded by fastavro and framed with the magic byte and the schema id."""

import base64
import decimal
import io
import json
import struct

import fastavro

_PRIMITIVE = {
    "int32": "int",
    "int64": "long",
    "float32": "float",
    "float": "float",
    "float64": "double",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
_LOGICAL = {
    "org.apache.kafka.connect.data.Decimal": "decimal",
    "org.apache.kafka.connect.data.Date": "date",
    "org.apache.kafka.connect.data.Time": "time-millis",
    "org.apache.kafka.connect.data.Timestamp": "timestamp-millis",
}


def avro_schema(connect, names=None, path="ConnectDefault"):
    """The Avro schema AvroConverter makes of a Connect schema (as the JSON converter writes it)."""
    names = set() if names is None else names
    kind, name = connect["type"], connect.get("name")
    if kind == "struct":
        record_name = name or path
        if record_name in names:  # a record is defined once, then named
            out = record_name
        else:
            names.add(record_name)
            namespace, _, short = record_name.rpartition(".")
            out = {"type": "record", "name": short, "fields": []}
            if namespace:
                out["namespace"] = namespace
            for f in connect["fields"]:
                field = {"name": f["field"], "type": avro_schema(f, names, f"{path}_{f['field']}")}
                if f.get("optional"):
                    field["default"] = None
                out["fields"].append(field)
            if name:
                out["connect.name"] = name
    elif kind == "array":
        out = {"type": "array", "items": avro_schema(connect["items"], names, path)}
    else:
        out = {"type": _PRIMITIVE.get(kind, "int")}
        if kind in ("int8", "int16"):
            out["connect.type"] = kind
        if name:
            out["connect.name"] = name
        if connect.get("parameters"):
            out["connect.parameters"] = dict(connect["parameters"])
        logical = _LOGICAL.get(name)
        if logical == "decimal":
            out.update(
                logicalType="decimal",
                scale=int(connect["parameters"]["scale"]),
                precision=int(connect["parameters"].get("connect.decimal.precision", 64)),
            )
        elif logical:
            out["logicalType"] = logical
    if connect.get("optional"):
        return ["null", out]
    return out


def _without_logical(schema):
    if isinstance(schema, list):
        return [_without_logical(s) for s in schema]
    if isinstance(schema, dict):
        out = {k: v for k, v in schema.items() if k != "logicalType"}
        if out.get("type") == "record":
            out["fields"] = [dict(f, type=_without_logical(f["type"])) for f in schema["fields"]]
        if out.get("type") == "array":
            out["items"] = _without_logical(schema["items"])
        return out
    return schema


def datum(connect, value):
    """A JSON payload value as the Avro datum of its Connect schema (base64 bytes decoded; a decimal's unscaled
    bytes as they are, which is what the Avro `decimal` logical type encodes)."""
    if value is None:
        return None
    kind = connect["type"]
    if kind == "struct":
        return {f["field"]: datum(f, value.get(f["field"])) for f in connect["fields"]}
    if kind == "array":
        return [datum(connect["items"], v) for v in value]
    if kind == "bytes" and not isinstance(value, str):  # a NUMERIC-format decimal: its unscaled value
        unscaled = int(decimal.Decimal(str(value)).scaleb(int(connect["parameters"]["scale"])))
        return unscaled.to_bytes((unscaled + (unscaled < 0)).bit_length() // 8 + 1, "big", signed=True)
    if kind == "bytes":
        return base64.b64decode(value)
    if kind in ("float32", "float"):
        return struct.unpack("f", struct.pack("f", value))[0]
    return value


def framed(schema_id, avro, payload, connect):
    """Confluent's wire format: magic byte 0, the 4-byte schema id, the Avro binary datum."""
    out = io.BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(out, fastavro.parse_schema(_without_logical(avro)), datum(connect, payload))
    return out.getvalue()


def to_avro(records, key_connect=None, first_id=1):
    """(Avro records with binary key and value, {schema id: Avro schema}) of JSON records with schemas; keys get
    the key schema of their message, or `key_connect` when their message has none."""
    ids, schemas, out = {}, {}, []

    def id_of(connect):
        text = json.dumps(connect, sort_keys=True)
        if text not in ids:
            ids[text] = first_id + len(ids)
            schemas[ids[text]] = avro_schema(connect)
        return ids[text]

    for r in records:
        value = key = None
        if r["value"] is not None:
            message = json.loads(r["value"])
            sid = id_of(message["schema"])
            value = framed(sid, schemas[sid], message["payload"], message["schema"])
        if r["key"] is not None:
            key_message = json.loads(r["key"])
            connect = key_message.get("schema") or key_connect
            payload = key_message.get("payload", key_message) if "schema" in key_message else key_message
            sid = id_of(connect)
            key = framed(sid, schemas[sid], payload, connect)
        out.append(dict(r, key=key, value=value))
    return out, schemas
