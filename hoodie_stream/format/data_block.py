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
    starts, ends = avro_record_bounds(content)
    raw = np.frombuffer(content, dtype=np.uint8)
    is_data = np.ones(len(raw), dtype=bool)
    is_data[:8] = False
    is_data[(starts[:, None] - 4 + np.arange(4)).ravel()] = False
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=offsets[1:])
    return raw[is_data].tobytes(), offsets


def avro_record_bounds(content):
    """(starts, ends): int64 positions of the records of AVRO_DATA content, record i being
    content[starts[i]:ends[i]] (after its length prefix). Every length is checked, as a reader walking the
    prefixes one by one checks them, and the same errors are raised."""
    if len(content) < 8:
        raise HoodieFormatError(f"avro data block content of {len(content)} bytes is too short")
    version, n = struct.unpack_from(">ii", content, 0)
    if version != CONTENT_VERSION:
        raise HoodieFormatError(f"avro data block content version {version} is not supported (only 3)")
    if n < 0:
        raise HoodieFormatError(f"avro data block has a negative record count {n}")
    return _walk_length_prefixes(np.frombuffer(content, dtype=np.uint8), n)


# The walk over the records' int32 length prefixes, vectorized. Record i's prefix sits where record i - 1 ends, so
# the walk is a chain of positions: from 8, each prefix position p leads to p + 4 + length(p). Instead of following
# it record by record, every position that could hold a prefix (a "node") gets its successor at once:
# 1. nodes: positions whose int32 would be a length that fits the content. First only those whose first two bytes
#    are zero (lengths under 64 KiB: few nodes besides the real prefixes), then, if the walk fails with those, every
#    position whose first byte allows a fitting length.
# 2. pruning, a round at a time until the nodes in order are a walk of n records from 8 to the content end: a node
#    of the walk leads to another node (or to the end) and is led to by one (or is the first prefix, at 8).
# 3. when rounds stop removing nodes first (records of zeros leave chains of nodes beside the walk), pointer
#    doubling over the nodes gives the walk's first n + 1 steps in log2(n) array operations.
# A walk found this way follows the real lengths from position 8, so it is the walk; when none exists, the first
# record that breaks it gets the error a record-by-record reader raises.
_PRUNE_ROUNDS = 8
_SCAN_BYTES = 1 << 20  # the content is scanned for nodes this many bytes at a time (small temporary arrays)


def _walk_length_prefixes(raw, n):
    size = len(raw)
    if n == 0:
        if size != 8:
            raise HoodieFormatError(f"avro data block: {size - 8} trailing bytes after 0 records")
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    mark = np.zeros(size + 1, dtype=bool)  # scratch of _prune, all false between uses
    for short_lengths in (True, False):
        nodes, succ = _prefix_nodes(raw, short_lengths)
        for _ in range(_PRUNE_ROUNDS):
            if len(nodes) == n and nodes[0] == 8 and succ[-1] == size and np.array_equal(succ[:-1], nodes[1:]):
                return nodes + 4, succ
            keep = _prune(nodes, succ, mark)
            removed = len(keep) - int(np.count_nonzero(keep))
            if not removed or (removed < len(nodes) // 100 and len(nodes) - n > n // 100):
                break  # the rounds make no headway on this many extra nodes
            nodes, succ = np.compress(keep, nodes), np.compress(keep, succ)
        steps = _walk_steps(nodes, succ, n, size)
        if len(steps) == n + 1 and steps[n] == len(nodes) and (steps[:n] < len(nodes)).all():
            return nodes[steps[:n]] + 4, succ[steps[:n]]
    _raise_walk_error(raw, n, nodes, succ, steps)


def _prefix_nodes(raw, short_lengths):
    """(positions, successors) of the positions from 8 that could hold a length prefix leading inside the content:
    with short_lengths only those whose first two bytes are zero."""
    size = len(raw)
    last = size - 4  # the last position a prefix fits at
    top = max(size - 12, 0) >> 24  # the largest first byte of a length that fits
    found = []
    for start in range(8, last + 1, _SCAN_BYTES):
        head = raw[start : min(start + _SCAN_BYTES, last + 1) + 1]  # one byte more: the second byte of the last
        if short_lengths:
            zero = head == 0
            maybe = zero[:-1] & zero[1:]
        else:
            maybe = head[:-1] <= top
        found.append(np.flatnonzero(maybe) + start)
    pos = np.concatenate(found) if found else np.zeros(0, np.int64)
    if short_lengths:
        length = raw[pos + 2].astype(np.int64) << 8
    else:
        length = raw[pos].astype(np.int64) << 24
        length |= raw[pos + 1].astype(np.int64) << 16
        length |= raw[pos + 2].astype(np.int64) << 8
    length |= raw[pos + 3]
    succ = pos + 4 + length
    fits = succ <= size
    return np.compress(fits, pos), np.compress(fits, succ)


def _prune(nodes, succ, mark):
    """Which nodes lead to a node (or to the end, the last entry of `mark`) and are led to by one (or are at 8)."""
    if not len(nodes):
        return np.ones(0, dtype=bool)
    mark[nodes] = True
    mark[-1] = True
    keep = mark[succ]
    mark[nodes] = False
    mark[-1] = False
    mark[succ] = True
    keep &= mark[nodes]
    keep[0] |= nodes[0] == 8
    mark[succ] = False
    return keep


def _walk_steps(nodes, succ, n, size):
    """The node index of each of the walk's first n + 1 steps from position 8, by pointer doubling: len(nodes) once
    the walk has reached the content end, len(nodes) + 1 after a position that is no node. The steps stop early (but
    past the last node) when the walk ends before n + 1 steps, whatever the count n claims."""
    m = len(nodes)
    end, dead = m, m + 1
    at = np.searchsorted(nodes, succ)
    known = nodes[np.minimum(at, m - 1)] == succ if m else np.zeros(0, dtype=bool)
    jump = np.full(m + 2, dead, dtype=np.int64)
    jump[:m][known] = at[known]
    jump[:m][succ == size] = end
    steps = np.array([0 if m and nodes[0] == 8 else dead], dtype=np.int64)
    while len(steps) < n + 1 and steps[-1] < m:
        steps = np.concatenate([steps, jump[steps]])
        jump = jump[jump]
    return steps[: n + 1]


def _raise_walk_error(raw, n, nodes, succ, steps):
    """Raise the error of the first record whose length prefix does not fit (or of trailing bytes). The walk's nodes
    end at most a few records before it (pruning removed those whose successor breaks): the rest is stepped."""
    size = len(raw)
    broken = steps[:n] >= len(nodes)
    k = int(np.argmax(broken)) if broken.any() else n
    pos = 8 if k == 0 else int(succ[steps[k - 1]])
    while k < n:
        if pos + 4 > size:
            raise HoodieFormatError(f"avro data block: record length prefix at {pos} runs past the content end")
        (length,) = struct.unpack_from(">i", raw, pos)
        pos += 4 + length
        if length < 0 or pos > size:
            raise HoodieFormatError(f"avro data block record {k}: length {length} runs past the content end")
        k += 1
    raise HoodieFormatError(f"avro data block: {size - pos} trailing bytes after {n} records")


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
