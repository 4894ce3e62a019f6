"""The storage interface: the only way the project reads, writes, lists or deletes files.

A `Storage` is rooted at one URI (a table's base path, or a cache directory); every path it takes is relative to
that root and checked by `paths.check_relative`, so nothing outside the root can be touched. The operations are what
Hudi's commit protocol needs, stated so that an object store can provide them without rename:

- `read` / `read_range` / `open_input`: whole objects, byte ranges, and a seekable file for parquet readers;
- `write`: put a whole object (atomic: readers see the old object or the new one, never a part);
- `create`: create-if-absent (raises `HoodieObjectExistsError` when the object exists; the one primitive the
  timeline, markers and writer locks stand on);
- `open_output`: a file to write an object through (seekable; it appears atomically when the block ends, and, with
  `create=True`, only if nothing is there yet);
- `read_version` / `put_if`: compare-and-swap on one object (ETag / generation on object stores), for the lease;
- `list` (with sizes, modification times and, on object stores, versions), `exists`, `size`, `delete`,
  `delete_many` (no answer per object: one request per 1000 objects on S3), `delete_tree`;
- `local_file`: the escape hatch for what must be memory-mapped (the index state): a local path to the object,
  through the storage's `LocalCache` (`local_cache.py`) when the store is remote; `write_cached` writes an object
  and keeps its bytes there, so reading it back costs no request.
Directories are not objects: they exist while something is in them, and writes create them as needed.
Storages are picklable (they travel to Spark tasks with the operators that use them).
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from .local_cache import LocalCache
from .paths import check_relative, join


@dataclass(frozen=True)
class FileInfo:
    """One object under a storage root: its relative path, size in bytes and modification time (epoch seconds),
    and on object stores its version (ETag, and generation where the store has one: the token of `read_version`;
    '' elsewhere), which names its local copy; two listings of the same objects compare equal without it."""

    path: str
    size: int
    mtime: float
    version: str = field(default="", compare=False)

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]


class Storage:
    """Base class of storages; see the module docstring. Subclasses implement the methods that raise here."""

    uri: str
    local_cache: LocalCache = LocalCache()  # where local copies and upload spools go (remote storages)

    # -- reading ---------------------------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        raise NotImplementedError

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        raise NotImplementedError

    def open_input(self, path: str) -> IO[bytes]:
        """A seekable binary file to read the object (for readers that seek, as parquet's)."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        """Whether an object (or, where the storage has directories, a directory) is at `path`."""
        raise NotImplementedError

    def size(self, path: str) -> int:
        raise NotImplementedError

    def list(
        self, path: str = "", recursive: bool = False, start_after: str | None = None, temp: bool = False
    ) -> list[FileInfo]:
        """Objects directly in directory `path` (or anywhere under it), sorted by path; [] if there are none.
        `start_after` (a path relative to the root, like the results'): only objects whose path sorts after it
        (an object store then lists from there: a timeline is read again from its newest instant on). The
        temporary files of this layer's own writes (a write a killed or cancelled process left) are listed only
        with `temp` (for the code that removes them): no reader, marker or timeline listing ever sees them."""
        raise NotImplementedError

    def list_dirs(self, path: str = "") -> builtins.list[str]:  # `list` is the method above
        """Names of the directories directly in `path`, sorted."""
        raise NotImplementedError

    # -- writing ---------------------------------------------------------------------------------------------
    def write(self, path: str, data: bytes | memoryview | Iterable[bytes]) -> int:
        """Put a whole object (replacing one that exists), atomically; returns its size."""
        with self.open_output(path) as f:
            return _write_all(f, data)

    def create(self, path: str, data: bytes | Iterable[bytes] = b"") -> int:
        """Create an object only if none exists at `path` (else HoodieObjectExistsError); returns its size."""
        with self.open_output(path, create=True) as f:
            return _write_all(f, data)

    def read_version(self, path: str) -> tuple[bytes, str]:
        """(content, version token) of an object, for a later `put_if`."""
        raise NotImplementedError

    def put_if(self, path: str, data: bytes, version: str | None) -> str:
        """Create the object (`version` None: create-if-absent, else HoodieObjectExistsError) or replace it only
        while its version is still `version` (else HoodieObjectChangedError); returns the new version token.
        The one primitive of the writer lease."""
        raise NotImplementedError

    @contextlib.contextmanager
    def open_output(self, path: str, create: bool = False) -> Iterator[IO[bytes]]:
        """A seekable binary file whose content becomes the object at `path` when the block ends without an
        error (nothing appears otherwise). With `create`, HoodieObjectExistsError if the object exists by then."""
        raise NotImplementedError
        yield

    def make_dirs(self, path: str) -> None:
        """Create directory `path` where the storage has directories (a local file system); object stores have
        none, and do nothing."""

    def delete(self, path: str) -> bool:
        """Delete an object; False when there was none."""
        raise NotImplementedError

    def delete_many(self, paths: Iterable[str]) -> None:
        """Delete objects, those already gone included, without telling which were there (an object store deletes
        them in bulk: no request per object)."""
        for path in paths:
            self.delete(path)

    def delete_tree(self, path: str) -> None:
        """Delete every object under directory `path` (nothing when there is none)."""
        raise NotImplementedError

    # -- local files -----------------------------------------------------------------------------------------
    def local_file(self, path: str, info: FileInfo | None = None) -> str:
        """A local file system path holding the object's bytes, for memory-mapping: the file itself on a local
        storage, else a copy in `local_cache`. `info`, the object as this storage listed it, names the copy
        (its version and size); without it the object's size is asked for (a storage without versions: a copy of
        the same size counts as current)."""
        size = self.size(path) if info is None else info.size
        version = "" if info is None else info.version
        found = self.local_cache.lookup(self.uri, path, version, size)
        return found or self.local_cache.place(self.uri, path, version, self.read(path))

    def write_cached(self, path: str, data: bytes | memoryview) -> str:
        """Write an object (as `write`) and return a local path holding its bytes, as `local_file` would give it:
        a remote storage keeps `data` in its local cache, so the object is not read back."""
        self.write(path, data)
        return self.local_cache.place(self.uri, path, "", data)

    def with_local_cache(self, cache: LocalCache) -> Storage:
        """This storage keeping its local copies and spooling its uploads as `cache` says (a storage that has
        neither, as a local one, is returned as it is)."""
        return self

    # -- navigation ------------------------------------------------------------------------------------------
    def child(self, path: str) -> Storage:
        """A storage rooted at directory `path` of this one."""
        raise NotImplementedError

    def uri_of(self, path: str) -> str:
        """The URI of an object, for messages and for metadata that records full paths."""
        return join(self.uri.rstrip("/"), path) if path else self.uri

    def relative(self, location: str) -> str:
        """The path relative to this root of a location recorded in metadata: a URI or absolute path inside the
        root (`file:` prefixes as Hudi writes them are accepted), or a relative path. HoodiePathError when it is
        outside the root."""
        root = self.uri.rstrip("/") + "/"
        for prefix in ("file://", "file:"):
            if location.startswith(prefix) and not root.startswith(prefix):
                location = location[len(prefix) :]
                break
        if location.startswith(root):
            location = location[len(root) :]
        return check_relative(location, "path recorded in the table's metadata")

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"


def _write_all(f: IO[bytes], data: bytes | memoryview | Iterable[bytes]) -> int:
    if isinstance(data, (bytes, bytearray, memoryview)):
        f.write(data)
        return len(data)
    size = 0
    for part in data:
        f.write(part)
        size += len(part)
    return size
