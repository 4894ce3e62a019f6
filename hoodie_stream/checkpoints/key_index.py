"""In-memory lookup structure for one key group's index state: record key -> (partition path, file id).

Rows are kept sorted by a 64-bit hash of the key, so looking up a micro-batch costs O(batch x log state) with
`numpy.searchsorted` instead of hashing the whole state on every batch. Updates go to a small `recent` part that
is merged into the large `base` part only when it has grown to a fraction of it, so the amortized cost of an
update is proportional to the update, not to the state. Hash matches are confirmed by comparing the keys
themselves; a (vanishingly rare) 64-bit collision falls back to an exact Arrow lookup, so results are always exact.
In memory, partition paths and file ids are dictionary-encoded: a key group has few of them, so a row costs its
key, two 4-byte codes and its hash, not two more strings (a 36-character file id per key).
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..format.string_buffers import utf8_buffers

STATE_SCHEMA = pa.schema([("key", pa.string()), ("partition", pa.string()), ("file_id", pa.string())])
_CODED = pa.dictionary(pa.int32(), pa.string())
CODED_SCHEMA = pa.schema([("key", pa.string()), ("partition", _CODED), ("file_id", _CODED)])
_POSITIONS = 512
_TABLE = np.random.default_rng(0x5EED_1DE7).integers(0, 2**64, size=(_POSITIONS, 256), dtype=np.uint64).ravel()
_MERGE_FRACTION = 4  # recent is merged into base when it holds more than base/4 rows
_MERGE_MIN = 4096


def _mix(h):
    """splitmix64 finalizer (uint64 arithmetic wraps)."""
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def key_hashes(keys):
    """64-bit hashes of a string array (tabulation hash over (position, byte), mixed with the length).

    Vectorized over the Arrow buffers: O(total key bytes), no Python loop per key.
    """
    data, offsets = utf8_buffers(keys, "record keys")
    if len(offsets) == 1:
        return np.empty(0, dtype=np.uint64)
    first, last = int(offsets[0]), int(offsets[-1])
    data = data[first:last]
    lengths = np.diff(offsets)
    starts = offsets[:-1] - first
    pos = np.arange(last - first, dtype=np.int64) - np.repeat(starts, lengths)
    vals = _TABLE[(pos % _POSITIONS) * 256 + data]
    sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(vals, dtype=np.uint64)])
    h = sums[offsets[1:] - first] - sums[starts]
    return _mix(h ^ (lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)))


def coded(table):
    """State rows (STATE_SCHEMA columns, plain or dictionary strings) with partition and file id dictionary-encoded:
    the layout of the state in memory and in its files."""
    columns = [table["key"].cast(pa.string())]
    for name in ("partition", "file_id"):
        column = table[name]
        columns.append(column.cast(_CODED) if column.type != _CODED else column)
    return pa.Table.from_arrays(columns, schema=CODED_SCHEMA)


class _Sorted:
    """A state table sorted by key hash, with its hashes."""

    __slots__ = ("hashes", "table")

    def __init__(self, table, hashes=None):
        if hashes is None:
            hashes = key_hashes(table["key"])
        order = np.argsort(hashes, kind="stable")
        self.hashes = hashes[order]
        self.table = table.take(pa.array(order)).combine_chunks() if table.num_rows else table

    def find(self, keys, hashes):
        """Row of each key in this table, -1 where absent."""
        n = len(hashes)
        out = np.full(n, -1, dtype=np.int64)
        if n == 0 or len(self.hashes) == 0:
            return out
        idx = np.searchsorted(self.hashes, hashes)
        inside = idx < len(self.hashes)
        cand = np.nonzero(inside)[0]
        cand = cand[self.hashes[idx[cand]] == hashes[cand]]
        if len(cand) == 0:
            return out
        at = idx[cand]
        same = pc.equal(pc.take(self.table["key"], pa.array(at)), pc.take(keys, pa.array(cand)))
        same = same.to_numpy(zero_copy_only=False)
        out[cand[same]] = at[same]
        clash = cand[~same]
        if len(clash):  # equal hashes, different keys: look those keys up exactly
            exact = pc.index_in(pc.take(keys, pa.array(clash)), value_set=self.table["key"])
            exact = exact.to_numpy(zero_copy_only=False)
            got = ~np.isnan(exact) if exact.dtype.kind == "f" else np.ones(len(exact), bool)
            out[clash[got]] = exact[got].astype(np.int64)
        return out

    @property
    def num_rows(self):
        return self.table.num_rows


_EMPTY = _Sorted(CODED_SCHEMA.empty_table())


def _merge(old, change, change_hashes):
    """`old` with the rows of `change` (coded, keys unique) set: a new _Sorted."""
    gone = old.find(change["key"], change_hashes)
    gone = gone[gone >= 0]
    if len(gone):
        keep = np.ones(old.num_rows, bool)
        keep[gone] = False
        kept_table = old.table.filter(pa.array(keep))
        kept_hashes = old.hashes[keep]
    else:
        kept_table, kept_hashes = old.table, old.hashes
    table = pa.concat_tables([kept_table, change])
    return _Sorted(table, np.concatenate([kept_hashes, change_hashes]))


class KeyIndex:
    """The index state of one key group, for lookups and updates by key."""

    def __init__(self, table=None):
        self.base = _Sorted(coded(STATE_SCHEMA.empty_table() if table is None else table))
        self.recent = _EMPTY

    def lookup(self, keys):
        """(found mask, partition, file id) for each key (Arrow string array); partition/file id null if absent."""
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        hashes = key_hashes(keys)
        in_recent = self.recent.find(keys, hashes)
        in_base = self.base.find(keys, hashes)
        found = (in_recent >= 0) | (in_base >= 0)
        partition = self._pick("partition", in_recent, in_base)
        file_id = self._pick("file_id", in_recent, in_base)
        return found, partition, file_id

    def _pick(self, column, in_recent, in_base):
        picked = []
        for part, rows in ((self.recent, in_recent), (self.base, in_base)):
            if part.num_rows:
                taken = pc.take(part.table[column], pa.array(np.where(rows >= 0, rows, 0), mask=rows < 0))
                picked.append(taken.cast(pa.string()))
            else:
                picked.append(pa.nulls(len(rows), pa.string()))
        return pc.coalesce(*picked)

    def updated(self, change):
        """A new KeyIndex with key -> (partition, file id) set for the rows of `change` (keys unique).

        `self` is left as it was (the two share their unchanged parts), so a cached index never holds changes of
        an instant that did not commit.
        """
        if change.num_rows == 0:
            return self
        change = coded(change).combine_chunks()
        out = KeyIndex.__new__(KeyIndex)
        out.base = self.base
        out.recent = _merge(self.recent, change, key_hashes(change["key"]))
        if out.recent.num_rows > max(_MERGE_MIN, out.base.num_rows // _MERGE_FRACTION):
            out.base = _merge(out.base, out.recent.table, out.recent.hashes)
            out.recent = _EMPTY
        return out

    def to_table(self):
        """The whole state as one table (each key once; CODED_SCHEMA)."""
        if self.recent.num_rows == 0:
            return self.base.table
        return _merge(self.base, self.recent.table, self.recent.hashes).table
