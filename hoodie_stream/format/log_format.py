"""Hudi log blocks (log format version 1): framing, headers, and the contents of data/delete/command blocks.

Block layout (all integers big endian): magic `#HUDI#`, int64 blockSize (bytes after this field, including
the trailing length), int32 format version 1, int32 block type, header map, int64 content length, content,
footer map, int64 total length of the block before this field (= blockSize + 6).
A map is int32 count, then per entry int32 key ordinal, int32 byte length, UTF-8 bytes.
"""

import datetime
import decimal
import io
import json
import struct
from dataclasses import dataclass, field
from enum import IntEnum

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# pyarrow.parquet is imported by the functions that use it: the write chain's workers never need to load it
from .errors import HoodieFormatError

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1
CONTENT_VERSION = 3
ROLLBACK_COMMAND = "0"
# version + type + empty header + content length + empty footer + trailing length
MIN_BLOCK_SIZE = 4 + 4 + 4 + 8 + 4 + 8


class BlockType(IntEnum):
    COMMAND = 0
    DELETE = 1
    CORRUPT = 2
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(IntEnum):
    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6


@dataclass
class LogBlock:
    """One block. For CORRUPT blocks `content` holds the raw bytes after the magic up to the next magic/EOF.

    `offset` is the position of the block's magic in its file and `size` its length in bytes (set by readers).
    """

    block_type: BlockType
    header: dict
    content: bytes
    footer: dict = field(default_factory=dict)
    offset: int = -1
    size: int = 0

    @property
    def instant_time(self):
        return self.header.get(HeaderKey.INSTANT_TIME)


# ---------------------------------------------------------------------------------------------- framing

def _encode_map(entries):
    parts = [struct.pack(">i", len(entries))]
    for key, value in entries.items():
        data = str(value).encode("utf-8")
        parts.append(struct.pack(">ii", int(key), len(data)))
        parts.append(data)
    return b"".join(parts)


def _decode_map(buf, pos, end):
    if pos + 4 > end:
        raise HoodieFormatError(f"metadata map at offset {pos} runs past the block end {end}")
    (count,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    if count < 0:
        raise HoodieFormatError(f"negative metadata entry count {count} at offset {pos - 4}")
    entries = {}
    for _ in range(count):
        if pos + 8 > end:
            raise HoodieFormatError(f"metadata entry at offset {pos} runs past the block end {end}")
        key, length = struct.unpack_from(">ii", buf, pos)
        pos += 8
        if length < 0 or pos + length > end:
            raise HoodieFormatError(f"metadata value of length {length} at offset {pos} runs past the block end")
        try:
            entries[HeaderKey(key)] = bytes(buf[pos:pos + length]).decode("utf-8")
        except ValueError as e:
            raise HoodieFormatError(f"unknown header key ordinal {key} at offset {pos - 8}: {e}") from None
        pos += length
    return entries, pos


def _frame(block, content_len):
    """(bytes before the content, bytes after it) of a block whose content is `content_len` bytes long. The first
    part has the same length whatever `content_len` is."""
    head = struct.pack(">ii", LOG_FORMAT_VERSION, int(block.block_type)) + _encode_map(block.header)
    footer = _encode_map(block.footer or {})
    block_size = len(head) + 8 + content_len + len(footer) + 8
    return (MAGIC + struct.pack(">q", block_size) + head + struct.pack(">q", content_len),
            footer + struct.pack(">q", block_size + len(MAGIC)))


def block_segments(block):
    """The bytes of a block, magic included, as a list of segments to write one after the other (no copy of the
    content). `block.content` may be bytes or a list of byte segments. A CORRUPT block gives back its magic and
    raw bytes unchanged."""
    parts = list(block.content) if isinstance(block.content, (list, tuple)) else [block.content]
    if block.block_type == BlockType.CORRUPT:
        return [MAGIC, *parts]
    before, after = _frame(block, sum(len(p) for p in parts))
    return [before, *parts, after]


def write_block(f, block):
    """Write one block at the current position of the binary file `f`; returns the bytes written.

    `block.content` may be bytes, a list of byte segments, or an iterator of segments whose total length is not
    known up front (a data block encoded while it is written): then `f` must be seekable, and the framing before
    the content is written again once the content's length is known.
    """
    if block.block_type == BlockType.CORRUPT or isinstance(block.content, (bytes, bytearray, memoryview, list, tuple)):
        written = 0
        for segment in block_segments(block):
            f.write(segment)
            written += len(segment)
        return written
    start = f.tell()
    f.write(_frame(block, 0)[0])
    content_len = 0
    for part in block.content:
        f.write(part)
        content_len += len(part)
    before, after = _frame(block, content_len)
    f.write(after)
    end = f.tell()
    f.seek(start)
    f.write(before)
    f.seek(end)
    return end - start


def encode_block(block):
    """Full bytes of a block, magic included. A CORRUPT block gives back its magic and raw bytes unchanged."""
    return b"".join(bytes(p) for p in block_segments(block))


def decode_block_at(buf, pos):
    """Decode the well-formed block whose magic starts at `pos`; returns (LogBlock, position after it)."""
    buf = memoryview(buf)
    n = len(buf)
    if bytes(buf[pos:pos + 6]) != MAGIC:
        raise HoodieFormatError(f"no log block magic at offset {pos}")
    if pos + 14 + MIN_BLOCK_SIZE > n:
        raise HoodieFormatError(f"log block at offset {pos} is truncated")
    # Java reads blockSize as a long and casts it to int
    block_size = (struct.unpack_from(">q", buf, pos + 6)[0] + 2**31) % 2**32 - 2**31
    start = pos + 14
    end = start + block_size
    if block_size < MIN_BLOCK_SIZE or end > n:
        raise HoodieFormatError(f"log block at offset {pos}: block size {block_size} does not fit the file ({n} bytes)")
    version, type_id = struct.unpack_from(">ii", buf, start)
    if version != LOG_FORMAT_VERSION:
        raise HoodieFormatError(f"log block at offset {pos}: log format version {version} is not supported (only 1)")
    try:
        block_type = BlockType(type_id)
    except ValueError:
        raise HoodieFormatError(f"log block at offset {pos}: unknown block type {type_id}") from None
    header, p = _decode_map(buf, start + 8, end - 8)
    if p + 8 > end - 8:
        raise HoodieFormatError(f"log block at offset {pos}: content length runs past the block end")
    (content_length,) = struct.unpack_from(">q", buf, p)
    p += 8
    if content_length < 0 or p + content_length > end - 8:
        raise HoodieFormatError(f"log block at offset {pos}: content length {content_length} runs past the block end")
    content = bytes(buf[p:p + content_length])
    footer, p = _decode_map(buf, p + content_length, end - 8)
    (total,) = struct.unpack_from(">q", buf, end - 8)
    if p != end - 8 or total != block_size + len(MAGIC):
        raise HoodieFormatError(
            f"log block at offset {pos}: inconsistent framing (fields end at {p}, trailer at {end - 8}, "
            f"trailing length {total}, block size {block_size})")
    return LogBlock(block_type, header, content, footer, pos, end - pos), end


# ---------------------------------------------------------------------------------------------- data blocks

def avro_data_content(records_buffer, offsets):
    """AVRO_DATA content: int32 3, int32 count, then per record int32 length + Avro binary record.

    `records_buffer` holds the encoded records back to back; record i is buffer[offsets[i]:offsets[i+1]].
    """
    n = len(offsets) - 1
    if n < 0:
        raise ValueError("offsets must hold at least one entry")
    return avro_data_header(n) + avro_data_records(records_buffer, offsets)


def avro_data_header(count):
    """The first 8 bytes of AVRO_DATA content: content version 3 and the record count."""
    return struct.pack(">ii", CONTENT_VERSION, count)


def avro_data_records(records_buffer, offsets):
    """The records part of AVRO_DATA content (int32 length + Avro binary, per record): contents of consecutive
    chunks of records concatenate, so a large block can be encoded a chunk at a time."""
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    if n <= 0:
        return b""
    src = np.frombuffer(records_buffer, dtype=np.uint8)[offsets[0]:offsets[-1]]
    lengths = np.diff(offsets)
    if lengths.min() < 0 or lengths.max() > 0x7FFFFFFF:
        raise ValueError("record offsets must be non-decreasing and each record < 2 GiB")
    out = np.empty(4 * n + len(src), dtype=np.uint8)
    prefix_at = 4 * np.arange(n, dtype=np.int64) + (offsets[:-1] - offsets[0])
    prefix_idx = (prefix_at[:, None] + np.arange(4)).ravel()
    out[prefix_idx] = lengths.astype(">i4").view(np.uint8)
    is_data = np.ones(len(out), dtype=bool)
    is_data[prefix_idx] = False
    out[is_data] = src
    return out.tobytes()


def split_avro_data_content(content):
    """Inverse of avro_data_content: (buffer of the records back to back, int64 offsets of n+1 entries)."""
    if len(content) < 8:
        raise HoodieFormatError(f"avro data block content of {len(content)} bytes is too short")
    version, n = struct.unpack_from(">ii", content, 0)
    if version != CONTENT_VERSION:
        raise HoodieFormatError(f"avro data block content version {version} is not supported (only 3)")
    if n < 0:
        raise HoodieFormatError(f"avro data block has a negative record count {n}")
    starts = _walk_length_prefixes(content, 8, n)
    raw = np.frombuffer(content, dtype=np.uint8)
    is_data = np.ones(len(raw), dtype=bool)
    is_data[:8] = False
    lengths = np.zeros(n, dtype=np.int64)
    if n:
        prefix_idx = (starts[:, None] - 4 + np.arange(4)).ravel()
        lengths = raw[prefix_idx].view(">i4").astype(np.int64)
        is_data[prefix_idx] = False
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return raw[is_data].tobytes(), offsets


def _walk_length_prefixes(content, pos, n):
    """Start positions of the n records (each after its int32 length prefix); checks every length."""
    unpack = struct.Struct(">i").unpack_from
    size = len(content)
    starts = [0] * n
    try:
        for i in range(n):
            (length,) = unpack(content, pos)
            pos += 4
            starts[i] = pos
            pos += length
            if length < 0 or pos > size:
                raise HoodieFormatError(f"avro data block record {i}: length {length} runs past the content end")
    except struct.error:
        raise HoodieFormatError(f"avro data block: record length prefix at {pos} runs past the content end") from None
    if pos != size:
        raise HoodieFormatError(f"avro data block: {size - pos} trailing bytes after {n} records")
    return np.array(starts, dtype=np.int64)


def parquet_data_content(table, compression="gzip"):
    """PARQUET_DATA content: the bytes of a complete parquet file holding `table`."""
    import pyarrow.parquet as pq
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=compression)
    return sink.getvalue().to_pybytes()


def read_parquet_content(content):
    import pyarrow.parquet as pq
    if content[:4] != b"PAR1" or content[-4:] != b"PAR1":
        raise HoodieFormatError("parquet data block content is not a parquet file")
    return pq.read_table(pa.BufferReader(content))


# ---------------------------------------------------------------------------------------------- delete blocks

def _wrapper(name, value_type):
    return {"type": "record", "name": name, "namespace": "org.apache.hudi.avro.model",
            "fields": [{"name": "value", "type": value_type}]}


WRAPPER_TYPES = {
    "BooleanWrapper": "boolean",
    "IntWrapper": "int",
    "LongWrapper": "long",
    "FloatWrapper": "float",
    "DoubleWrapper": "double",
    "BytesWrapper": "bytes",
    "StringWrapper": "string",
    "DateWrapper": {"type": "int", "logicalType": "date"},
    "DecimalWrapper": {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15},
    "TimeMicrosWrapper": {"type": "long", "logicalType": "time-micros"},
    "TimestampMicrosWrapper": {"type": "long", "logicalType": "timestamp-micros"},
}

_LOCAL_DELETE_RECORD_LIST_SCHEMA = {
    "type": "record", "name": "HoodieDeleteRecordList", "namespace": "org.apache.hudi.avro.model",
    "fields": [{"name": "deleteRecordList", "type": {"type": "array", "items": {
        "type": "record", "name": "HoodieDeleteRecord", "fields": [
            {"name": "recordKey", "type": ["null", "string"], "default": None},
            {"name": "partitionPath", "type": ["null", "string"], "default": None},
            {"name": "orderingVal", "type": ["null"] + [_wrapper(k, v) for k, v in WRAPPER_TYPES.items()],
             "default": None},
        ]}}}],
}


def _delete_schema():
    try:
        from . import avro_models
    except ImportError:
        avro_models = None
    for attr in ("DELETE_RECORD_LIST_SCHEMA", "HOODIE_DELETE_RECORD_LIST_SCHEMA"):
        schema = getattr(avro_models, attr, None)
        if schema is not None:
            return fastavro.parse_schema(json.loads(schema) if isinstance(schema, str) else schema)
    return fastavro.parse_schema(_LOCAL_DELETE_RECORD_LIST_SCHEMA)


_PARSED = []


def delete_record_list_schema():
    """The parsed HoodieDeleteRecordList schema (from avro_models when it provides one)."""
    if not _PARSED:
        _PARSED.append(_delete_schema())
    return _PARSED[0]


_HINTS = {
    "boolean": "BooleanWrapper", "bool": "BooleanWrapper", "int": "IntWrapper", "long": "LongWrapper",
    "float": "FloatWrapper", "double": "DoubleWrapper", "bytes": "BytesWrapper", "string": "StringWrapper",
    "date": "DateWrapper", "decimal": "DecimalWrapper", "time-micros": "TimeMicrosWrapper",
    "timestamp-micros": "TimestampMicrosWrapper",
}


def _wrapper_name(hint):
    name = _HINTS.get(hint, hint)
    if name not in WRAPPER_TYPES:
        raise ValueError(f"unknown ordering value wrapper {hint!r}")
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
    raise ValueError(f"no ordering value wrapper for {type(value).__name__} value {value!r}")


def _ordering_union(value, wrapper):
    """fastavro tuple notation for the orderingVal union branch, or None."""
    if value is None:
        return None
    if isinstance(value, tuple):
        wrapper, value = value
    name = _wrapper_name(wrapper) if wrapper else _natural_wrapper(value)
    if isinstance(value, np.generic):
        value = value.item()
    if name == "IntWrapper" and not -2**31 <= value < 2**31:
        raise ValueError(f"ordering value {value} does not fit an IntWrapper")
    return ("org.apache.hudi.avro.model." + name, {"value": value})


def delete_content(keys, partitions, ordering_vals=None, wrapper=None):
    """DELETE content: int32 3, int32 payload length, Avro binary HoodieDeleteRecordList.

    Ordering values: None -> null; a value -> its natural wrapper (int -> LongWrapper, float -> DoubleWrapper,
    str -> StringWrapper, ...), or the wrapper named by `wrapper` (e.g. "int" / "IntWrapper") for all values,
    or per value a tuple (wrapper, value).
    """
    n = len(keys)
    if ordering_vals is None:
        ordering_vals = [None] * n
    if len(partitions) != n or len(ordering_vals) != n:
        raise ValueError(f"delete block: {n} keys, {len(partitions)} partitions, {len(ordering_vals)} ordering values")
    records = [{"recordKey": k, "partitionPath": p, "orderingVal": _ordering_union(v, wrapper)}
               for k, p, v in zip(keys, partitions, ordering_vals)]
    out = io.BytesIO()
    fastavro.schemaless_writer(out, delete_record_list_schema(), {"deleteRecordList": records})
    payload = out.getvalue()
    return struct.pack(">ii", CONTENT_VERSION, len(payload)) + payload


# Arrow types whose values the vectorized DELETE encoding writes in their natural wrapper (as delete_content would)
_ARROW_WRAPPERS = ((pa.types.is_boolean, "BooleanWrapper"), (pa.types.is_integer, "LongWrapper"),
                   (pa.types.is_floating, "DoubleWrapper"), (pa.types.is_string, "StringWrapper"),
                   (pa.types.is_large_string, "StringWrapper"))


def _union_branch(schema, field, name):
    """Index of the branch named `name` (or its record's full name) in the union type of a record field."""
    item = schema["fields"][0]["type"]["items"]
    branches = next(f["type"] for f in item["fields"] if f["name"] == field)
    for i, b in enumerate(branches):
        if isinstance(b, dict) and b.get("name", "").rsplit(".", 1)[-1] == name:
            return i, b
    raise ValueError(f"no {name} branch in the delete record's {field} union")


def delete_content_arrow(keys, partition, ordering=None):
    """DELETE content of Arrow record keys in one partition, with optional Arrow ordering values (null: no ordering
    value), encoded vectorized: byte for byte what `delete_content` writes for the same values. Ordering types
    other than boolean, integer, floating point and string go through `delete_content`."""
    from .avro_codec import encode_records

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
        ident = {"type": "record", "name": "DeleteKey", "fields": [
            {"name": "recordKey", "type": ["null", "string"]}, {"name": "partitionPath", "type": ["null", "string"]}]}
        table = pa.table({"recordKey": keys.cast(pa.string()), "partitionPath": pa.array([partition] * n, pa.string())})
        pieces = [_binary(*encode_records(table, ident), n)]
        if wrapper is None:
            pieces.append(pa.array([b"\x00"] * n, pa.large_binary()))
        else:
            branch, wrapper_schema = _union_branch(schema, "orderingVal", wrapper)
            value_schema = {"type": "record", "name": "Value",
                            "fields": [{"name": "value", "type": wrapper_schema["fields"][0]["type"]}]}
            if pa.types.is_integer(ordering.type):
                ordering = ordering.cast(pa.int64())
            elif pa.types.is_floating(ordering.type):
                ordering = ordering.cast(pa.float64())
            present = ordering.is_valid()
            values = pc.filter(ordering, present)
            encoded = _binary(*encode_records(pa.table({"value": values}), value_schema), len(values))
            lead = bytes(_zigzag_varint(branch))
            with_branch = pc.binary_join_element_wise(pa.scalar(lead, pa.large_binary()), encoded,
                                                      pa.scalar(b"", pa.large_binary()))
            # rows without a value get the null branch; the others their value, in row order
            slots = np.cumsum(present.to_numpy(zero_copy_only=False)) - 1
            taken = pc.take(with_branch, pa.array(np.maximum(slots, 0)))
            pieces.append(pc.if_else(present, taken, pa.scalar(b"\x00", pa.large_binary())))
        rows = pc.binary_join_element_wise(*pieces, pa.scalar(b"", pa.large_binary()))
        body = rows.buffers()[2].to_pybytes()[_offset_of(rows, 0):_offset_of(rows, n)]
        payload = bytes(_zigzag_varint(n)) + body + b"\x00"
    return struct.pack(">ii", CONTENT_VERSION, len(payload)) + payload


def _binary(buffer, offsets, n):
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(np.ascontiguousarray(offsets)),
                                                                     pa.py_buffer(buffer)])


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


# ---------------------------------------------------------------------------------------------- command blocks

def rollback_command_block(instant, target_instant):
    """A COMMAND block rolling back `target_instant`, written at rollback instant `instant`."""
    header = {
        HeaderKey.INSTANT_TIME: instant,
        HeaderKey.COMMAND_BLOCK_TYPE: ROLLBACK_COMMAND,
        HeaderKey.TARGET_INSTANT_TIME: target_instant,
    }
    return LogBlock(BlockType.COMMAND, header, b"", {})
