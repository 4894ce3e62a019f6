"""In-memory lookup structure for one key group's index state: record key -> (partition path, file id), plus the
ordering value of the key's latest version in tables ordered by event time (optional column `ordering`, any Arrow
type; a key whose delete arrived before any of its records is kept with its ordering value and no location).

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

from ..format.util.string_buffers import utf8_buffers

STATE_SCHEMA = pa.schema([("key", pa.string()), ("partition", pa.string()), ("file_id", pa.string())])
_CODED = pa.dictionary(pa.int32(), pa.string())
CODED_SCHEMA = pa.schema([("key", pa.string()), ("partition", _CODED), ("file_id", _CODED)])
HASH = "hash"  # optional column of state files: key_hashes of the keys
ORDERING = "ordering"  # optional column: the ordering value of each key's latest version (event-time tables)
HASH_META = b"hoodie_stream.key_hash"
HASH_ID = b"tabulation64/512/5eed1de7"  # names the hash function below: stored hashes count only if it matches
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

    Vectorized over the Arrow buffers: O(total key bytes), no Python loop per key; positions and table indices are
    int32 (half the memory traffic of int64) and each key's bytes are summed in one `reduceat` pass.
    """
    data, offsets = utf8_buffers(keys, "record keys")
    n = len(offsets) - 1
    if n <= 0:
        return np.empty(0, dtype=np.uint64)
    first, last = int(offsets[0]), int(offsets[-1])
    lengths = np.diff(offsets)
    sums = np.zeros(n, np.uint64)
    if last > first:
        starts = offsets[:-1] - first
        itype = np.int32 if last - first < 2**31 else np.int64
        pos = np.arange(last - first, dtype=itype)
        pos -= np.repeat(starts.astype(itype), lengths)
        if int(lengths.max()) > _POSITIONS:
            pos %= _POSITIONS
        pos *= 256
        pos += data[first:last]
        nonempty = lengths > 0
        sums[nonempty] = np.add.reduceat(_TABLE[pos], starts[nonempty])  # uint64 sums wrap, as intended
    return _mix(sums ^ (lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)))


def coded(table):
    """State rows (STATE_SCHEMA columns, plain or dictionary strings, and the optional ORDERING column) with
    partition and file id dictionary-encoded: the layout of the state in memory and in its files."""
    columns = [table["key"].cast(pa.string())]
    for name in ("partition", "file_id"):
        column = table[name]
        columns.append(column.cast(_CODED) if column.type != _CODED else column)
    if ORDERING not in table.column_names:
        return pa.Table.from_arrays(columns, schema=CODED_SCHEMA)
    schema = CODED_SCHEMA.append(pa.field(ORDERING, table.schema.field(ORDERING).type))
    return pa.Table.from_arrays(columns + [table[ORDERING]], schema=schema)


class _Sorted:
    """State rows sorted by key hash: hashes, keys (Arrow strings), the codes of their partition and file id (-1 for
    a key known by its ordering value alone) and their ordering values (an Arrow array, or None)."""

    __slots__ = ("files", "hashes", "keys", "ordering", "partitions")

    def __init__(self, keys, partitions, files, hashes=None, ordering=None):
        if hashes is None:
            hashes = key_hashes(keys)
        if len(hashes) > 1 and not bool(np.all(hashes[1:] >= hashes[:-1])):  # state files are stored sorted
            order = np.argsort(hashes, kind="stable")
            hashes, partitions, files = hashes[order], partitions[order], files[order]
            keys = keys.take(pa.array(order))
            if ordering is not None:
                ordering = ordering.take(pa.array(order))
        self.hashes = hashes
        self.keys = keys
        self.partitions = partitions
        self.files = files
        self.ordering = ordering

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
        same = pc.equal(pc.take(self.keys, pa.array(at)), pc.take(keys, pa.array(cand)))
        same = same.to_numpy(zero_copy_only=False)
        out[cand[same]] = at[same]
        clash = cand[~same]
        if len(clash):  # equal hashes, different keys: look those keys up exactly
            exact = pc.index_in(pc.take(keys, pa.array(clash)), value_set=self.keys)
            exact = exact.to_numpy(zero_copy_only=False)
            got = ~np.isnan(exact) if exact.dtype.kind == "f" else np.ones(len(exact), bool)
            out[clash[got]] = exact[got].astype(np.int64)
        return out

    @property
    def num_rows(self):
        return len(self.hashes)


_NO_CODES = np.empty(0, np.int32)
_EMPTY = _Sorted(pa.array([], pa.string()), _NO_CODES, _NO_CODES, np.empty(0, np.uint64))


def ordering_as(values, type_, n):
    """`n` stored ordering values (or None) as `type_`: null where unknown, or where they cannot be cast (values of
    a narrower type are cast: the ordering field's type widened)."""
    if values is None:
        return pa.nulls(n, type_)
    if values.type.equals(type_):
        return values
    try:
        return values.cast(type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.nulls(n, type_)


def _ordering_concat(old, old_n, new, new_n):
    """The ordering values of old rows then new rows (None when neither has any), as the newer ones' type."""
    if old is None and new is None:
        return None
    type_ = (new if new is not None else old).type
    return pa.concat_arrays([ordering_as(old, type_, old_n), ordering_as(new, type_, new_n)])


def _merge(old, keys, partitions, files, hashes, ordering=None):
    """`old` with the given rows (keys unique) set: a new _Sorted."""
    gone = old.find(keys, hashes)
    gone = gone[gone >= 0]
    old_ordering = old.ordering
    if len(gone):
        keep = np.ones(old.num_rows, bool)
        keep[gone] = False
        kept = (old.keys.filter(pa.array(keep)), old.partitions[keep], old.files[keep], old.hashes[keep])
        if old_ordering is not None:
            old_ordering = old_ordering.filter(pa.array(keep))
    else:
        kept = (old.keys, old.partitions, old.files, old.hashes)
    return _Sorted(
        pa.concat_arrays([kept[0], keys]),
        np.concatenate([kept[1], partitions]),
        np.concatenate([kept[2], files]),
        np.concatenate([kept[3], hashes]),
        _ordering_concat(old_ordering, len(kept[3]), ordering, len(hashes)),
    )


class _Dictionary:
    """Append-only strings <-> int32 codes, shared by the versions of one key group's index (a code never changes
    meaning, so an older version stays valid when a newer one adds values)."""

    __slots__ = ("codes", "values")

    def __init__(self):
        self.values = []
        self.codes = {}

    def encode(self, dictionary_array):
        """Codes of a DictionaryArray's values in this dictionary (int32 numpy; -1 for a null). An empty dictionary
        adopts the array's dictionary when its values are distinct, and its indices are the codes as they are (no
        copy: the indices of a memory-mapped state file stay in the file)."""
        if not self.values and dictionary_array.indices.type == pa.int32() and not dictionary_array.null_count:
            values = dictionary_array.dictionary.to_pylist()
            if len(set(values)) == len(values):
                self.values = values
                self.codes = {v: i for i, v in enumerate(values)}
                indices = dictionary_array.indices.to_numpy(zero_copy_only=False)
                return indices if len(indices) else _NO_CODES
        translate = np.empty(len(dictionary_array.dictionary), np.int32)
        for i, value in enumerate(dictionary_array.dictionary.to_pylist()):
            code = self.codes.get(value)
            if code is None:
                code = self.codes[value] = len(self.values)
                self.values.append(value)
            translate[i] = code
        if dictionary_array.null_count:
            valid = pc.is_valid(dictionary_array).to_numpy(zero_copy_only=False)
            indices = pc.fill_null(dictionary_array.indices, 0).to_numpy(zero_copy_only=False)
            return np.where(valid, translate[indices] if len(translate) else -1, -1).astype(np.int32)
        indices = dictionary_array.indices.to_numpy(zero_copy_only=False)
        return translate[indices] if len(indices) else _NO_CODES

    def array(self):
        return pa.array(self.values, pa.string())


def _columns(table):
    """(keys, partition codes as DictionaryArray, file id codes, ordering values or None) of a state table, each
    one Arrow array."""
    table = coded(table).combine_chunks()
    names = ("key", "partition", "file_id") + ((ORDERING,) if ORDERING in table.column_names else ())
    columns = [
        table[name].chunk(0) if table[name].num_chunks else pa.array([], table.schema.field(name).type)
        for name in names
    ]
    return columns if len(columns) == 4 else columns + [None]


class KeyIndex:
    """The index state of one key group, for lookups and updates by key."""

    def __init__(self, table=None):
        self.partition_names = _Dictionary()
        self.file_ids = _Dictionary()
        self.recent = _EMPTY
        if table is None or table.num_rows == 0:
            self.base = _EMPTY
            return
        keys, partitions, files, ordering = _columns(table)
        hashes = None
        if HASH in table.column_names and (table.schema.metadata or {}).get(HASH_META) == HASH_ID:
            hashes = table[HASH].combine_chunks().to_numpy(zero_copy_only=False)  # stored by to_table(hashes=True)
        self.base = _Sorted(
            keys, self.partition_names.encode(partitions), self.file_ids.encode(files), hashes, ordering
        )

    def lookup_codes(self, keys, hashes=None):
        """(found mask, partition code, file id code) of each key (Arrow string array), codes -1 where absent; the
        codes index `partition_names.values` and `file_ids.values`. `hashes`: the keys' `key_hashes`, if known."""
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        if hashes is None:
            hashes = key_hashes(keys)
        found, partitions, files, _ordering = self._find(keys, hashes, False)
        return found, partitions, files

    def lookup_ordering(self, keys, hashes=None):
        """(found mask, partition code, file id code, stored ordering value or null) of each key; found is false
        for a key known by its ordering value alone (its delete came first)."""
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        return self._find(keys, key_hashes(keys) if hashes is None else hashes, True)

    def _find(self, keys, hashes, with_ordering):
        partitions = np.full(len(keys), -1, np.int32)
        files = np.full(len(keys), -1, np.int32)
        ordering = None
        for part in (self.base, self.recent):  # recent last: it overrides
            if part.num_rows:
                rows = part.find(keys, hashes)
                hit = rows >= 0
                partitions[hit] = part.partitions[rows[hit]]
                files[hit] = part.files[rows[hit]]
                if with_ordering and part.ordering is not None and hit.any():
                    values = pc.take(part.ordering, pa.array(rows, mask=~hit))
                    if ordering is None:
                        ordering = values
                    else:  # base's values (of a narrower type if the field widened since), then recent's
                        ordering = pc.if_else(
                            pa.array(hit), values, _ordering_concat(ordering, len(ordering), values.slice(0, 0), 0)
                        )
        return files >= 0, partitions, files, ordering

    def lookup(self, keys):
        """(found mask, partition, file id) for each key (Arrow string array); partition/file id null if absent."""
        found, partitions, files = self.lookup_codes(keys)
        return (found, _decode(self.partition_names.array(), partitions), _decode(self.file_ids.array(), files))

    def updated(self, change, hashes=None):
        """A new KeyIndex with key -> (partition, file id) set for the rows of `change` (keys unique; `hashes`:
        their `key_hashes`, if known).

        `self` is left as it was (the two share their unchanged parts), so a cached index never holds changes of
        an instant that did not commit.
        """
        if change.num_rows == 0:
            return self
        keys, partitions, files, ordering = _columns(change)
        out = KeyIndex.__new__(KeyIndex)
        out.partition_names, out.file_ids = self.partition_names, self.file_ids
        out.base = self.base
        out.recent = _merge(
            self.recent,
            keys,
            self.partition_names.encode(partitions),
            self.file_ids.encode(files),
            key_hashes(keys) if hashes is None else hashes,
            ordering,
        )
        if out.recent.num_rows > max(_MERGE_MIN, out.base.num_rows // _MERGE_FRACTION):
            r = out.recent
            out.base = _merge(out.base, r.keys, r.partitions, r.files, r.hashes, r.ordering)
            out.recent = _EMPTY
        return out

    def to_table(self, hashes=False):
        """The whole state as one table (each key once, sorted by key hash; CODED_SCHEMA). With `hashes`, plus the
        key hashes (column `hash`, tagged with the hash function in the schema metadata), so that loading it back
        costs no hashing and no sort, and an uncompressed file of it can be used in place, memory-mapped."""
        part = self.base
        if self.recent.num_rows:
            r = self.recent
            part = _merge(self.base, r.keys, r.partitions, r.files, r.hashes, r.ordering)
        columns = [part.keys, _codes(part.partitions, self.partition_names), _codes(part.files, self.file_ids)]
        schema = CODED_SCHEMA
        if part.ordering is not None:
            columns.append(part.ordering)
            schema = schema.append(pa.field(ORDERING, part.ordering.type))
        if not hashes:
            return pa.Table.from_arrays(columns, schema=schema)
        schema = schema.append(pa.field(HASH, pa.uint64())).with_metadata({HASH_META: HASH_ID})
        return pa.Table.from_arrays(columns + [pa.array(part.hashes, pa.uint64())], schema=schema)


def _codes(codes, dictionary):
    """A DictionaryArray of codes into a _Dictionary (-1: null)."""
    indices = pa.array(codes, pa.int32(), mask=codes < 0) if (codes < 0).any() else pa.array(codes, pa.int32())
    return pa.DictionaryArray.from_arrays(indices, dictionary.array())


def _decode(values, codes):
    return pc.take(values, pa.array(codes, pa.int32(), mask=codes < 0))
