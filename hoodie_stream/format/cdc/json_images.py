"""The JSON text of changelog images, vectorized with Arrow: each row of a table as one JSON object, fields in schema
order, values as Avro renders records (dates as days, timestamps and times as their stored integers, decimals as
text). Strings, numbers and booleans are rendered column by column with Arrow compute; a column of another type
(binary, nested) or a string column holding control characters goes through Python's json module.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

_CONTROL = r"[\x00-\x1f]"


def json_rows(rows: pa.Table) -> pa.Array:
    """A string array: each row of `rows` as a JSON object `{"name": value, ...}`."""
    n = rows.num_rows
    if n == 0:
        return pa.array([], pa.string())
    parts: list[pa.Array | pa.Scalar] = []
    for i, field in enumerate(rows.schema):
        key = json.dumps(field.name, ensure_ascii=False)
        parts.append(pa.scalar(("{" if i == 0 else ", ") + key + ": "))
        parts.append(_values(rows[field.name].combine_chunks(), field.type))
    if not parts:
        return pa.array(["{}"] * n, pa.string())
    parts.append(pa.scalar("}"))
    return pc.binary_join_element_wise(*parts, "")


def _values(col: pa.Array, t: pa.DataType) -> pa.Array:
    """The JSON text of each value of a column (`null` for nulls)."""
    if pa.types.is_date32(t) or (pa.types.is_time(t) and t.bit_width == 32):
        col, t = col.cast(pa.int32()), pa.int32()
    elif pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_date64(t) or pa.types.is_duration(t):
        col, t = col.cast(pa.int64()), pa.int64()
    if pa.types.is_decimal(t):
        text = _quoted(col.cast(pa.string()))
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        if pc.any(pc.match_substring_regex(col, _CONTROL)).as_py():
            return _python(col)
        text = _quoted(col.cast(pa.string()))
    elif pa.types.is_boolean(t):
        text = pc.if_else(col, "true", "false")
    elif pa.types.is_integer(t):
        text = col.cast(pa.string())
    elif pa.types.is_floating(t):
        text = col.cast(pa.string())
        # a whole number keeps its fraction, as Java and Python write doubles (1.0, not 1)
        whole = pc.invert(pc.match_substring_regex(text, "[.eEnN]"))
        text = pc.if_else(whole, pc.binary_join_element_wise(text, ".0", ""), text)
        text = pc.if_else(pc.is_nan(col), "NaN", text)
        text = pc.if_else(pc.equal(col, float("inf")), "Infinity", text)
        text = pc.if_else(pc.equal(col, float("-inf")), "-Infinity", text)
    else:
        return _python(col)
    return pc.fill_null(text, "null")


def _quoted(text: pa.Array) -> pa.Array:
    escaped = pc.replace_substring(pc.replace_substring(text, "\\", "\\\\"), '"', '\\"')
    return pc.binary_join_element_wise('"', escaped, '"', "")


def _python(col: pa.Array) -> pa.Array:
    return pa.array(
        [json.dumps(v, default=_default, ensure_ascii=False) for v in col.to_pylist()],
        pa.string(),
    )


def _default(value):
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return str(value)
