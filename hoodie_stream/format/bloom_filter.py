"""Hudi's DYNAMIC_V0 bloom filter (HoodieDynamicBoundedBloomFilter) with Hadoop's 32-bit MurmurHash.

Serialized form (big endian, then base64): int32 -1, int32 nbHash, byte hashType (1 = murmur),
int32 vectorSize, int32 nr, int32 currentNbRecord, int32 rows, then per row the same filter header
and ceil(vectorSize / 8) bitset bytes (bit i lives in byte i >> 3 under mask 1 << (i & 7)).
"""

import base64
import math
import struct

import numpy as np

from ..errors import HoodieFormatError, HoodieKeyError
from .string_buffers import utf8_buffers

TYPE_CODE = "DYNAMIC_V0"
DEFAULT_NUM_ENTRIES = 60000
DEFAULT_FPP = 0.000000001
DEFAULT_MAX_ENTRIES = 100000
MURMUR_HASH = 1

_M = np.uint32(0x5BD1E995)
_VERSION = -1


def bit_size(num_entries, fpp):
    return int(math.ceil(num_entries * (-math.log(fpp) / (math.log(2) ** 2))))


def num_hashes(vector_size, num_entries):
    return int(math.ceil(math.log(2) * vector_size / num_entries))


def murmur_chain(keys, nb_hash):
    """Hadoop MurmurHash chained nb_hash times from seed 0 over UTF-8 keys.

    Returns int32 array (n, nb_hash): hash i is hash(key, seed=hash i-1). Vectorized across keys:
    keys are ordered by number of 4-byte blocks so block j of all still-active keys is a prefix slice.
    """
    data, offsets = utf8_buffers(keys, "bloom filter keys")
    n = len(offsets) - 1
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    if n and lengths.min() == 0:
        raise HoodieKeyError("bloom filter keys must not be empty")
    blocks = lengths >> 2
    order = np.argsort(-blocks, kind="stable")
    s_starts, s_lengths, s_blocks = starts[order], lengths[order], blocks[order]
    max_blocks = int(s_blocks[0]) if n else 0
    active = [int(c) for c in np.searchsorted(-s_blocks, -np.arange(max_blocks), side="left")]
    d32 = data.astype(np.uint32)
    mixed = []
    for j in range(max_blocks):
        pos = s_starts[: active[j]] + 4 * j
        k = d32[pos] | (d32[pos + 1] << 8) | (d32[pos + 2] << 16) | (d32[pos + 3] << 24)
        k *= _M
        k ^= k >> np.uint32(24)
        k *= _M
        mixed.append(k)
    left = s_lengths & 3
    tail_idx = np.nonzero(left)[0]
    tail = np.zeros(len(tail_idx), dtype=np.int64)
    t_end = s_starts[tail_idx] + s_lengths[tail_idx]
    t_left = left[tail_idx]
    sdata = data.view(np.int8).astype(np.int64)
    for back, shift in ((3, 16), (2, 8), (1, 0)):
        has = t_left >= back
        tail[has] ^= sdata[t_end[has] - back] << shift
    tail = (tail & 0xFFFFFFFF).astype(np.uint32)
    len32 = (s_lengths & 0xFFFFFFFF).astype(np.uint32)

    out = np.empty((n, nb_hash), dtype=np.uint32)
    seed = np.zeros(n, dtype=np.uint32)
    for i in range(nb_hash):
        h = seed ^ len32
        for j in range(max_blocks):
            c = active[j]
            h[:c] *= _M
            h[:c] ^= mixed[j]
        if len(tail_idx):
            h[tail_idx] ^= tail
            h[tail_idx] *= _M
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
        out[order, i] = h
        seed = h
    return out.view(np.int32)


def bit_positions(keys, nb_hash, vector_size):
    """Bit index of every (key, hash) pair: abs(h % vectorSize) with Java remainder semantics."""
    h = murmur_chain(keys, nb_hash).astype(np.int64)
    return np.abs(h) % vector_size


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
        positions = bit_positions(keys, self.nb_hash, self.vector_size)
        n = positions.shape[0]
        if n == 0:
            return self
        index = np.arange(self.count, self.count + n, dtype=np.int64)
        rows = self._row_of(index)
        needed = int(rows.max()) + 1
        while len(self.rows) < needed:
            self.rows.append(np.zeros(self.vector_size, dtype=bool))
        for r in np.unique(rows):
            self.rows[r][positions[rows == r].ravel()] = True
        self.count += n
        return self

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
