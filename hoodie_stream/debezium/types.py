"""Kafka Connect and Debezium field types to Arrow, decoded a column at a time.

A change event's row values arrive as the JSON converter writes them: integers, strings (base64 for bytes and for
`org.apache.kafka.connect.data.Decimal`, ISO-8601 for `io.debezium.time.ZonedTimestamp`) and structs (for
`io.debezium.data.VariableScaleDecimal`). `arrow_type(field)` gives the Arrow type of a Connect schema field
(`{"type": ..., "name": ..., "parameters": ...}`) and `decode(values, field)` turns the column of its raw values into
that type, with Arrow compute and numpy over whole columns (no Python loop per value).

Mappings (Debezium's documentation of its temporal and decimal types):
- `Decimal` (bytes: big-endian two's-complement unscaled value, `parameters.scale`, optional
  `connect.decimal.precision`) -> decimal128(precision, scale), decimal256 past 38 digits; without a precision,
  decimal128(38, scale).
- `VariableScaleDecimal` (struct of `scale` and `value`) -> decimal128(precision, scale) of `variable_scale` (a
  value that does not fit is an error naming it), or its exact decimal text with `variable_scale="string"`.
- `io.debezium.time.Date` and Connect `Date` (days) -> date32; `Time` and Connect `Time` (ms) -> time32[ms];
  `MicroTime` -> time64[us]; `NanoTime` -> time64[ns] (times of day).
- `Timestamp` and Connect `Timestamp` (ms), `MicroTimestamp` (us), `NanoTimestamp` (ns) -> timestamp of that unit
  without a time zone (Debezium writes the database's local date-time as if it were UTC);
  `ZonedTimestamp` (ISO-8601 text) -> timestamp[us, UTC].
- PostgreSQL's `infinity` / `-infinity` timestamps (Debezium writes 9223372036825200000 and -9223372036832400000, or
  the texts `infinity` / `-infinity` for a zoned one) -> the largest / smallest timestamp Spark holds,
  9999-12-31 23:59:59.999999 and 0001-01-01 00:00:00 (ns timestamps: the largest / smallest int64 nanosecond).
  MySQL's zero dates arrive as null (or the epoch, by the connector's settings) and stay so.
- `io.debezium.data.Json`, `Uuid`, `Enum`, `EnumSet`, `Xml` (text) -> string; `bytes` (base64, as `Bits` too) ->
  binary; int8/16/32/64, float32/64, boolean, string -> their Arrow types.
"""

import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import HoodieFormatError
from ..format.util.string_buffers import utf8_buffers

CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
PG_INFINITY = 9223372036825200000
PG_NEGATIVE_INFINITY = -9223372036832400000
# Spark's timestamp range, in microseconds since the epoch
MAX_MICROS = 253402300799999999  # 9999-12-31 23:59:59.999999
MIN_MICROS = -62135596800000000  # 0001-01-01 00:00:00

_PRIMITIVES = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "float": pa.float32(),  # as some producers name Connect's float32 / float64
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.binary(),
}
_DATES = {"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"}
_TIMES = {
    "io.debezium.time.Time": pa.time32("ms"),
    "org.apache.kafka.connect.data.Time": pa.time32("ms"),
    "io.debezium.time.MicroTime": pa.time64("us"),
    "io.debezium.time.NanoTime": pa.time64("ns"),
}
_TIMESTAMPS = {
    "io.debezium.time.Timestamp": "ms",
    "org.apache.kafka.connect.data.Timestamp": "ms",
    "io.debezium.time.MicroTimestamp": "us",
    "io.debezium.time.NanoTimestamp": "ns",
}
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
_PER_MICRO = {"ms": 1000, "us": 1, "ns": None}


def arrow_type(field, variable_scale=(38, 10)):
    """The Arrow type of a Connect schema field; `variable_scale` is (precision, scale) or "string" for
    VariableScaleDecimal fields."""
    name = field.get("name")
    kind = field.get("type")
    if name == CONNECT_DECIMAL:
        scale, precision = _decimal_parameters(field)
        return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
    if name == VARIABLE_SCALE_DECIMAL:
        return pa.string() if variable_scale == "string" else pa.decimal128(*variable_scale)
    if name in _DATES:
        return pa.date32()
    if name in _TIMES:
        return _TIMES[name]
    if name in _TIMESTAMPS:
        return pa.timestamp(_TIMESTAMPS[name])
    if name == ZONED_TIMESTAMP:
        return pa.timestamp("us", tz="UTC")
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if kind == "struct":  # e.g. io.debezium.data.geometry.* (wkb, srid): a struct of the fields' columns
        return pa.struct([pa.field(f["field"], arrow_type(f, variable_scale)) for f in field.get("fields", [])])
    if kind == "array" and isinstance(field.get("items"), dict):
        return pa.list_(arrow_type(field["items"], variable_scale))
    raise HoodieFormatError(f"field {field.get('field')!r}: Connect type {kind!r} ({name}) has no column mapping")


def decode(values, field, variable_scale=(38, 10)):
    """The column of a field's raw JSON values (an Arrow array: integers, strings, or a struct for
    VariableScaleDecimal) as `arrow_type(field)`."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    name = field.get("name")
    where = f"field {field.get('field')!r}"
    target = arrow_type(field, variable_scale)
    if name == CONNECT_DECIMAL:
        if _numeric(values.type):  # the converter's decimal.format=NUMERIC writes JSON numbers
            return _cast(values, target, where)
        return _checked(_unscaled(_encoded(values, where), target.byte_width, where).view(target), where)
    if name == VARIABLE_SCALE_DECIMAL:
        return _variable_scale(values, variable_scale, where)
    if name in _DATES:
        return values.cast(pa.int32()).view(pa.date32())
    if name in _TIMES:
        return values.cast(pa.int64()).cast(pa.int32() if target.bit_width == 32 else pa.int64()).view(target)
    if name in _TIMESTAMPS:
        return _clamped(values.cast(pa.int64()), _TIMESTAMPS[name]).view(target)
    if name == ZONED_TIMESTAMP:
        return _zoned(_strings(values, where), where)
    if field.get("type") == "bytes":
        return values.cast(pa.binary()) if _is_binary(values) else _base64_binary(_strings(values, where), where)
    if field.get("type") == "struct" and pa.types.is_struct(values.type):
        children = {f.name: c for f, c in zip(values.type, values.flatten())}
        arrays = [
            decode(children[f["field"]], f, variable_scale)
            if f["field"] in children
            else pa.nulls(len(values), arrow_type(f, variable_scale))
            for f in field.get("fields", [])
        ]
        return pa.StructArray.from_arrays(arrays, fields=list(target), mask=pc.is_null(values))
    if field.get("type") == "array" and pa.types.is_list(values.type):
        items = decode(values.values, field["items"], variable_scale)
        return pa.ListArray.from_arrays(values.offsets, items, mask=pc.is_null(values)).cast(target)
    return values.cast(target)


def _decimal_parameters(field):
    parameters = field.get("parameters") or {}
    try:
        scale = int(parameters.get("scale", "0"))
        precision = int(parameters.get("connect.decimal.precision", "38"))
    except ValueError:
        raise HoodieFormatError(
            f"field {field.get('field')!r}: decimal parameters {parameters} are not numbers"
        ) from None
    return scale, max(precision, scale, 1)


def _strings(values, where):
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return values.cast(pa.string())
    raise HoodieFormatError(f"{where}: expected base64 or ISO-8601 text, got {values.type}")


MAPPED = {CONNECT_DECIMAL, VARIABLE_SCALE_DECIMAL, ZONED_TIMESTAMP} | _DATES | set(_TIMES) | set(_TIMESTAMPS)

# base64 alphabet -> 6-bit value; 64 marks the padding character, 255 anything else
_SEXTET = np.full(256, 255, np.uint8)
_SEXTET[np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", np.uint8)] = np.arange(64)
_SEXTET[ord("=")] = 64


def _base64_bytes(strings, where):
    """(decoded bytes of all values back to back, byte offsets per value) of a string array of base64 values (null
    values decode to nothing). Each value's length is a multiple of 4, so the values decode as one stream of 4-char
    groups."""
    n = len(strings)
    data, offsets = utf8_buffers(pc.fill_null(strings, ""), where)  # a null decodes to nothing
    raw = data[offsets[0] : offsets[-1]]
    lengths = np.diff(offsets)
    if (lengths % 4).any():
        bad = int(np.flatnonzero(lengths % 4)[0])
        raise HoodieFormatError(f"{where}: value {bad} is not base64 (length {lengths[bad]} is not a multiple of 4)")
    sextets = _SEXTET[raw]
    groups = sextets.reshape(-1, 4)
    pad = groups == 64
    # padding only at a value's end: "xx==" or "xxx="
    ends = np.zeros(len(groups), bool)
    ends[(offsets[1:][lengths > 0] - offsets[0]) // 4 - 1] = True
    bad_pad = pad[:, :2].any(axis=1) | (pad[:, 2] & ~pad[:, 3]) | (pad.any(axis=1) & ~ends)
    if (sextets == 255).any() or bad_pad.any():
        at = np.flatnonzero((groups == 255).any(axis=1) | bad_pad)[0] * 4 + offsets[0]
        bad = int(np.searchsorted(offsets, at, side="right") - 1)
        raise HoodieFormatError(f"{where}: value {bad} is not base64")
    s = np.where(pad, 0, groups).astype(np.uint32)
    word = (s[:, 0] << 18) | (s[:, 1] << 12) | (s[:, 2] << 6) | s[:, 3]
    decoded = np.empty((len(groups), 3), np.uint8)
    decoded[:, 0] = word >> 16
    decoded[:, 1] = (word >> 8) & 0xFF
    decoded[:, 2] = word & 0xFF
    flat = decoded.reshape(-1)
    pads = np.zeros(n, np.int64)
    last = (offsets[1:] - offsets[0]) // 4 - 1
    has = lengths > 0
    pads[has] = pad[last[has]].sum(axis=1)
    sizes = lengths // 4 * 3 - pads
    keep = np.ones(len(flat), bool)
    for k in (1, 2):  # the padding bytes of each value's last group
        rows = np.flatnonzero(pads >= k)
        keep[(last[rows] + 1) * 3 - k] = False
    out_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=out_offsets[1:])
    return flat[keep], out_offsets


def _base64_binary(strings, where):
    data, offsets = _base64_bytes(strings, where)
    return pa.Array.from_buffers(
        pa.large_binary(),
        len(strings),
        [_validity(strings), pa.py_buffer(offsets), pa.py_buffer(data)],
    ).cast(pa.binary())


def _validity(values):
    """A validity bitmap of `values` starting at its first value (None when it has no nulls)."""
    if not values.null_count:
        return None
    valid = pc.is_valid(values).to_numpy(zero_copy_only=False)
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _is_binary(values):
    return pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)


def _encoded(values, where):
    """Bytes values as they come: base64 text (JSON) or binary (Avro)."""
    return values if _is_binary(values) else _strings(values, where)


def _unscaled(strings, width, where):
    """Fixed-size binary array of `width`-byte little-endian two's-complement integers from big-endian
    two's-complement values, in base64 text (JSON) or binary (Avro) (Arrow's decimal layout)."""
    if _is_binary(strings):
        data, offsets = utf8_buffers(pc.fill_null(strings, b""), where)  # offsets into the whole buffer
    else:
        data, offsets = _base64_bytes(strings, where)
    sizes = np.diff(offsets)
    if len(sizes) and sizes.max() > width:
        bad = int(np.argmax(sizes))
        raise HoodieFormatError(f"{where}: value {bad} has {sizes[bad]} bytes, more than a {width}-byte decimal holds")
    n = len(strings)
    # byte j of row i (little-endian) is byte sizes[i] - 1 - j of its big-endian value, or the sign fill past it
    j = np.arange(width)
    src = offsets[:-1, None] + sizes[:, None] - 1 - j[None, :]
    inside = j[None, :] < sizes[:, None]
    first = data[np.minimum(offsets[:-1], max(len(data) - 1, 0))] if len(data) else np.zeros(n, np.uint8)
    negative = (sizes > 0) & (first >= 0x80)
    fill = np.where(negative, 0xFF, 0).astype(np.uint8)
    taken = data[np.where(inside, src, 0)] if len(data) else np.zeros((n, width), np.uint8)
    out = np.where(inside, taken, fill[:, None]).astype(np.uint8)
    return pa.Array.from_buffers(pa.binary(width), n, [_validity(strings), pa.py_buffer(out.reshape(-1))])


def _numeric(type_):
    return pa.types.is_integer(type_) or pa.types.is_decimal(type_) or pa.types.is_floating(type_)


def _cast(values, target, where):
    """Numbers (or decimals of another scale) cast to a decimal type: an error unless each fits it exactly. The
    integer digits are checked before the cast, which does not check them when it rescales."""
    if pa.types.is_integer(values.type):  # Arrow casts an int64 only to decimals of 19 + scale digits or more
        values = values.cast(pa.decimal128(38, 0))
    if len(values) - values.null_count:
        largest = pc.max(pc.abs(values)).as_py()
        if decimal.Decimal(largest) >= decimal.Decimal(10) ** (target.precision - target.scale):
            raise HoodieFormatError(f"{where}: a value of {largest} does not fit {target}")
    try:
        out = values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise HoodieFormatError(f"{where}: {e}") from None
    return _checked(out, where)


def _checked(array, where):
    """A decimal array whose values all fit its precision."""
    try:
        array.validate(full=True)
    except pa.ArrowInvalid as e:
        raise HoodieFormatError(f"{where}: {e}") from None
    limit = decimal.Decimal(10) ** (array.type.precision - array.type.scale)
    if len(array) - array.null_count:
        largest = pc.max(pc.abs(array)).as_py()
        if largest >= limit:
            raise HoodieFormatError(f"{where}: a value of {largest} does not fit {array.type}")
    return array


def _variable_scale(values, variable_scale, where):
    if not pa.types.is_struct(values.type) or {values.type.field(i).name for i in range(values.type.num_fields)} != {
        "scale",
        "value",
    }:
        raise HoodieFormatError(f"{where}: a VariableScaleDecimal is a struct of scale and value, got {values.type}")
    valid = pc.is_valid(values)
    scales = pc.fill_null(values.field("scale"), 0).cast(pa.int32()).to_numpy(zero_copy_only=False)
    raw = values.field("value")
    raw = pc.if_else(valid, raw, pa.scalar(None, raw.type))
    if variable_scale == "string":  # up to 76 digits
        exact = _unscaled(_encoded(raw, where), 32, where).view(pa.decimal256(76, 0))
        pieces = []
        for scale in np.unique(scales):
            rows = pa.array(np.flatnonzero(scales == scale))
            pieces.append((rows, pc.take(exact, rows).view(pa.decimal256(76, int(scale))).cast(pa.string())))
        text = _scatter(len(values), pieces, pa.string())
        return pc.if_else(valid, text, pa.scalar(None, pa.string()))
    exact = _unscaled(_encoded(raw, where), 16, where).view(pa.decimal128(38, 0))  # up to 38 digits
    precision, scale = variable_scale
    target = pa.decimal128(precision, scale)
    pieces = []
    for value_scale in np.unique(scales):
        rows = pa.array(np.flatnonzero(scales == value_scale))
        part = pc.take(exact, rows).view(pa.decimal128(38, int(value_scale)))
        try:
            pieces.append((rows, _cast(part, target, where)))
        except HoodieFormatError:
            raise HoodieFormatError(
                f"{where}: a value of scale {value_scale} does not fit {target} (keep such values as text with the "
                f"string mode of VariableScaleDecimal)"
            ) from None
    out = _scatter(len(values), pieces, target)
    return pc.if_else(valid, out, pa.scalar(None, target))


def _scatter(n, pieces, type_):
    """An array of n values of `type_` made of (row indices, values) pieces that cover every row."""
    if not pieces:
        return pa.nulls(n, type_)
    rows = pa.concat_arrays([r for r, _ in pieces]) if len(pieces) > 1 else pieces[0][0]
    values = pa.concat_arrays([v for _, v in pieces]) if len(pieces) > 1 else pieces[0][1]
    order = np.empty(n, np.int64)
    order[rows.to_numpy()] = np.arange(n)
    return pc.take(values, pa.array(order))


def _clamped(values, unit):
    """int64 times since the epoch in `unit` with PostgreSQL's infinities at Spark's bounds."""
    if unit == "ns":
        high, low = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    else:
        per = _PER_MICRO[unit]
        high, low = MAX_MICROS // per, MIN_MICROS // per
    out = pc.if_else(pc.equal(values, PG_INFINITY), pa.scalar(high, pa.int64()), values)
    return pc.if_else(pc.equal(out, PG_NEGATIVE_INFINITY), pa.scalar(low, pa.int64()), out)


def _zoned(strings, where):
    lowered = pc.utf8_lower(strings)
    finite = pc.if_else(pc.is_in(lowered, pa.array(["infinity", "-infinity"])), pa.scalar(None, pa.string()), strings)
    try:
        parsed = finite.cast(pa.timestamp("us", tz="UTC"))
    except pa.ArrowInvalid as e:
        raise HoodieFormatError(f"{where}: not an ISO-8601 timestamp: {e}") from None
    out = pc.if_else(pc.equal(lowered, "infinity"), pa.scalar(MAX_MICROS, pa.timestamp("us", tz="UTC")), parsed)
    return pc.if_else(pc.equal(lowered, "-infinity"), pa.scalar(MIN_MICROS, pa.timestamp("us", tz="UTC")), out)
