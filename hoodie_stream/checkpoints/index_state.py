"""The keyed index state: record key -> (partition path, file id), stored per key group, versioned by instant.

Layout under the table: `.hoodie/.aux/hoodie_stream/index/<key group>/` holds `<instant>.full.arrow` (the
whole state of the key group as of that instant) and `<instant>.delta.arrow` (the keys that instant placed);
uncompressed Arrow IPC files (cheap to write for the many small deltas of a micro-batch; zstd-compressed and
`.parquet` files of earlier versions are still read), columns key, partition, file_id (the last two
dictionary-encoded, as in memory; files with plain string columns are read too); full files also hold the key
hashes and are sorted by them. The state as of now is the newest full file plus the deltas after it. A file
counts only when its instant is completed; files of failed instants are removed by the rollback and ignored until
then. About every `COMPACT_EVERY` deltas (the key groups taking turns: `full_due`) a task writes a full file
instead, so loading stays cheap and a micro-batch writes only what it changed. `LATEST` names the last completed data instant the state covers. Executors cache
loaded states between micro-batches as `KeyIndex` lookup structures and apply only the newer deltas; a full file
is used in place, memory-mapped (no copy, no hashing, no sort), so its pages are shared by the machine's Python
workers through the page cache, and a worker that meets a key group for the first time loads it in well under a
millisecond plus its deltas. On a remote table the files are mapped from the executor's local copies
(`storage/local_cache.py`), named by the version the listing gives; a task puts the files it writes there from
memory, so the executor's other workers find them without a request.
"""

import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# pyarrow.parquet is imported by the functions that use it: the write chain's workers never need to load it
import pyarrow.ipc as ipc

from ..errors import HoodieObjectNotFoundError
from ..format.timeline.active_timeline import CommittedInstants
from ..format.util.runs import run_ends
from ..storage import storage_for
from .key_index import HASH as KEY_HASH
from .key_index import STATE_SCHEMA, KeyIndex, coded

_CACHE: dict[
    tuple[str, int], tuple[str, KeyIndex]
] = {}  # (table URI, key group) -> (instant, KeyIndex as of it); lives in each executor's Python worker
INDEX_DIR = ".hoodie/.aux/hoodie_stream/index"
LATEST = f"{INDEX_DIR}/LATEST"


def group_dir(key_group):
    """The directory of a key group's state files, relative to the table root."""
    return f"{INDEX_DIR}/{key_group:04d}"


def empty_state():
    return STATE_SCHEMA.empty_table()


COMPACT_EVERY = 16


SUFFIXES = (".arrow", ".parquet")  # written, still read
_STATE_FILE_SUFFIXES = [f".{kind}{ext}" for kind in ("full", "delta") for ext in SUFFIXES]


def _state_files(infos, committed):
    """(full instants, delta instants) among `committed` of a key group's listed files (FileInfo), each sorted,
    {(instant, kind): FileInfo}, and the paths of the files older than the newest committed full file (nothing
    reads them). Files of archived instants (before the active timeline) count as committed."""
    committed = CommittedInstants.of(committed)
    files = {}
    for info in infos:
        stem, _, suffix = info.name.rpartition(".")
        instant, _, kind = stem.partition(".")
        if "." + suffix not in SUFFIXES or kind not in ("full", "delta") or instant not in committed:
            continue
        if (instant, kind) not in files or not files[(instant, kind)].name.endswith(".arrow"):
            files[(instant, kind)] = info  # the file this version writes wins
    full = sorted(instant for instant, kind in files if kind == "full")
    delta = sorted(instant for instant, kind in files if kind == "delta")
    stale = [i.path for i in infos if full and i.name.endswith(SUFFIXES) and i.name.split(".", 1)[0] < full[-1]]
    return full, delta, files, stale


def _read_path(storage, path, info=None):
    """A state table. Uncompressed Arrow IPC files are memory-mapped (through the storage's local file: the file
    itself on a local table, else the local copy named by `info`, the file as listed) and read without a copy: a
    full file's key group then lives in the page cache, shared by every Python worker of the machine, and loads in
    a fraction of a millisecond (files of earlier versions: zstd-compressed, or parquet, are read into memory)."""
    if path.endswith(".parquet"):  # written by earlier versions
        import pyarrow.parquet as pq

        with storage.open_input(path) as f:
            return pq.read_table(f, schema=STATE_SCHEMA)
    try:
        return _mapped(storage.local_file(path, info))
    except FileNotFoundError:  # the copy was evicted by another worker in between: fetched again
        return _mapped(storage.local_file(path, info))


def _mapped(local_path):
    with pa.memory_map(local_path) as source:
        return ipc.open_file(source).read_all()


def load_index(storage, key_group, committed):
    """(KeyIndex, number of deltas after the newest full file) of a key group as of the committed instants."""
    return load_indexes(storage, [key_group], committed)[key_group]


def load_indexes(storage, key_groups, committed):
    """{key group: (KeyIndex, number of deltas after the newest full file)} as of the committed instants.

    An executor keeps what it loaded and applies only deltas newer than its copy. Files older than a key group's
    newest committed full file are deleted on the way, those of all `key_groups` in one bulk delete (a full file
    is written at least every 2 x COMPACT_EVERY micro-batches, so a key group keeps at most that many files).
    """
    storage = storage_for(storage)
    committed = CommittedInstants.of(committed)
    listed = {kg: _state_files(storage.list(group_dir(kg)), committed) for kg in key_groups}
    stale = [path for kg in key_groups for path in listed[kg][3]]
    if stale:
        storage.delete_many(stale)  # another worker may have pruned some of them first
    return {kg: _load(storage, kg, committed, *listed[kg][:3]) for kg in key_groups}


def _load(storage, key_group, committed, full, delta, files):
    newest_full = full[-1] if full else ""
    pending = [d for d in delta if d > newest_full]
    cached = _CACHE.get((storage.uri, key_group))
    if cached is not None and cached[0] in committed and cached[0] >= newest_full:
        upto, index = cached
    elif newest_full:
        upto, index = newest_full, KeyIndex(_read(storage, files[(newest_full, "full")]))
    else:
        upto, index = "", KeyIndex()
    newer = [d for d in pending if d > upto]
    if newer:  # applied as one change: the newest delta of a key wins
        index = index.updated(_latest_rows([_read(storage, files[(d, "delta")]) for d in newer]))
        upto = newer[-1]
    if upto:
        _CACHE[(storage.uri, key_group)] = (upto, index)
    return index, len(pending)


def _read(storage, info):
    return _read_path(storage, info.path, info)


def _latest_rows(tables):
    """The rows of state tables applied in order, as one table: each key's row from the last table holding it."""
    if len(tables) == 1:
        return tables[0]
    table = pa.concat_tables([coded(t) for t in tables], promote_options="permissive")
    order = pc.sort_indices(
        pa.table({"key": table["key"], "row": np.arange(table.num_rows)}),
        sort_keys=[("key", "ascending"), ("row", "ascending")],
    )
    return table.take(pc.take(order, pa.array(run_ends(pc.take(table["key"], order).combine_chunks()))))


def _write(storage, path, table):
    """Atomically write a state table as an uncompressed Arrow IPC file (full files are used in place,
    memory-mapped: see `_read_path`); returns a local path holding it: the file itself on a local table, else the
    copy the write put in the local cache (the executor's other Python workers find it there, and nothing is read
    back from the store)."""
    if KEY_HASH not in table.column_names:
        table = coded(table)
    table = table.combine_chunks()
    buffer = pa.BufferOutputStream()
    with ipc.new_file(buffer, table.schema) as writer:
        writer.write_table(table)
    return storage.write_cached(path, memoryview(buffer.getvalue()))  # one write of the serialized file


def _write_full(storage, path, index):
    """The full state of a key group, sorted by key hash with the hashes; returns it as loaded from the file
    (memory-mapped from the local path the write gave)."""
    local = _write(storage, path, index.to_table(hashes=True))
    try:
        return KeyIndex(_mapped(local))
    except FileNotFoundError:  # the copy was evicted by another worker in between
        return KeyIndex(_read_path(storage, path))


def full_due(key_group, instant, deltas_since_full):
    """Whether `instant` writes the key group's full file instead of a delta: on about one micro-batch in
    COMPACT_EVERY, drawn from a hash of (instant, key group) after at least COMPACT_EVERY / 4 deltas, and always
    after 2 x COMPACT_EVERY deltas. Key groups take turns: a micro-batch writes the full files of ~1/COMPACT_EVERY
    of them (a 6M-key table: ~4 of a task's 64, ~4 ms each) instead of all of them every COMPACT_EVERY batches
    (0.25 s for a task's 64 at once). The same instant always decides the same way (a retried task)."""
    if deltas_since_full + 1 >= 2 * COMPACT_EVERY:
        return True
    turn = zlib.crc32(f"{instant}/{key_group}".encode("ascii")) % COMPACT_EVERY == 0
    return turn and deltas_since_full + 1 >= COMPACT_EVERY // 4


def save_state(storage, key_group, instant, index, change, deltas_since_full):
    """Persist what `instant` changed in a key group: a delta file, or a full file when `full_due`.

    `index` is the key group's index with `change` applied. Atomic (temp file + rename); writing the same file
    again (a retried task) is harmless.
    """
    storage = storage_for(storage)
    directory = group_dir(key_group)
    if full_due(key_group, instant, deltas_since_full):
        index = _write_full(storage, f"{directory}/{instant}.full.arrow", index)
    else:
        _write(storage, f"{directory}/{instant}.delta.arrow", change)
    _CACHE[(storage.uri, key_group)] = (instant, index)


# state files of one task's key groups written at once: their syncs overlap (a local file system commits them
# together) and a remote store's uploads run side by side
SAVE_THREADS = 8


def save_states(storage, instant, changes):
    """save_state for each (key group, index, change, deltas since full) of `changes`, the files written by up to
    SAVE_THREADS threads; the first error is raised once every write has ended."""
    storage = storage_for(storage)
    if len(changes) <= 1:
        for key_group, index, change, deltas_since_full in changes:
            save_state(storage, key_group, instant, index, change, deltas_since_full)
        return
    with ThreadPoolExecutor(min(SAVE_THREADS, len(changes)), thread_name_prefix="hoodie-index-state") as pool:
        done = [pool.submit(save_state, storage, kg, instant, index, change, n) for kg, index, change, n in changes]
    for future in done:
        future.result()


def save_full(storage, key_group, instant, state):
    storage = storage_for(storage)
    _write_full(storage, f"{group_dir(key_group)}/{instant}.full.arrow", KeyIndex(state))


def remove_instant(storage, instant):
    """Delete the state files written by a failed instant (and temporary files of interrupted writes)."""
    storage = storage_for(storage)
    names = {instant + suffix for suffix in _STATE_FILE_SUFFIXES}
    doomed = [
        info.path
        for info in storage.list(INDEX_DIR, recursive=True, temp=True)
        if info.name in names or (info.name.startswith(".") and info.name.endswith(".tmp"))
    ]
    if doomed:
        storage.delete_many(doomed)


def instant_has_files(storage, instant):
    """Whether `instant` wrote index state files (a micro-batch that wrote no data file may still have changed the
    index: the ordering values of deletes of keys the table does not hold)."""
    storage = storage_for(storage)
    names = {instant + suffix for suffix in _STATE_FILE_SUFFIXES}
    return any(info.name in names for info in storage.list(INDEX_DIR, recursive=True))


def read_latest(storage):
    try:
        return storage_for(storage).read(LATEST).decode("ascii").strip() or None
    except HoodieObjectNotFoundError:
        return None


def write_latest(storage, instant):
    storage_for(storage).write(LATEST, instant.encode("ascii"))


def prune(storage, key_groups, committed):
    """Delete the files of the key groups that their newest committed full file makes unnecessary (one listing of
    the index directory, one bulk delete)."""
    storage = storage_for(storage)
    by_dir: dict[str, list] = {}
    for info in storage.list(INDEX_DIR, recursive=True):
        by_dir.setdefault(info.path.rpartition("/")[0], []).append(info)
    stale = [path for kg in key_groups for path in _state_files(by_dir.get(group_dir(kg), []), committed)[3]]
    if stale:
        storage.delete_many(stale)
