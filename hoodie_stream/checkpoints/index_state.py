"""The keyed index state: record key -> (partition path, file id), stored per key group, versioned by instant.

Layout under the table: `.hoodie/.aux/hoodie_stream/index/<key group>/` holds `<instant>.full.parquet` (the
whole state of the key group as of that instant) and `<instant>.delta.parquet` (the keys that instant placed);
columns key, partition, file_id. The state as of now is the newest full file plus the deltas after it. A file
counts only when its instant is completed; files of failed instants are removed by the rollback and ignored until
then. After `COMPACT_EVERY` deltas a task writes a full file instead, so loading stays cheap and a micro-batch
writes only what it changed. `LATEST` names the last completed data instant the state covers. Executors cache
loaded states between micro-batches as `KeyIndex` lookup structures and apply only the newer deltas.
"""

import os

import pyarrow.parquet as pq

from .key_index import STATE_SCHEMA, KeyIndex

_CACHE = {}  # (base, key group) -> _Cached; lives in each executor's Python worker


class _Cached:
    __slots__ = ("deltas", "index", "upto")

    def __init__(self, upto, index, deltas):
        self.upto, self.index, self.deltas = upto, index, deltas


def index_dir(base):
    return os.path.join(str(base), ".hoodie", ".aux", "hoodie_stream", "index")


def group_dir(base, key_group):
    return os.path.join(index_dir(base), "%04d" % key_group)


def empty_state():
    return STATE_SCHEMA.empty_table()


COMPACT_EVERY = 16


def _files(base, key_group, committed):
    """(full instants, delta instants) of a key group among `committed`, each sorted."""
    try:
        names = os.listdir(group_dir(base, key_group))
    except FileNotFoundError:
        return [], []
    full, delta = [], []
    for name in names:
        if name.endswith(".full.parquet") and name[:-13] in committed:
            full.append(name[:-13])
        elif name.endswith(".delta.parquet") and name[:-14] in committed:
            delta.append(name[:-14])
    return sorted(full), sorted(delta)


def _read(base, key_group, name):
    return pq.read_table(os.path.join(group_dir(base, key_group), name), schema=STATE_SCHEMA)


def load_index(base, key_group, committed):
    """(KeyIndex, number of deltas after the newest full file) of a key group as of the committed instants.

    An executor keeps what it loaded and applies only deltas newer than its copy.
    """
    full, delta = _files(base, key_group, committed)
    newest_full = full[-1] if full else ""
    pending = [d for d in delta if d > newest_full]
    cached = _CACHE.get((str(base), key_group))
    if cached is not None and cached.upto in committed and cached.upto >= newest_full:
        upto, index = cached.upto, cached.index
    elif newest_full:
        upto, index = newest_full, KeyIndex(_read(base, key_group, newest_full + ".full.parquet"))
    else:
        upto, index = "", KeyIndex()
    for d in pending:
        if d > upto:
            index = index.updated(_read(base, key_group, d + ".delta.parquet"))
            upto = d
    if upto:
        _CACHE[(str(base), key_group)] = _Cached(upto, index, len(pending))
    return index, len(pending)


def load_state(base, key_group, committed):
    """(state table, number of deltas after the newest full file) of a key group as of the committed instants."""
    index, deltas = load_index(base, key_group, committed)
    return index.to_table(), deltas


def _write(path, table):
    tmp = f"{path}.{os.getpid()}.tmp"
    pq.write_table(table.select(STATE_SCHEMA.names).cast(STATE_SCHEMA), tmp, compression="zstd")
    os.replace(tmp, path)


def save_state(base, key_group, instant, index, change, deltas_since_full):
    """Persist what `instant` changed in a key group: a delta file, or a full file every COMPACT_EVERY deltas.

    `index` is the key group's index with `change` applied. Atomic (temp file + rename); writing the same file
    again (a retried task) is harmless.
    """
    directory = group_dir(base, key_group)
    os.makedirs(directory, exist_ok=True)
    if deltas_since_full + 1 >= COMPACT_EVERY:
        _write(os.path.join(directory, instant + ".full.parquet"), index.to_table())
    else:
        _write(os.path.join(directory, instant + ".delta.parquet"), change)
    _CACHE[(str(base), key_group)] = _Cached(instant, index, 0)


def save_full(base, key_group, instant, state):
    directory = group_dir(base, key_group)
    os.makedirs(directory, exist_ok=True)
    _write(os.path.join(directory, instant + ".full.parquet"), state)


def remove_instant(base, instant):
    """Delete the state files written by a failed instant."""
    root = index_dir(base)
    if not os.path.isdir(root):
        return
    for group in os.listdir(root):
        for suffix in (".full.parquet", ".delta.parquet"):
            path = os.path.join(root, group, instant + suffix)
            if os.path.exists(path):
                os.remove(path)
    for group in os.listdir(root):
        gdir = os.path.join(root, group)
        if os.path.isdir(gdir):
            for name in os.listdir(gdir):
                if name.endswith(".tmp"):
                    os.remove(os.path.join(gdir, name))


def read_latest(base):
    try:
        with open(os.path.join(index_dir(base), "LATEST")) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def write_latest(base, instant):
    os.makedirs(index_dir(base), exist_ok=True)
    path = os.path.join(index_dir(base), "LATEST")
    with open(path + ".tmp", "w") as f:
        f.write(instant)
    os.replace(path + ".tmp", path)


def prune(base, key_group, committed):
    """Delete the files of a key group that the newest committed full file makes unnecessary."""
    full, _ = _files(base, key_group, committed)
    if not full:
        return
    directory = group_dir(base, key_group)
    for name in os.listdir(directory):
        stem = name.split(".", 1)[0]
        if name.endswith(".parquet") and stem < full[-1]:
            os.remove(os.path.join(directory, name))
