"""The raw UTF-8 bytes and offsets of an Arrow string array, for vectorized hashing over all keys at once."""

import numpy as np
import pyarrow as pa

from ...errors import HoodieKeyError


def utf8_buffers(keys, what="keys"):
    """(uint8 data buffer, int64 offsets) of a string array (chunked, sliced, large or not, or a Python list):
    string i is data[offsets[i]:offsets[i + 1]]. Nulls are refused (ValueError naming `what`)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not isinstance(keys, pa.Array):
        keys = pa.array(keys, type=pa.string())
    if pa.types.is_large_string(keys.type) or pa.types.is_large_binary(keys.type):
        keys = keys.cast(pa.large_binary())
        offset_type = np.int64
    else:
        keys = keys.cast(pa.binary())
        offset_type = np.int32
    if keys.null_count:
        raise HoodieKeyError(f"{what} must not be null")
    _, offsets_buf, data_buf = keys.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=offset_type)[keys.offset : keys.offset + len(keys) + 1].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, offsets


def constant_strings(value, n):
    """An Arrow string array of n copies of value, built from buffers (no Python objects per row)."""
    data = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data * n))
