"""Local copies of a remote table's objects, for what must be memory-mapped (the index state), and the spool of
uploads.

Where (`LocalCache.root`): the directory the sink's `hoodie.stream.index.cache.dir` names, else
`hoodie_stream_index_cache` under Spark's local directories as this process sees them: `SPARK_LOCAL_DIRS`, which
Spark sets for the Python workers it starts (its block manager's directories on the executor's own disk, comma
separated: the first is taken), else `spark.local.dir` of a SparkContext running in this process (the driver),
else the system's temporary directory. Each executor so keeps its own cache, shared by its Python workers.

Layout: `<root>/<table>/<object path>~<version tag>`, `<table>` a hash of the storage URI and the tag a hash of the
object's version (its ETag on an object store) and size, as a listing or the PUT that wrote it gives them. A copy is
never served for another version of its object (a retried write, a table dropped and re-created at the same URI:
the listing's version names another copy, which is fetched); a copy whose size is not its object's (torn by a
crash) is fetched again. Uploads spool in `<root>/spool`.

Placement: a temporary file next to the copy (named with the size it will have), renamed onto its name, so the
Python workers of a machine share the directory safely: they may place the same copy at once, and nobody maps a
partial one.

Bound (`max_bytes`): the bytes of the copies are counted in `<root>/.usage`, which the Python workers sharing the
directory update under an exclusive lock (`flock`) with each placement and removal; a placement that would pass
the bound first evicts copies, least recently used first (a use touches the copy's modification time), down to 90%
of the bound. The count is taken again from the directory when the file is missing and by every process every
RESCAN_EVERY placements (a worker killed between a placement and its count). An evicted copy stays valid for
whoever maps it (POSIX keeps an unlinked file's pages for its mappings); the next user fetches it again. Paths stay
inside the directory: they are checked like every storage path.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import math
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from .paths import check_relative

MB = 1 << 20
DEFAULT_MAX_BYTES = 2048 * MB
DIR_NAME = "hoodie_stream_index_cache"
SPOOL = "spool"
USAGE = ".usage"
TEMP_SUFFIX = ".tmp"
LOW_WATER = 0.9  # an eviction frees the cache down to this share of the bound
RESCAN_EVERY = 256  # placements of one process between two scans of the directory
TEMP_MAX_AGE = 600.0  # seconds after which a temporary file is the leftover of a killed worker


def spark_local_dir() -> str:
    """Spark's first local directory as this process sees it (see the module docstring), else the temp dir."""
    first = _first(os.environ.get("SPARK_LOCAL_DIRS"))
    return first or _driver_local_dir() or tempfile.gettempdir()


def _first(dirs: str | None) -> str | None:
    return next((d.strip() for d in (dirs or "").split(",") if d.strip()), None)


def _driver_local_dir() -> str | None:
    """`spark.local.dir` of the SparkContext running in this process, when pyspark is loaded and one runs."""
    pyspark = sys.modules.get("pyspark")
    context = getattr(getattr(pyspark, "SparkContext", None), "_active_spark_context", None)
    if context is None:
        return None
    key = id(context)
    if key not in _DRIVER_DIRS:
        try:
            _DRIVER_DIRS[key] = _first(context.getConf().get("spark.local.dir"))
        except Exception:  # a context being stopped
            return None
    return _DRIVER_DIRS[key]


_DRIVER_DIRS: dict[int, str | None] = {}
_PLACED: dict[str, int] = {}  # root -> placements by this process since it last counted the directory


@dataclass(frozen=True)
class LocalCache:
    """Where a storage keeps its local copies and spools its uploads, and how many bytes of copies it keeps."""

    directory: str | None = None  # None: `hoodie_stream_index_cache` under Spark's local dirs of this process
    max_bytes: int = DEFAULT_MAX_BYTES

    def root(self) -> str:
        return os.path.abspath(self.directory) if self.directory else os.path.join(spark_local_dir(), DIR_NAME)

    def spool_dir(self) -> str:
        """Where uploads to a remote store spool their data before the PUT."""
        path = os.path.join(self.root(), SPOOL)
        os.makedirs(path, exist_ok=True)
        return path

    def _table_dir(self, uri: str) -> str:
        return os.path.join(self.root(), hashlib.sha256(uri.encode("utf-8")).hexdigest()[:24])

    def _target(self, uri: str, path: str, version: str, size: int) -> str:
        path = check_relative(path)
        tag = hashlib.sha256(f"{version}\0{size}".encode()).hexdigest()[:16]
        return os.path.join(self._table_dir(uri), *path.split("/")) + f"~{tag}"

    def lookup(self, uri: str, path: str, version: str, size: int) -> str | None:
        """The local copy of the object at `path` of storage `uri` in this version (ETag/generation; '' where the
        store has none: then the size alone) and size, or None when there is none."""
        target = self._target(uri, path, version, size)
        try:
            if os.stat(target).st_size == size:
                os.utime(target)  # its recency, for eviction
                return target
            os.remove(target)  # torn by a crash: fetched again
        except FileNotFoundError:
            pass
        return None

    def place(self, uri: str, path: str, version: str, data: bytes | memoryview) -> str:
        """Keep `data`, the bytes of the object at `path` in `version`, as its local copy; returns the copy's path."""
        target = self._target(uri, path, version, len(data))
        tmp = f"{target}.{uuid.uuid4().hex}.{len(data)}{TEMP_SUFFIX}"  # its size, for the count of other workers
        try:
            with self._reserve(tmp, len(data)) as f:
                f.write(data)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return target

    def discard(self, uri: str, paths: Iterable[str]) -> None:
        """Remove the copies (every version) of objects deleted from the storage."""
        by_dir: dict[str, set[str]] = {}
        for path in paths:
            directory, _, name = check_relative(path).rpartition("/")
            by_dir.setdefault(directory, set()).add(name)
        table = self._table_dir(uri)
        freed = 0
        for directory, names in by_dir.items():
            local = os.path.join(table, *directory.split("/")) if directory else table
            try:
                entries = list(os.scandir(local))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                if entry.name.rpartition("~")[0] in names:
                    try:
                        size = entry.stat().st_size
                        os.remove(entry.path)
                        freed += size
                    except FileNotFoundError:
                        pass
        self._count(-freed)

    def discard_tree(self, uri: str, path: str) -> None:
        """Remove the copies of every object under directory `path` of the storage."""
        path = check_relative(path)
        if path:
            shutil.rmtree(os.path.join(self._table_dir(uri), *path.split("/")), ignore_errors=True)

    # -- the bound ---------------------------------------------------------------------------------------------
    def _count(self, delta: int) -> None:
        if delta:
            with _usage(self.root()) as (total, write):
                if total is not None:
                    write(total + delta)

    def _reserve(self, tmp: str, incoming: int) -> BinaryIO:
        """The temporary file of a copy of `incoming` bytes, created once they are counted, evicting copies first
        when they would pass the bound (under the count's lock: a scan of another worker sees the temporary file,
        and counts the size its name declares, as soon as the count holds it)."""
        root = self.root()
        with _usage(root) as (total, write):
            if total is None or _PLACED.get(root, 0) >= RESCAN_EVERY:
                total = evict(root, math.inf)
                _PLACED[root] = 0
            if total + incoming > self.max_bytes:
                total = evict(root, int(self.max_bytes * LOW_WATER) - incoming)
            try:
                f = open(tmp, "xb")  # noqa: SIM115 (the caller closes it)
            except FileNotFoundError:  # a first copy in this directory, or the directory was just discarded
                os.makedirs(os.path.dirname(tmp), exist_ok=True)
                f = open(tmp, "xb")  # noqa: SIM115
            write(total + incoming)
            _PLACED[root] = _PLACED.get(root, 0) + 1
            return f


@contextlib.contextmanager
def _usage(root: str) -> Iterator[tuple[int | None, Callable[[float], None]]]:
    """(bytes of the copies under `root` as counted, a function writing the new count) while holding the count's
    exclusive lock; the count is None when there is none yet."""
    os.makedirs(root, exist_ok=True)
    fd = os.open(os.path.join(root, USAGE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.read(fd, 32).decode("ascii", "replace").strip()

        def write(total: float) -> None:
            data = str(max(0, int(total))).encode("ascii")
            os.pwrite(fd, data.ljust(20), 0)

        yield (int(text) if text.isdigit() else None), write
    finally:
        os.close(fd)  # and the lock with it


def evict(root: str, budget: float) -> int:
    """Delete the least recently used copies under `root` until they hold at most `budget` bytes; returns the bytes
    left, with those of the placements under way (their temporary files, counted by the size their names declare,
    left alone; those of killed workers removed)."""
    copies = []
    placing = 0
    now = time.time()
    for directory, dirs, files in os.walk(root):
        if directory == root and SPOOL in dirs:
            dirs.remove(SPOOL)
        for name in files:
            if "~" not in name:  # the count, or something not ours
                continue
            path = os.path.join(directory, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            if name.endswith(TEMP_SUFFIX):
                declared = name[: -len(TEMP_SUFFIX)].rpartition(".")[2]
                if now - st.st_mtime > TEMP_MAX_AGE:
                    _remove(path)
                elif declared.isdigit():
                    placing += int(declared)
                continue
            copies.append((st.st_mtime, st.st_size, path))
    copies.sort()
    total = sum(size for _, size, _ in copies) + placing
    for _, size, path in copies:
        if total <= budget:
            break
        _remove(path)
        total -= size
    return total


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
