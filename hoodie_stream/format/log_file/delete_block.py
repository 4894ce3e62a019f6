"""Contents of DELETE log blocks: content version 3, payload length, then the Avro binary HoodieDeleteRecordList
(record key, partition path, ordering value in a wrapper record per type)."""

import datetime
import decimal
import io
import json
import struct

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import HoodieFormatError, HoodieUsageError
from ..avro.encoder import encode_records
from ..avro.models import DELETE_RECORD_LIST_SCHEMA, WRAPPERS
from ..util.string_buffers import constant_strings
from .log_block import CONTENT_VERSION

WRAPPER_NAMES = tuple(name for name, _what, _type in WRAPPERS)  # union branches 1..11 of orderingVal
_PARSED: list[dict] = []


def delete_record_list_schema():
    """The parsed HoodieDeleteRecordList schema."""
    if not _PARSED:
        _PARSED.append(fastavro.parse_schema(json.loads(DELETE_RECORD_LIST_SCHEMA)))
    return _PARSED[0]


_HINTS = {
    "boolean": "BooleanWrapper",
    "bool": "BooleanWrapper",
    "int": "IntWrapper",
    "long": "LongWrapper",
    "float": "FloatWrapper",
    "double": "DoubleWrapper",
    "bytes": "BytesWrapper",
    "string": "StringWrapper",
    "date": "DateWrapper",
    "decimal": "DecimalWrapper",
    "time-micros": "TimeMicrosWrapper",
    "timestamp-micros": "TimestampMicrosWrapper",
}


def _wrapper_name(hint):
    name = _HINTS.get(hint, hint)
    if name not in WRAPPER_NAMES:
        raise HoodieFormatError(f"unknown ordering value wrapper {hint!r}")
    return name


def _natural_wrapper(value):
    if isinstance(value, (bool, np.bool_)):
        return "BooleanWrapper"
    if isinstance(value, (int, np.integer)):
        return "LongWrapper"
    if isinstance(value, (float, np.floating)):
        return "DoubleWrapper"
    if isinstance(value, str):
        return "StringWrapper"
    if isinstance(value, (bytes, bytearray)):
        return "BytesWrapper"
    if isinstance(value, datetime.datetime):
        return "TimestampMicrosWrapper"
    if isinstance(value, datetime.date):
        return "DateWrapper"
    if isinstance(value, datetime.time):
        return "TimeMicrosWrapper"
    if isinstance(value, decimal.Decimal):
        return "DecimalWrapper"
    raise HoodieFormatError(f"no ordering value wrapper for {type(value).__name__} value {value!r}")


# A delete without an ordering value (applied by arrival) carries Hudi's default ordering value, IntWrapper(0), as
# Hudi's writers put it (HoodieRecordPayload.getOrderingValue's default): Hudi's log scanners take a 0 as "natural
# order", and fail on a null one (the payload of a delete is built with it: "Ordering value is null").
NO_ORDERING = ("IntWrapper", 0)


def _ordering_union(value, wrapper):
    """fastavro tuple notation for the orderingVal union branch (Hudi's default IntWrapper(0) for None)."""
    if value is None:
        value, wrapper = NO_ORDERING[1], NO_ORDERING[0]
    if isinstance(value, tuple):
        wrapper, value = value
    name = _wrapper_name(wrapper) if wrapper else _natural_wrapper(value)
    if isinstance(value, np.generic):
        value = value.item()
    if name == "IntWrapper" and not -(2**31) <= value < 2**31:
        raise HoodieFormatError(f"ordering value {value} does not fit an IntWrapper")
    return ("org.apache.hudi.avro.model." + name, {"value": value})


def delete_content(keys, partitions, ordering_vals=None, wrapper=None):
    """DELETE content: int32 3, int32 payload length, Avro binary HoodieDeleteRecordList.

    Ordering values: None -> IntWrapper(0) (Hudi's "no ordering value"); a value -> its natural wrapper (int ->
    LongWrapper, float -> DoubleWrapper, str -> StringWrapper, ...), or the wrapper named by `wrapper` (e.g. "int" /
    "IntWrapper") for all values, or per value a tuple (wrapper, value).
    """
    n = len(keys)
    if ordering_vals is None:
        ordering_vals = [None] * n
    if len(partitions) != n or len(ordering_vals) != n:
        raise HoodieUsageError(
            f"delete block: {n} keys, {len(partitions)} partitions, {len(ordering_vals)} ordering values"
        )
    records = [
        {"recordKey": k, "partitionPath": p, "orderingVal": _ordering_union(v, wrapper)}
        for k, p, v in zip(keys, partitions, ordering_vals)
    ]
    out = io.BytesIO()
    fastavro.schemaless_writer(out, delete_record_list_schema(), {"deleteRecordList": records})
    payload = out.getvalue()
    return struct.pack(">ii", CONTENT_VERSION, len(payload)) + payload


# Arrow types whose values the vectorized DELETE encoding writes in their natural wrapper (as delete_content would)
_ARROW_WRAPPERS = (
    (pa.types.is_boolean, "BooleanWrapper"),
    (pa.types.is_integer, "LongWrapper"),
    (pa.types.is_floating, "DoubleWrapper"),
    (pa.types.is_string, "StringWrapper"),
    (pa.types.is_large_string, "StringWrapper"),
)


def _union_branch(schema, field, name):
    """Index of the branch named `name` (or its record's full name) in the union type of a record field."""
    item = schema["fields"][0]["type"]["items"]
    branches = next(f["type"] for f in item["fields"] if f["name"] == field)
    for i, b in enumerate(branches):
        if isinstance(b, dict) and b.get("name", "").rsplit(".", 1)[-1] == name:
            return i, b
    raise HoodieFormatError(f"no {name} branch in the delete record's {field} union")


def delete_content_arrow(keys, partition, ordering=None):
    """DELETE content of Arrow record keys in one partition, with optional Arrow ordering values (null: no ordering
    value), encoded vectorized: byte for byte what `delete_content` writes for the same values. Ordering types
    other than boolean, integer, floating point and string go through `delete_content`."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if isinstance(ordering, pa.ChunkedArray):
        ordering = ordering.combine_chunks()
    wrapper = None
    if ordering is not None and ordering.null_count < len(ordering):
        wrapper = next((w for check, w in _ARROW_WRAPPERS if check(ordering.type)), None)
        if wrapper is None:
            return delete_content(keys.to_pylist(), [partition] * len(keys), ordering.to_pylist())
    n = len(keys)
    schema = delete_record_list_schema()
    if n == 0:
        payload = b"\x00"
    else:
        ident = {
            "type": "record",
            "name": "DeleteKey",
            "fields": [
                {"name": "recordKey", "type": ["null", "string"]},
                {"name": "partitionPath", "type": ["null", "string"]},
            ],
        }
        table = pa.table({"recordKey": keys.cast(pa.string()), "partitionPath": constant_strings(partition, n)})
        pieces = [_binary(*encode_records(table, ident), n)]
        # IntWrapper(0): its union branch, then the zigzag varint 0
        no_value = bytes(_zigzag_varint(_union_branch(schema, "orderingVal", NO_ORDERING[0])[0])) + b"\x00"
        if wrapper is None:
            pieces.append(pa.repeat(pa.scalar(no_value, pa.large_binary()), n))
        else:
            branch, wrapper_schema = _union_branch(schema, "orderingVal", wrapper)
            value_schema = {
                "type": "record",
                "name": "Value",
                "fields": [{"name": "value", "type": wrapper_schema["fields"][0]["type"]}],
            }
            if pa.types.is_integer(ordering.type):
                ordering = ordering.cast(pa.int64())
            elif pa.types.is_floating(ordering.type):
                ordering = ordering.cast(pa.float64())
            present = ordering.is_valid()
            values = pc.filter(ordering, present)
            encoded = _binary(*encode_records(pa.table({"value": values}), value_schema), len(values))
            lead = bytes(_zigzag_varint(branch))
            with_branch = pc.binary_join_element_wise(
                pa.scalar(lead, pa.large_binary()), encoded, pa.scalar(b"", pa.large_binary())
            )
            # rows without a value get IntWrapper(0); the others their value, in row order
            slots = np.cumsum(present.to_numpy(zero_copy_only=False)) - 1
            taken = pc.take(with_branch, pa.array(np.maximum(slots, 0)))
            pieces.append(pc.if_else(present, taken, pa.scalar(no_value, pa.large_binary())))
        rows = pc.binary_join_element_wise(*pieces, pa.scalar(b"", pa.large_binary()))
        body = rows.buffers()[2].to_pybytes()[_offset_of(rows, 0) : _offset_of(rows, n)]
        payload = bytes(_zigzag_varint(n)) + body + b"\x00"
    return struct.pack(">ii", CONTENT_VERSION, len(payload)) + payload


def _binary(buffer, offsets, n):
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(np.ascontiguousarray(offsets)), pa.py_buffer(buffer)]
    )


def _offset_of(arr, i):
    return int(np.frombuffer(arr.buffers()[1], np.int64, 1, (arr.offset + i) * 8)[0])


def _zigzag_varint(v):
    u = (v << 1) ^ (v >> 63)
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return out


def parse_delete_content(content, with_wrapper=False):
    """[(record key, partition path, ordering value)]; with_wrapper=True gives (wrapper name, value) or None."""
    if len(content) < 8:
        raise HoodieFormatError(f"delete block content of {len(content)} bytes is too short")
    version, length = struct.unpack_from(">ii", content, 0)
    if version != CONTENT_VERSION:
        raise HoodieFormatError(f"delete block content version {version} is not supported (only 3)")
    if length != len(content) - 8:
        raise HoodieFormatError(f"delete block payload length {length} != {len(content) - 8} bytes present")
    schema = delete_record_list_schema()
    try:
        record = fastavro.schemaless_reader(io.BytesIO(content[8:]), schema, None, return_record_name=True)
    except Exception as e:
        raise HoodieFormatError(f"delete block payload is not a HoodieDeleteRecordList: {e}") from None
    result = []
    for item in record["deleteRecordList"]:
        value = item["orderingVal"]
        if value is not None:
            name, inner = value
            short = name.rsplit(".", 1)[-1]
            value = (short, inner["value"]) if with_wrapper else inner["value"]
        result.append((item["recordKey"], item["partitionPath"], value))
    return result
