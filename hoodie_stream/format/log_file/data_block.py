"""Contents of log data blocks: AVRO_DATA (content version 3: record count, then each record's length and Avro
binary) and PARQUET_DATA (a whole parquet file)."""

import struct

import numpy as np
import pyarrow as pa

# pyarrow.parquet is imported by the functions that use it: the write chain's workers never need to load it
from ...errors import HoodieFormatError
from ..base_file.parquet import DEFAULT_COMPRESSION, parquet_compression
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
# it record by record, the content is taken a segment (_SEGMENT bytes) at a time from the walk's position there, and
# every position of the segment that could hold a prefix (a "node") gets its successor at once:
# 1. nodes: positions whose int32 would be a length that fits the content. First only those whose first two bytes
#    are zero (lengths under 64 KiB: few nodes besides the real prefixes), then, if the walk fails with those, every
#    position whose first byte allows a fitting length.
# 2. pruning, a round at a time until the nodes in order are a walk from the segment's first position out of the
#    segment: a node of the walk leads to another node (or out) and is led to by one (or is the first).
# 3. when rounds stop removing nodes first (records of zeros leave chains of nodes beside the walk), pointer
#    doubling over the nodes gives the walk in log2 array operations.
# A walk found this way follows the real lengths, so it is the walk; where none exists, the first record that breaks
# it gets the error a record-by-record reader raises. Segments keep the arrays the pruning marks in the CPU caches.
_SEGMENT = 1 << 20
_PRUNE_ROUNDS = 8


def _walk_length_prefixes(raw, n):
    size = len(raw)
    starts, ends = [], []
    found, at = 0, 8  # records walked; the position of the next one's prefix
    while found < n and at + 4 <= size:
        limit = size if size - at <= _SEGMENT else at + _SEGMENT
        for short_lengths in (True, False):
            nodes, succ, steps = _segment_walk(raw, at, limit, n - found, short_lengths)
            real = len(steps) - int(steps[-1] >= len(nodes))  # the steps on nodes; a last one leaves or breaks
            walked = steps[: min(real, n - found)]
            complete = len(walked) == n - found or steps[-1] == len(nodes)
            if complete:
                break
        if len(walked):
            starts.append(nodes[walked] + 4)
            ends.append(succ[walked])
            found += len(walked)
            at = int(succ[walked[-1]])
        if not complete:
            break
    if found == n and at == size:
        if not starts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(starts), np.concatenate(ends)
    _raise_walk_error(raw, n, found, at)


def _segment_walk(raw, at, limit, most, short_lengths):
    """(nodes, successors, steps) of the walk from `at` over the nodes in [at, limit): the node index of each step,
    at most `most` of them, then len(nodes) if the walk leaves the segment (or reaches the content end) or
    len(nodes) + 1 if it steps to a position that is no node."""
    nodes, succ = _prefix_nodes(raw, at, limit, short_lengths)
    if not len(nodes) or nodes[0] != at:
        return nodes, succ, np.array([len(nodes) + 1], dtype=np.int64)
    out = succ >= limit  # leaves the segment (reaches the end, for the last one)
    mark = np.zeros(limit - at + 1, dtype=bool)  # positions from `at`, the last one standing for "out"
    stalled = False
    for _ in range(_PRUNE_ROUNDS):
        last = int(np.argmax(out)) if out.any() else len(nodes) - 1  # nodes after it lie in its record
        if np.array_equal(succ[:last], nodes[1 : last + 1]) and out[last]:
            # the nodes in order are the walk, out of the segment after `last`
            return nodes, succ, np.append(np.arange(last + 1), len(nodes)) if last < most else np.arange(most)
        if stalled:
            break  # the rounds make no headway (records of zeros leave chains of nodes beside the walk)
        keep = _prune(nodes - at, np.minimum(succ, limit) - at, mark)
        removed = len(keep) - int(np.count_nonzero(keep))
        stalled = removed <= len(keep) // 100
        nodes, succ, out = np.compress(keep, nodes), np.compress(keep, succ), np.compress(keep, out)
    return nodes, succ, _walk_steps(nodes, succ, out, most)


def _prefix_nodes(raw, at, limit, short_lengths):
    """(positions, successors) of the positions in [at, limit) that could hold a length prefix leading inside the
    content: with short_lengths only those whose first two bytes are zero."""
    size = len(raw)
    last = min(limit, size - 3)  # a prefix fits before size - 3
    head = raw[at : last + 1]  # one byte more: the second byte of the last position
    if short_lengths:
        zero = head == 0
        pos = np.flatnonzero(zero[:-1] & zero[1:])
    else:
        top = max(size - 12, 0) >> 24  # the largest first byte of a length that fits
        pos = np.flatnonzero(head[:-1] <= top)
    pos += at
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
    """Which nodes lead to a node (or out: the last entry of `mark`) and are led to by one (or are the first); all
    positions relative to the segment's first."""
    mark[nodes] = True
    mark[-1] = True
    keep = mark[succ]
    mark[nodes] = False
    mark[-1] = False
    mark[succ] = True
    keep &= mark[nodes]
    keep[0] = True
    mark[succ] = False
    return keep


def _walk_steps(nodes, succ, out, most):
    """The steps of _segment_walk by pointer doubling."""
    m = len(nodes)
    leave, dead = m, m + 1
    at = np.searchsorted(nodes, succ)
    known = nodes[np.minimum(at, m - 1)] == succ
    jump = np.full(m + 2, dead, dtype=np.int64)
    jump[:m][known] = at[known]
    jump[:m][out] = leave
    steps = np.zeros(1, dtype=np.int64)
    while len(steps) <= most and steps[-1] < m:
        steps = np.concatenate([steps, jump[steps]])
        jump = jump[jump]
    beyond = np.flatnonzero(steps >= m)
    if len(beyond) and beyond[0] <= most:
        return steps[: beyond[0] + 1]
    return steps[:most]


def _raise_walk_error(raw, n, found, at):
    """Raise the error of record `found`, whose length prefix is at `at` (or of trailing bytes after n records): the
    vectorized walk stops at most a few records before a broken one (pruning removes those)."""
    size = len(raw)
    k, pos = found, at
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


def read_parquet_content(content, columns=None):
    import pyarrow.parquet as pq

    if content[:4] != b"PAR1" or content[-4:] != b"PAR1":
        raise HoodieFormatError("parquet data block content is not a parquet file")
    return pq.read_table(pa.BufferReader(content), columns=columns)
