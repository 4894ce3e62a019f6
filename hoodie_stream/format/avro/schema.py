"""Arrow schema <-> Avro schema following Hudi/Spark conventions, and the Hudi meta fields.

Arrow -> Avro mirrors Spark's SchemaConverters as Hudi stores it in commit metadata: every field, array
item and map value is a `["null", T]` union (fields with `"default": null`); a struct becomes a record
named after its field in the namespace `<enclosing record full name>`; a decimal becomes a fixed named
"fixed" in the namespace `<enclosing record full name>.<field>` with the minimal size for its precision.

Avro -> Arrow gives the types pyarrow reads from Spark-written base files, except: Avro has no 8/16-bit
ints (they come back as int32), timestamp-micros/millis come back as tz "UTC" (local-timestamp-* as
naive), map entries are named "entries" and list items "element".
"""

import copy
import json

import pyarrow as pa

from ...errors import HoodieFormatError

META_FIELDS = [
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
]
# the meta fields and the operation field Hudi writes with hoodie.allow.operation.metadata.field: what
# HoodieAvroUtils.removeMetadataFields leaves out (a CDC image holds the rest)
HOODIE_FIELDS = (*META_FIELDS, "_hoodie_operation")

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
NAMED = {"record", "error", "enum", "fixed"}


def load_schema(avro):
    """A deep copy of an Avro schema given as a JSON string or a dict."""
    if isinstance(avro, (str, bytes)):
        return json.loads(avro)
    return copy.deepcopy(avro)


def with_meta_fields(avro_schema):
    """The record schema with the 5 Hudi meta fields first, as Hudi writes the log block SCHEMA header."""
    schema = load_schema(avro_schema)
    meta = [{"name": m, "type": ["null", "string"], "doc": "", "default": None} for m in META_FIELDS]
    rest = [f for f in schema["fields"] if f["name"] not in META_FIELDS]
    schema["fields"] = meta + rest
    return schema


def decimal_size(precision):
    """Spark's minBytesForPrecision: bytes of the fixed holding a decimal of this precision."""
    size = 1
    while 2.0 ** (8 * size - 1) < 10.0**precision:
        size += 1
    return size


def decimal_widens(old, new):
    """Whether a decimal column of Arrow type `old` may take the type `new` as Hudi lets a table evolve: the same
    scale, more digits, in an Avro fixed of the same size (Hudi's schema check compares a fixed's size, never its
    precision, so decimal(10, 2) becomes decimal(11, 2) but not decimal(12, 2))."""
    return (
        pa.types.is_decimal(old)
        and pa.types.is_decimal(new)
        and old.scale == new.scale
        and old.precision < new.precision
        and decimal_size(old.precision) == decimal_size(new.precision)
    )


# ---------------------------------------------------------------- Arrow -> Avro


def arrow_to_avro_schema(schema, record_name, namespace):
    """Avro record schema (dict) for an Arrow schema, Hudi/Spark style (all fields nullable, default null)."""
    return _record(list(schema), record_name, namespace)


def _record(fields, name, namespace):
    full = f"{namespace}.{name}" if namespace else name
    out = {"type": "record", "name": name}
    if namespace:
        out["namespace"] = namespace
    out["fields"] = [
        {"name": f.name, "type": ["null", _avro_type(f.type, f.name, full)], "default": None} for f in fields
    ]
    return out


def _avro_type(t, name, namespace):
    if pa.types.is_dictionary(t):
        return _avro_type(t.value_type, name, namespace)
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int"
    if pa.types.is_uint8(t) or pa.types.is_uint16(t):
        return "int"
    if pa.types.is_integer(t):
        return "long"
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "bytes"
    if pa.types.is_decimal(t):
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"{namespace}.{name}",
            "size": decimal_size(t.precision),
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    if pa.types.is_fixed_size_binary(t):
        return {"type": "fixed", "name": "fixed", "namespace": f"{namespace}.{name}", "size": t.byte_width}
    if pa.types.is_date(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(t):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if pa.types.is_time32(t):
        return {"type": "int", "logicalType": "time-millis"}
    if pa.types.is_time64(t):
        return {"type": "long", "logicalType": "time-micros"}
    if pa.types.is_map(t):
        if not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)):
            raise HoodieFormatError(f"field {name}: Avro map keys must be strings, got {t.key_type}")
        return {"type": "map", "values": ["null", _avro_type(t.item_type, name, namespace)]}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return {"type": "array", "items": ["null", _avro_type(t.value_type, name, namespace)]}
    if pa.types.is_struct(t):
        return _record(list(t), name, namespace)
    raise HoodieFormatError(f"field {name}: Arrow type {t} has no Avro equivalent")


# ---------------------------------------------------------------- Avro parsing


def parse_avro_schema(avro):
    """Avro schema as plain JSON data with named-type references expanded and `{"type": "long"}` as "long"."""
    return _expand(load_schema(avro), "", {})


def _fullname(name, namespace):
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def _expand(s, namespace, named):
    if isinstance(s, str):
        if s in PRIMITIVES:
            return s
        for key in (_fullname(s, namespace), s):
            if key in named:
                return named[key]
        raise HoodieFormatError(f"Avro schema: unknown type name {s!r}")
    if isinstance(s, list):
        return [_expand(b, namespace, named) for b in s]
    t = s["type"]
    if t in PRIMITIVES or isinstance(t, (dict, list)):
        if "logicalType" not in s:
            return _expand(t, namespace, named)
        return dict(s)
    if t not in NAMED and t not in ("array", "map"):
        raise HoodieFormatError(f"Avro schema: unknown type {t!r}")
    out = dict(s)
    if t in NAMED:
        full = _fullname(s["name"], s.get("namespace", namespace))
        named[full] = out
        namespace = full.rpartition(".")[0]
    if t in ("record", "error"):
        out["fields"] = [dict(f, type=_expand(f["type"], namespace, named)) for f in s["fields"]]
    elif t == "array":
        out["items"] = _expand(s["items"], namespace, named)
    elif t == "map":
        out["values"] = _expand(s["values"], namespace, named)
    return out


def split_union(s):
    """(nullable, non-null branches) of a type; a non-union is one branch."""
    if isinstance(s, list):
        branches = [b for b in s if b != "null"]
        return len(branches) < len(s), branches
    return s == "null", ([] if s == "null" else [s])


def schema_kind(s):
    """(type name, logical type or None) of a parsed type; a union is ("union", None)."""
    if isinstance(s, list):
        return "union", None
    if isinstance(s, str):
        return s, None
    return s["type"], s.get("logicalType")


class NotVectorizable(Exception):
    """A shape the vectorized Avro encoder or decoder does not handle; they fall back to fastavro for it."""


def vectorizable(s):
    """False when the schema holds a shape only the fastavro fallback handles (multi-type unions)."""
    if isinstance(s, list):
        return len([b for b in s if b != "null"]) <= 1 and all(vectorizable(b) for b in s)
    if isinstance(s, str):
        return True
    if s["type"] in ("record", "error"):
        return all(vectorizable(f["type"]) for f in s["fields"])
    if s["type"] == "array":
        return vectorizable(s["items"])
    if s["type"] == "map":
        return vectorizable(s["values"])
    return True


# ---------------------------------------------------------------- Avro -> Arrow


def avro_to_arrow_schema(avro):
    """Arrow schema of an Avro record schema (JSON string or dict)."""
    s = parse_avro_schema(avro)
    if not isinstance(s, dict) or s["type"] not in ("record", "error"):
        raise HoodieFormatError("Avro schema: top level must be a record")
    return pa.schema(_arrow_fields(s))


def _arrow_fields(record):
    return [avro_field_to_arrow(f["name"], f["type"]) for f in record["fields"]]


def avro_field_to_arrow(name, s):
    """Arrow field for an (expanded) Avro type; nullable when the type is a union with null."""
    nullable, branches = split_union(s)
    if len(branches) > 1:
        raise HoodieFormatError(f"field {name}: union {s} with several non-null branches is not supported")
    t = avro_type_to_arrow(branches[0]) if branches else pa.null()
    return pa.field(name, t, nullable=nullable or not branches)


def avro_type_to_arrow(s):
    """Arrow type of an expanded, non-union Avro type."""
    if isinstance(s, list):
        return avro_field_to_arrow("", s).type
    if isinstance(s, str):
        return _PRIMITIVE_ARROW[s]
    t, logical = s["type"], s.get("logicalType")
    if logical == "decimal" and t in ("bytes", "fixed"):
        p, scale = s["precision"], s.get("scale", 0)
        return pa.decimal128(p, scale) if p <= 38 else pa.decimal256(p, scale)
    if t == "int" and logical == "date":
        return pa.date32()
    if t == "int" and logical == "time-millis":
        return pa.time32("ms")
    if t == "long" and logical == "time-micros":
        return pa.time64("us")
    if t == "long" and logical in _TIMESTAMPS:
        unit, tz = _TIMESTAMPS[logical]
        return pa.timestamp(unit, tz=tz)
    if t in PRIMITIVES:
        return _PRIMITIVE_ARROW[t]
    if t in ("record", "error"):
        return pa.struct(_arrow_fields(s))
    if t == "enum":
        return pa.string()
    if t == "fixed":
        return pa.binary(s["size"])
    if t == "array":
        return pa.list_(avro_field_to_arrow("element", s["items"]))
    if t == "map":
        value = avro_field_to_arrow("value", s["values"])
        return pa.map_(pa.field("key", pa.string(), nullable=False), value)
    raise HoodieFormatError(f"Avro type {s} is not supported")


_PRIMITIVE_ARROW = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}

_TIMESTAMPS = {
    "timestamp-millis": ("ms", "UTC"),
    "timestamp-micros": ("us", "UTC"),
    "timestamp-nanos": ("ns", "UTC"),
    "local-timestamp-millis": ("ms", None),
    "local-timestamp-micros": ("us", None),
    "local-timestamp-nanos": ("ns", None),
}
