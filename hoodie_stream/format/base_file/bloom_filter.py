"""Hudi's DYNAMIC_V0 bloom filter (HoodieDynamicBoundedBloomFilter) with Hadoop's 32-bit MurmurHash.

Serialized form (big endian, then base64): int32 -1, int32 nbHash, byte hashType (1 = murmur),
int32 vectorSize, int32 nr, int32 currentNbRecord, int32 rows, then per row the same filter header
and ceil(vectorSize / 8) bitset bytes (bit i lives in byte i >> 3 under mask 1 << (i & 7)).
"""

import base64
import math
import struct

import numpy as np
import pyarrow as pa

from ...errors import HoodieFormatError, HoodieKeyError
from ..util.string_buffers import utf8_buffers

TYPE_CODE = "DYNAMIC_V0"
DEFAULT_NUM_ENTRIES = 60000
DEFAULT_FPP = 0.000000001
DEFAULT_MAX_ENTRIES = 100000
MURMUR_HASH = 1

_M = np.uint32(0x5BD1E995)
_S13, _S15 = np.uint32(13), np.uint32(15)
_VERSION = -1


def bit_size(num_entries, fpp):
    return int(math.ceil(num_entries * (-math.log(fpp) / (math.log(2) ** 2))))


def num_hashes(vector_size, num_entries):
    return int(math.ceil(math.log(2) * vector_size / num_entries))


# keys hashed at a time: a chunk's hash lanes (4 bytes a key) and bit positions stay in the CPU's L2 cache
CHUNK = 65536


def _key_words(keys):
    """What the hash of each key consumes, keys ordered by their number of 4-byte blocks (descending) so that the
    keys still hashing block j are a prefix: (order, lengths, active[j] = keys with a block j, mixed[j] = block j
    of those keys, already mixed, tail bytes folded as Hadoop's murmur does, tail multiplier: M or 1)."""
    data, offsets = utf8_buffers(keys, "bloom filter keys")
    low = int(offsets[0])
    data = data[low : int(offsets[-1])]  # a slice of a larger array: only its own bytes
    starts = offsets[:-1] - low
    lengths = offsets[1:] - offsets[:-1]
    n = len(lengths)
    if n and lengths.min() == 0:
        raise HoodieKeyError("bloom filter keys must not be empty")
    blocks = lengths >> 2
    if n and blocks.min() != blocks.max():
        order = np.argsort(-blocks, kind="stable")
        starts, lengths, blocks = starts[order], lengths[order], blocks[order]
    else:
        order = None  # every key has as many blocks: no reordering
    max_blocks = int(blocks[0]) if n else 0
    active = [int(c) for c in np.searchsorted(-blocks, -np.arange(max_blocks), side="left")]
    mixed = []
    for j in range(max_blocks):
        pos = starts[: active[j]] + 4 * j
        k = data[pos].astype(np.uint32)
        for b in (1, 2, 3):
            k |= data[pos + b].astype(np.uint32) << np.uint32(8 * b)
        k *= _M
        k ^= k >> np.uint32(24)
        k *= _M
        mixed.append(k)
    left = lengths & 3
    ends = starts + lengths
    signed = data.view(np.int8)
    tail = np.zeros(n, dtype=np.uint32)
    for back, shift in ((3, 16), (2, 8), (1, 0)):
        has = np.nonzero(left >= back)[0]
        if len(has):  # Java sign-extends each tail byte before the shift
            tail[has] ^= signed[ends[has] - back].astype(np.int32).view(np.uint32) << np.uint32(shift)
    tail_mul = np.where(left > 0, _M, np.uint32(1)).astype(np.uint32) if left.any() else None
    return order, lengths.astype(np.uint32), active, mixed, tail, tail_mul


def _hashes(words, nb_hash):
    """Yields hash i of every key (a uint32 lane, in the order of `_key_words`, overwritten by the next hash: copy
    it to keep it), hash i seeded with hash i-1. In place on one lane per key: no temporary arrays."""
    _order, len32, active, mixed, tail, tail_mul = words
    h = np.zeros(len(len32), dtype=np.uint32)
    tmp = np.empty_like(h)
    for _ in range(nb_hash):
        np.bitwise_xor(h, len32, out=h)
        for c, k in zip(active, mixed):
            part = h[:c]
            np.multiply(part, _M, out=part)
            np.bitwise_xor(part, k, out=part)
        if tail_mul is not None:
            np.bitwise_xor(h, tail, out=h)
            np.multiply(h, tail_mul, out=h)
        np.right_shift(h, _S13, out=tmp)
        np.bitwise_xor(h, tmp, out=h)
        np.multiply(h, _M, out=h)
        np.right_shift(h, _S15, out=tmp)
        np.bitwise_xor(h, tmp, out=h)
        yield h


def _bit_index(h, vector_size, scratch, out):
    """Java's Math.abs(h % vectorSize) of int32 hashes `h` (a uint32 lane) into `out` (an intp lane: numpy scatters
    by intp indices twice as fast as by uint32 ones), through a uint32 `scratch` lane: |h| mod vectorSize on the
    unsigned magnitude (the int32 abs of -2^31 stays -2^31, whose uint32 view is 2^31: its magnitude)."""
    np.abs(h.view(np.int32), out=scratch.view(np.int32))
    return np.remainder(scratch, np.uint32(vector_size), out=out)


def murmur_chain(keys, nb_hash):
    """Hadoop MurmurHash chained nb_hash times from seed 0 over UTF-8 keys.

    Returns int32 array (n, nb_hash): hash i is hash(key, seed=hash i-1). Vectorized across keys:
    keys are ordered by number of 4-byte blocks so block j of all still-active keys is a prefix slice.
    """
    words = _key_words(keys)
    out = np.empty((len(words[1]), nb_hash), dtype=np.uint32)
    for i, h in enumerate(_hashes(words, nb_hash)):
        out[:, i] = h
    if words[0] is not None:
        out = out[np.argsort(words[0])]
    return out.view(np.int32)


def bit_positions(keys, nb_hash, vector_size):
    """Bit index of every (key, hash) pair: abs(h % vectorSize) with Java remainder semantics; (n, nb_hash)."""
    words = _key_words(keys)
    out = np.empty((len(words[1]), nb_hash), dtype=np.int64)
    scratch, lane = np.empty(len(words[1]), dtype=np.uint32), np.empty(len(words[1]), dtype=np.intp)
    for i, h in enumerate(_hashes(words, nb_hash)):
        out[:, i] = _bit_index(h, vector_size, scratch, lane)
    if words[0] is not None:
        out = out[np.argsort(words[0])]
    return out


class BloomFilter:
    """Hudi DYNAMIC_V0 bloom filter; keys are record-key strings."""

    def __init__(self, num_entries=DEFAULT_NUM_ENTRIES, fpp=DEFAULT_FPP, max_entries=DEFAULT_MAX_ENTRIES):
        self.vector_size = bit_size(num_entries, fpp)
        self.nb_hash = num_hashes(self.vector_size, num_entries)
        self.hash_type = MURMUR_HASH
        self.nr = num_entries
        self.max_entries = max_entries
        self.count = 0
        self.rows = [np.zeros(self.vector_size, dtype=bool)]

    @property
    def max_rows(self):
        return max(1, -(-self.max_entries // self.nr))

    @property
    def current_nb_record(self):
        return self.count - (len(self.rows) - 1) * self.nr

    def _row_of(self, index):
        """Row each key goes to, following InternalDynamicBloomFilter.getActiveStandardBF."""
        full = self.max_rows * self.nr
        rows = np.minimum(index // self.nr, self.max_rows - 1)
        over = index >= full
        rows[over] = np.maximum(index[over] - full - 1, 0) % self.max_rows
        rows[index == full] = 0
        return rows

    def add_keys(self, keys):
        """Add record keys (a string array or a list), CHUNK keys at a time."""
        if not isinstance(keys, (pa.Array, pa.ChunkedArray)):
            keys = pa.array(keys, type=pa.string())
        for start in range(0, len(keys), CHUNK):
            self._add_chunk(keys.slice(start, CHUNK))
        return self

    def _add_chunk(self, keys):
        """The chunk's keys by the row they go to (one row, or, past the filter's capacity, alternate rows), each
        hash setting its bits as soon as it is computed: the lanes stay in the CPU caches."""
        n = len(keys)
        if n == 0:
            return
        rows = self._row_of(np.arange(self.count, self.count + n, dtype=np.int64))
        needed = int(rows.max()) + 1
        while len(self.rows) < needed:
            self.rows.append(np.zeros(self.vector_size, dtype=bool))
        if rows.min() == rows.max():  # the common case: the whole chunk goes to one row
            groups = [(int(rows[0]), keys)]
        else:
            groups = [(int(r), keys.take(np.nonzero(rows == r)[0])) for r in np.unique(rows)]
        for r, group in groups:
            bits = self.rows[r]
            words = _key_words(group)
            scratch, lane = np.empty(len(group), dtype=np.uint32), np.empty(len(group), dtype=np.intp)
            for h in _hashes(words, self.nb_hash):
                bits[_bit_index(h, self.vector_size, scratch, lane)] = True
        self.count += n

    def add(self, key):
        return self.add_keys([key])

    def might_contain(self, key):
        pos = bit_positions([key], self.nb_hash, self.vector_size)[0]
        return any(bool(row[pos].all()) for row in self.rows)

    def _filter_header(self):
        return struct.pack(">iibi", _VERSION, self.nb_hash, self.hash_type, self.vector_size)

    def to_bytes(self):
        parts = [self._filter_header(), struct.pack(">iii", self.nr, self.current_nb_record, len(self.rows))]
        for row in self.rows:
            parts.append(self._filter_header())
            parts.append(np.packbits(row, bitorder="little").tobytes())
        return b"".join(parts)

    def serialize(self):
        return base64.b64encode(self.to_bytes()).decode("ascii")

    @classmethod
    def from_bytes(cls, data):
        try:
            version, nb_hash, hash_type, vector_size, nr, current, nrows = struct.unpack_from(">iibiiii", data, 0)
            pos = struct.calcsize(">iibiiii")
            nbytes = (vector_size + 7) // 8
            rows = []
            for _ in range(nrows):
                header = struct.unpack_from(">iibi", data, pos)
                if header != (version, nb_hash, hash_type, vector_size):
                    raise HoodieFormatError(f"bloom filter row header {header} differs from filter header")
                pos += 13
                chunk = np.frombuffer(data, dtype=np.uint8, count=nbytes, offset=pos)
                rows.append(np.unpackbits(chunk, bitorder="little")[:vector_size].astype(bool))
                pos += nbytes
        except struct.error as e:
            raise HoodieFormatError(f"truncated bloom filter: {e}") from e
        if hash_type != MURMUR_HASH:
            raise HoodieFormatError(f"bloom filter hash type {hash_type} is not murmur (1)")
        bf = cls.__new__(cls)
        bf.vector_size, bf.nb_hash, bf.hash_type, bf.nr = vector_size, nb_hash, hash_type, nr
        bf.max_entries = DEFAULT_MAX_ENTRIES
        bf.rows = rows
        bf.count = current + (len(rows) - 1) * nr
        return bf

    @classmethod
    def deserialize(cls, text):
        return cls.from_bytes(base64.b64decode(text))
