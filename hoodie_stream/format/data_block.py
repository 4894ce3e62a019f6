"""Contents of log data blocks: AVRO_DATA (content version 3: record count, then each record's length and Avro
binary) and PARQUET_DATA (a whole parquet file)."""

import struct

import numpy as np
import pyarrow as pa

# pyarrow.parquet is imported by the functions that use it: the write chain's workers never need to load it
from ..errors import HoodieFormatError
from .base_file import DEFAULT_COMPRESSION, parquet_compression
from .log_block import CONTENT_VERSION


def avro_data_content(records_buffer, offsets):
    """AVRO_DATA content: int32 3, int32 count, then per record int32 length + Avro binary record.

    `records_buffer` holds the encoded records back to back; record i is buffer[offsets[i]:offsets[i+1]].
    """
    n = len(offsets) - 1
    if n < 0:
        raise HoodieFormatError("offsets must hold at least one entry")
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
    src = np.frombuffer(records_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]]
    lengths = np.diff(offsets)
    if lengths.min() < 0 or lengths.max() > 0x7FFFFFFF:
        raise HoodieFormatError("record offsets must be non-decreasing and each record < 2 GiB")
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


def parquet_data_content(table, compression=DEFAULT_COMPRESSION):
    """PARQUET_DATA content: the bytes of a complete parquet file holding `table`, compressed with the Hudi parquet
    codec `compression` (hoodie.parquet.compression.codec, as Hudi's append handle writes these blocks)."""
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **parquet_compression(compression))
    return sink.getvalue().to_pybytes()


def read_parquet_content(content):
    import pyarrow.parquet as pq

    if content[:4] != b"PAR1" or content[-4:] != b"PAR1":
        raise HoodieFormatError("parquet data block content is not a parquet file")
    return pq.read_table(pa.BufferReader(content))
