"""BucketAssigner: the second operator, one Spark task per group of key groups (after the key-group shuffle).

For its records it
1. pre-combines the records of one key (event time: greatest ordering value, ties to the later record; commit
   time: the later record), so each key has one record per micro-batch;
2. looks the key up in the keyed index state of its key group (record key -> partition path + file id);
3. routes a known key to its file group; with the global index, a key whose partition changed becomes a delete
   (applied by arrival) in the old file group plus an insert in the new partition;
4. packs inserts into the small file groups this task owns, then opens new file groups (log-only slices, like
   Hudi's Flink writer), each sized to hold max file size / average record size records;
5. saves the new locations in the index state (a delta per key group, versioned by the instant).

Everything is vectorized with Arrow; file ids of new groups derive from (instant, task, partition, n), so a
retried task routes exactly as the first attempt did.
"""

import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..chain import worker_memory
from ..chain.columns import DELETE, FILE_ID, KEY, KEY_GROUP, KIND, PARTITION, SEQ, WRITE_TASK, RecordKind
from ..chain.stages import AssignSpec, BatchContext
from ..checkpoints import index_state, key_index
from ..errors import HoodieUsageError, in_task
from ..format.hoodie_table import HoodieTable
from ..format.util.runs import run_ends, runs
from ..storage import LocalStorage, Storage
from . import markers as markers_fill
from .small_files import owner_task

LOOKUP, LOOKUP_HASH = "__hs_lookup", "__hs_lookup_hash"  # index key of a row and its key_hashes, within a chunk
ASSIGN_CHUNK_BYTES = 4 * 1024 * 1024  # input rows (Arrow bytes) a bucket assigner holds at a time
_NAMESPACE = uuid.UUID("6f1d3c2e-7a53-4c1b-9a8e-5d0b1e2f3a40")


def new_file_id(instant, task, partition, n, num_tasks):
    """The n-th new file id a task opens in a partition: deterministic (a retried task opens the same file
    groups) and owned by the task that opens it, so later micro-batches pack inserts into it from that task."""
    if not 0 <= task < num_tasks:
        raise HoodieUsageError(f"bucket-assign task {task} is not one of the stage's {num_tasks} tasks")
    salt = 0
    while True:  # ends: each salt gives an owner uniformly among the tasks
        file_id = f"{uuid.uuid5(_NAMESPACE, f'{instant}/{task}/{partition}/{n}/{salt}')}-0"
        if owner_task(file_id, num_tasks) == task:
            return file_id
        salt += 1


def precombine(table, ordering_field, event_time, markers=()):
    """One record per key: the greatest (ordering, seq) with event time, else the greatest seq. When the keys are
    already unique (and the key groups grouped, as the assigner's input is) the table is returned as it is;
    otherwise the result is sorted by key group (a key always hashes to the same group), then key. `markers`:
    partial-update markers the winner fills from its key's earlier versions (markers.py)."""
    return _precombined(table, ordering_field, event_time, markers)[0]


def _precombined(table, ordering_field, event_time, markers=()):
    """(precombined table, key_hashes of its keys when computed on the way, else None)."""
    if table.num_rows <= 1:
        return table, None
    hashes = key_index.key_hashes(table[KEY].combine_chunks())
    grouped = True
    if KEY_GROUP in table.column_names:
        groups = table[KEY_GROUP].combine_chunks().to_numpy(zero_copy_only=False)
        grouped = bool(np.all(groups[1:] >= groups[:-1]))
    if grouped and len(np.unique(hashes)) == table.num_rows:  # distinct hashes: distinct keys, nothing to combine
        return table, hashes
    keys = [(KEY_GROUP, "ascending", "at_start")] if KEY_GROUP in table.column_names else []
    keys.append((KEY, "ascending", "at_start"))
    if event_time and ordering_field and ordering_field in table.column_names:
        keys.append((ordering_field, "ascending", "at_start"))
    keys.append((SEQ, "ascending", "at_start"))
    order = pc.sort_indices(table, sort_keys=keys)
    sorted_keys = pc.take(table[KEY], order).combine_chunks()
    ends = run_ends(sorted_keys)
    if markers:
        return markers_fill.fill_runs(table.take(order), ends, markers), None
    return table.take(pc.take(order, pa.array(ends))), None


class BucketAssigner:
    """Picklable mapInArrow function for the bucket-assign stage of one micro-batch."""

    def __init__(self, context: BatchContext, spec: AssignSpec) -> None:
        self.context = context
        self.spec = spec
        self._slots: dict[str, dict] = {}  # partition -> open file groups of this task, consumed across chunks
        self._index_storage: Storage | None = None  # the index state's storage for this task (ListedIndex)
        self._table: HoodieTable | None = None  # the table as this task first read it (partial-update markers)

    @in_task
    def __call__(self, batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        self._slots = {}
        self._index_storage = None
        self._table = None
        with worker_memory.task(self.context.release_memory):
            # the input arrives sorted by key group: rows are assigned in chunks of whole key groups of about
            # ASSIGN_CHUNK_BYTES, so the task never holds its whole input (a key's rows are always in one chunk)
            held, held_bytes, current = [], 0, None
            for batch in batches:
                if not batch.num_rows:
                    continue
                groups, bounds = runs(batch.column(KEY_GROUP))
                for i, kg in enumerate(groups):
                    part = batch.slice(bounds[i], bounds[i + 1] - bounds[i])
                    if kg != current and held_bytes >= ASSIGN_CHUNK_BYTES:
                        yield from self._assign_chunk(held, task)
                        held, held_bytes = [], 0
                    current = kg
                    held.append(part)
                    held_bytes += part.nbytes
            if held:
                yield from self._assign_chunk(held, task)

    def _assign_chunk(self, parts, task):
        out = self.assign(pa.Table.from_batches(parts).combine_chunks(), task)
        yield from out.to_batches(max_chunksize=10_000)

    # ------------------------------------------------------------------------------------------------------
    def _lookup_keys(self, table):
        if self.spec.global_index:
            return table[KEY]
        return pc.binary_join_element_wise(table[PARTITION], table[KEY], "\u0001")

    def assign(self, table, task):
        table, key_hashes = _precombined(table, self.context.ordering_field, self.spec.event_time, self.spec.markers)
        groups, bounds = runs(table[KEY_GROUP].combine_chunks())
        if self._index_storage is None and groups:
            self._index_storage = index_storage(self.context.storage, groups[0])
        # the chunk's key groups at once: their stale state files are pruned in one bulk delete
        loaded = index_state.load_indexes(self._index_storage, groups, self.spec.committed) if groups else {}
        indexes = {kg: index for kg, (index, _) in loaded.items()}
        deltas = {kg: pending for kg, (_, pending) in loaded.items()}
        # the index key of every row and its hash, once: for the lookups here and for the index changes (_save)
        lookup = self._lookup_keys(table)
        if isinstance(lookup, pa.ChunkedArray):
            lookup = lookup.combine_chunks()
        hashes = key_hashes if self.spec.global_index and key_hashes is not None else key_index.key_hashes(lookup)
        table = table.append_column(LOOKUP, lookup).append_column(LOOKUP_HASH, pa.array(hashes))
        ordering_field = self.context.ordering_field
        # event-time ordering: the index keeps each key's ordering value, so that a late version (smaller ordering
        # value than the stored one) never wins, whatever partition it names, and a delete that came first is kept
        ordered = bool(self.spec.event_time and ordering_field and ordering_field in table.column_names)
        ordering_type = table.schema.field(ordering_field).type if ordered else None
        stored = []
        if self.context.operation == "insert" or not groups:
            found = pa.array(np.zeros(table.num_rows, bool))
            old_partition = old_file = pa.nulls(table.num_rows, pa.string())
        else:
            # rows are sorted by key group: look each group's run up in that group's index (codes into the group's
            # dictionaries, gathered into one dictionary per column and decoded once for the whole chunk)
            found = np.empty(table.num_rows, bool)
            partition_codes = np.empty(table.num_rows, np.int32)
            file_codes = np.empty(table.num_rows, np.int32)
            partition_names, file_ids = [], []
            for i, kg in enumerate(groups):
                start, end = bounds[i], bounds[i + 1]
                index = indexes[kg]
                if ordered:
                    f, p, fid, values = index.lookup_ordering(lookup.slice(start, end - start), hashes[start:end])
                    stored.append(key_index.ordering_as(values, ordering_type, end - start))
                else:
                    f, p, fid = index.lookup_codes(lookup.slice(start, end - start), hashes[start:end])
                found[start:end] = f
                partition_codes[start:end] = np.where(f, p + len(partition_names), -1)
                file_codes[start:end] = np.where(f, fid + len(file_ids), -1)
                partition_names += index.partition_names.values
                file_ids += index.file_ids.values
            old_partition = pc.take(pa.array(partition_names, pa.string()), pa.array(partition_codes, mask=~found))
            old_file = pc.take(pa.array(file_ids, pa.string()), pa.array(file_codes, mask=~found))
            found = pa.array(found)
        if ordered and stored:
            stored = pa.concat_arrays(stored)
            late = pc.fill_null(pc.less(table[ordering_field], stored), False)
            if pc.any(late).as_py():  # late versions are dropped: they lose to what the table holds
                keep = pc.invert(late)
                table, found, stored = table.filter(keep), pc.filter(found, keep), pc.filter(stored, keep)
                old_partition, old_file = pc.filter(old_partition, keep), pc.filter(old_file, keep)
        if self.spec.markers and groups and self.context.operation != "insert":
            table = markers_fill.fill_stored(
                table, found, old_partition, old_file, self.spec.markers, self._read_file_groups
            )
        is_delete = table[DELETE]
        moved = pc.and_(found, pc.not_equal(old_partition, table[PARTITION]))
        moved = pc.fill_null(moved, False)

        parts = []
        kept = []  # what the index keeps of the rows besides inserts: their ordering value (event-time ordering)
        if ordered:
            placed = pc.or_(is_delete, pc.and_(found, pc.invert(moved)))
            if pc.any(placed).as_py():  # updates and deletes where they are; deletes of unknown keys, no location
                kept.append(
                    _index_rows(
                        table.filter(placed),
                        pc.filter(old_partition, placed),
                        pc.filter(old_file, placed),
                        ordering_field,
                    )
                )
        # deletes of known keys go to their file group; deletes of unknown keys are not written
        del_mask = pc.and_(is_delete, found)
        if pc.any(del_mask).as_py():
            natural = self.context.operation == "delete" and not (
                ordering_field and ordering_field in table.column_names
            )
            kind = RecordKind.DELETE_NATURAL if natural or not ordering_field else RecordKind.DELETE_ORDERED
            dels = table.filter(del_mask)
            parts.append(_routed(dels, pc.filter(old_partition, del_mask), pc.filter(old_file, del_mask), kind))
        upsert = pc.invert(is_delete)
        # updates in place
        upd_mask = pc.and_(upsert, pc.and_(found, pc.invert(moved)))
        if pc.any(upd_mask).as_py():
            parts.append(_routed(table.filter(upd_mask), None, pc.filter(old_file, upd_mask), RecordKind.UPDATE))
        # partition moves: a delete in the old file group, applied by arrival
        mov_mask = pc.and_(upsert, moved)
        if pc.any(mov_mask).as_py():
            parts.append(
                _routed(
                    table.filter(mov_mask),
                    pc.filter(old_partition, mov_mask),
                    pc.filter(old_file, mov_mask),
                    RecordKind.DELETE_MOVED,
                )
            )
        # inserts: new keys and moved keys
        ins_mask = pc.and_(upsert, pc.or_(pc.invert(found), moved))
        if pc.any(ins_mask).as_py():
            routed = self._pack_inserts(table.filter(ins_mask), task)
            parts.append(routed)
            kept.append(_index_rows(routed, routed[PARTITION], routed[FILE_ID], ordering_field if ordered else None))
        if kept:
            self._save(pa.concat_tables(kept), indexes, deltas)
        if not parts:
            parts = [_routed(table.slice(0, 0), None, pa.array([], pa.string()), RecordKind.UPDATE)]
        columns = [*self.context.data_columns, KEY, PARTITION, FILE_ID, KIND, SEQ]
        out = pa.concat_tables([p.select(columns) for p in parts])
        return out.append_column(WRITE_TASK, self.spec.write_plan.tags(out[FILE_ID]))

    def _read_file_groups(self, groups):
        """The merged latest records of file groups of the table (for partial-update markers); the table's timeline
        is read once per task (what this micro-batch writes is not committed while it runs)."""
        if self._table is None:
            self._table = HoodieTable(self.context.storage)
        return self._table.read_file_groups(groups)

    def _pack_inserts(self, inserts, task):
        """Fill this task's small file groups of each partition, then new file groups, in (key group, key) order.
        Capacity is consumed across the chunks of the task (`self._slots`: partition -> open [file id, free records]
        and the number of new file groups opened); chunks hold whole key groups in key-group order, so each
        partition's inserts are packed in the same order wherever the chunks are cut, and a retried task packs the
        same way."""
        inserts = inserts.take(
            pc.sort_indices(inserts, sort_keys=[(PARTITION, "ascending"), (KEY_GROUP, "ascending"), (KEY, "ascending")])
        )
        owned = self.spec.small_files.get(task, {})
        names, bounds = runs(inserts[PARTITION].combine_chunks())
        ids, repeats = [], []  # a run of `repeats[i]` rows goes to file group `ids[i]`
        for i, partition in enumerate(names):
            slots = self._slots.get(partition)
            if slots is None:
                slots = self._slots[partition] = {
                    "open": [[fid, cap] for fid, _base_instant, _base_file, cap in owned.get(partition, [])],
                    "new": 0,
                }
            left = bounds[i + 1] - bounds[i]
            while left > 0:
                if not slots["open"]:
                    fid = new_file_id(self.context.instant, task, partition, slots["new"], self.spec.num_tasks)
                    slots["new"] += 1
                    slots["open"].append([fid, self.spec.new_file_capacity])
                slot = slots["open"][0]
                take = min(left, slot[1])
                ids.append(slot[0])
                repeats.append(take)
                left -= take
                slot[1] -= take
                if slot[1] <= 0:
                    slots["open"].pop(0)
        file_ids = pc.take(pa.array(ids, pa.string()), pa.array(np.repeat(np.arange(len(ids)), repeats)))
        return _routed(inserts, None, file_ids, RecordKind.INSERT)

    def _save(self, rows, indexes, deltas):
        """The chunk's changes of the index (`_index_rows`: the new locations of inserts, and with event-time
        ordering every placed key's ordering value) into the index state of their key groups (encoded once for
        the chunk, then sliced per key group)."""
        change = rows.take(pc.sort_indices(rows[KEY_GROUP]))
        state = key_index.coded(change.drop_columns([KEY_GROUP, LOOKUP_HASH])).combine_chunks()
        hashes = change[LOOKUP_HASH].combine_chunks().to_numpy(zero_copy_only=False)
        groups, bounds = runs(change[KEY_GROUP].combine_chunks())
        changes = []
        for i, kg in enumerate(groups):
            start, end = bounds[i], bounds[i + 1]
            delta = state.slice(start, end - start)
            changes.append((kg, indexes[kg].updated(delta, hashes[start:end]), delta, deltas[kg]))
        index_state.save_states(self._index_storage or self.context.storage, self.context.instant, changes)


def _index_rows(table, partitions, file_ids, ordering_field):
    """Index state rows of placed records: key, partition, file id (null for a delete of an unknown key), the
    ordering value when `ordering_field`; with the key group and key hash they are saved by."""
    columns = {
        KEY_GROUP: table[KEY_GROUP],
        LOOKUP_HASH: table[LOOKUP_HASH],
        "key": table[LOOKUP],
        "partition": partitions,
        "file_id": file_ids,
    }
    if ordering_field:
        columns[key_index.ORDERING] = table[ordering_field]
    return pa.table(columns)


def _routed(table, partition, file_ids, kind):
    """Rows with their target file id, kind and (for deletes in another partition) target partition."""
    if partition is not None:
        table = table.set_column(table.column_names.index(PARTITION), PARTITION, partition)
    n = table.num_rows
    table = table.append_column(FILE_ID, file_ids)
    return table.append_column(KIND, pa.array(np.full(n, kind, dtype=np.int8)))


# the index state read through ListedIndex: None = on remote storages only (a local directory is listed cheaply)
LISTED_INDEX: bool | None = None


def index_storage(storage, first_key_group):
    """The storage a bucket-assign task reads and writes its key groups' index state through: on an object store
    a `ListedIndex` (one listing for the task instead of one per key group), else the table's storage."""
    listed = LISTED_INDEX if LISTED_INDEX is not None else not isinstance(storage, LocalStorage)
    return ListedIndex(storage, first_key_group) if listed else storage


class ListedIndex(Storage):
    """The table's storage, with the index state's key-group directories listed once for the whole task.

    A bucket-assign task loads each of its key groups' state (a listing of the key group's directory: its full and
    delta files) and saves a delta: on an object store that is one LIST request per key group and micro-batch. The
    task's key groups form one range (the input is sorted by key group), so one recursive listing of the index
    directory from its first key group on answers them all (a page per 1000 files). A directory this task writes
    or deletes in is listed again from the store when asked (nothing else writes a key group while its task runs).
    Everything else goes to the table's storage."""

    def __init__(self, storage, first_key_group):
        self.inner = storage
        self.uri = storage.uri
        self._first = first_key_group
        self._dirs: dict[str, list] | None = None
        self._stale: set[str] = set()

    def _listed(self):
        if self._dirs is None:
            dirs: dict[str, list] = {}
            start = index_state.group_dir(self._first)
            for info in self.inner.list(index_state.INDEX_DIR, recursive=True, start_after=start):
                directory = info.path.rpartition("/")[0]
                dirs.setdefault(directory, []).append(info)
            self._dirs = dirs
        return self._dirs

    def _covers(self, directory):
        prefix = index_state.INDEX_DIR + "/"
        if not directory.startswith(prefix) or "/" in directory[len(prefix) :]:
            return False
        return directory >= index_state.group_dir(self._first) and directory not in self._stale

    def _touched(self, path):
        self._stale.add(path.rpartition("/")[0])

    def list(self, path="", recursive=False, start_after=None, temp=False):
        if not recursive and start_after is None and not temp and self._covers(path.rstrip("/")):
            return sorted(self._listed().get(path.rstrip("/"), []), key=lambda f: f.path)
        return self.inner.list(path, recursive, start_after, temp)

    def list_dirs(self, path=""):
        return self.inner.list_dirs(path)

    def read(self, path):
        return self.inner.read(path)

    def read_range(self, path, offset, length):
        return self.inner.read_range(path, offset, length)

    def open_input(self, path):
        return self.inner.open_input(path)

    def exists(self, path):
        return self.inner.exists(path)

    def size(self, path):
        return self.inner.size(path)

    def write(self, path, data):
        self._touched(path)
        return self.inner.write(path, data)

    def write_cached(self, path, data):
        self._touched(path)
        return self.inner.write_cached(path, data)

    def create(self, path, data=b""):
        self._touched(path)
        return self.inner.create(path, data)

    def read_version(self, path):
        return self.inner.read_version(path)

    def put_if(self, path, data, version):
        self._touched(path)
        return self.inner.put_if(path, data, version)

    def open_output(self, path, create=False):
        self._touched(path)
        return self.inner.open_output(path, create)

    def make_dirs(self, path):
        self.inner.make_dirs(path)

    def delete(self, path):
        self._touched(path)
        return self.inner.delete(path)

    def delete_many(self, paths):
        paths = list(paths)
        for path in paths:
            self._touched(path)
        self.inner.delete_many(paths)

    def delete_tree(self, path):
        self._stale.add(path.rstrip("/"))
        self.inner.delete_tree(path)

    def local_file(self, path, info=None):
        return self.inner.local_file(path, info)

    def with_local_cache(self, cache):
        return ListedIndex(self.inner.with_local_cache(cache), self._first)

    def child(self, path):
        return self.inner.child(path)

    def uri_of(self, path):
        return self.inner.uri_of(path)

    def relative(self, location):
        return self.inner.relative(location)

    def __reduce__(self):
        return (ListedIndex, (self.inner, self._first))
