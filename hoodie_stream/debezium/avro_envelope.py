"""Kafka messages in Confluent's Avro wire format (magic byte 0, 4-byte big-endian schema id, an Avro binary datum),
as Kafka Connect's AvroConverter writes Debezium's change events: schema ids read from all messages at once,
each id's messages decoded together by the vectorized Avro decoder, and the Avro schema seen as the Connect
schema it was made from (`connect_schema`), so that events.py decodes the values as it does JSON's.

The AvroConverter keeps a Connect schema's semantic name as `connect.name` and its parameters as
`connect.parameters`; Connect's own logical types become Avro logical types (Decimal: bytes + `decimal`, Date:
`date`, Time: `time-millis`, Timestamp: `timestamp-millis`). Optional fields are unions of null and their type.
The datums are decoded with those logical types stripped (the encoding is the underlying type's), so values arrive
as Connect holds them: decimals as big-endian unscaled bytes, dates as days, times as integers.
"""

import json

import numpy as np
import pyarrow as pa

from ..errors import HoodieFormatError
from ..format.avro.decoder import decode_records
from ..format.util.string_buffers import utf8_buffers

MAGIC = 0
HEADER = 5
_PRIMITIVE = {"long": "int64", "float": "float32", "double": "float64", "boolean": "boolean", "string": "string"}
_LOGICAL_NAMES = {
    "date": "org.apache.kafka.connect.data.Date",
    "time-millis": "org.apache.kafka.connect.data.Time",
    "timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
}


def schema_ids(values):
    """(schema id of each message, int64; the first message that is not in the wire format or None) of a binary
    array without nulls."""
    data, offsets = utf8_buffers(values, "messages")
    starts = offsets[:-1]
    short = (offsets[1:] - starts) < HEADER
    safe = np.where(short, 0, starts)
    padded = np.concatenate([data, np.zeros(HEADER, np.uint8)])
    magic = padded[safe]
    head = np.stack([padded[safe + k].astype(np.int64) for k in range(1, HEADER)], axis=1)
    ids = (head[:, 0] << 24) | (head[:, 1] << 16) | (head[:, 2] << 8) | head[:, 3]
    bad = short | (magic != MAGIC)
    return ids, (int(np.flatnonzero(bad)[0]) if bad.any() else None)


def stripped(schema):
    """An Avro schema without logical types (the datums decode to their underlying types)."""
    if isinstance(schema, list):
        return [stripped(s) for s in schema]
    if isinstance(schema, dict):
        out = {k: v for k, v in schema.items() if k != "logicalType"}
        if out.get("type") == "record":
            out["fields"] = [dict(f, type=stripped(f["type"])) for f in schema.get("fields", [])]
        elif out.get("type") == "array":
            out["items"] = stripped(schema["items"])
        elif out.get("type") == "map":
            out["values"] = stripped(schema["values"])
        elif isinstance(out.get("type"), (dict, list)):
            out["type"] = stripped(out["type"])
        return out
    return schema


def parse(text_or_schema):
    """An Avro schema from its JSON text (or as it is)."""
    if isinstance(text_or_schema, (dict, list)):
        return text_or_schema
    try:
        return json.loads(text_or_schema)
    except (TypeError, ValueError):
        raise HoodieFormatError(f"an Avro schema is JSON; got {str(text_or_schema)[:80]!r}") from None


def connect_schema(schema, field=None, names=None):
    """The Connect schema (as the JSON converter writes it) an AvroConverter Avro schema stands for."""
    names = {} if names is None else names
    optional = False
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise HoodieFormatError(f"field {field!r}: an Avro union of {schema} is not a Connect type")
        optional, schema = "null" in schema, branches[0]
    if isinstance(schema, str) and schema in names:
        schema = names[schema]
    if isinstance(schema, str):
        schema = {"type": schema}
    kind, logical = schema.get("type"), schema.get("logicalType")
    if isinstance(kind, (dict, list)):
        out = connect_schema(kind, field, names)
        out["optional"] = optional or out.get("optional", False)
        return out
    out = {"optional": optional}
    if field is not None:
        out["field"] = field
    if kind == "record":
        full = schema.get("name", "")
        if schema.get("namespace") and "." not in full:
            full = f"{schema['namespace']}.{full}"
        names[full] = schema
        names[schema.get("name", "")] = schema
        out["type"] = "struct"
        out["fields"] = [connect_schema(f["type"], f["name"], names) for f in schema.get("fields", [])]
    elif kind == "array":
        out["type"] = "array"
        out["items"] = connect_schema(schema["items"], None, names)
    elif kind == "int":
        out["type"] = schema.get("connect.type", "int32")
    elif kind in ("bytes", "fixed"):
        out["type"] = "bytes"
    elif kind == "enum":
        out["type"] = "string"
    elif kind in _PRIMITIVE:
        out["type"] = _PRIMITIVE[kind]
    else:
        raise HoodieFormatError(f"field {field!r}: Avro type {kind!r} has no Connect counterpart read here")
    name = schema.get("connect.name")
    parameters = dict(schema.get("connect.parameters") or {})
    if logical == "decimal":
        name = "org.apache.kafka.connect.data.Decimal"
        parameters.setdefault("scale", str(schema.get("scale", 0)))
        if "precision" in schema:
            parameters.setdefault("connect.decimal.precision", str(schema["precision"]))
    elif logical in _LOGICAL_NAMES:
        name = name or _LOGICAL_NAMES[logical]
    if name and kind != "record":
        out["name"] = name
    elif kind == "record":
        out["name"] = name or schema.get("name")
    if parameters:
        out["parameters"] = parameters
    return out


def decode(values, rows, schema):
    """The envelopes (a struct array) of the messages `rows` of `values` (binary), written with the Avro schema."""
    data, offsets = utf8_buffers(values.take(pa.array(rows)), "messages")
    starts, ends = offsets[:-1] + HEADER, offsets[1:]
    table = decode_records(data, starts, stripped(schema), ends=ends)
    return pa.StructArray.from_arrays([c.combine_chunks() for c in table.columns], fields=list(table.schema))
