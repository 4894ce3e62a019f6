"""Storage on a local (or mounted) POSIX file system.

Every object is written to a temporary file in its directory, flushed and synced (fdatasync), then linked (create-if-absent:
`os.link` fails when the name exists) or renamed (write) to its name, and the directory is fsync'ed, so a crash
leaves either the old state or the new one, and a completed instant, once visible, survives power loss. Temporary
files are named `.<name>.<random>.tmp`: no reader takes them for a data or timeline file, and recovery removes
those a killed writer left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from typing import IO

from ..errors import HoodieObjectChangedError, HoodieObjectExistsError, HoodieObjectNotFoundError, HoodieStorageError
from .base import FileInfo, Storage
from .paths import check_relative, join

TEMP_SUFFIX = ".tmp"


def temp_name(name: str) -> str:
    return f".{name}.{uuid.uuid4().hex}{TEMP_SUFFIX}"


def is_temp_name(name: str) -> bool:
    """A temporary file of an interrupted write (this layer's, or the `_tmp_*.writing` of earlier versions)."""
    return (name.startswith(".") and name.endswith(TEMP_SUFFIX)) or (
        name.startswith("_tmp_") and name.endswith(".writing")
    )


def _sync_data(fd: int) -> None:
    """Flush a file's data (and the metadata needed to read it back) to the device."""
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


def _create_temp(tmp: str, directory: str) -> IO[bytes]:
    """Open a new temporary file; its directory is created only when the first attempt misses it."""
    try:
        return open(tmp, "w+b")
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
        return open(tmp, "w+b")


def _token(st: os.stat_result) -> str:
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"


def _drop_checksum(target: str) -> None:
    """Remove the `.<name>.crc` beside a file that Hadoop's local file system wrote (Hudi on a local path): once the
    file is replaced or deleted the checksum is stale, and Hadoop refuses to read a file whose checksum differs."""
    directory, name = os.path.split(target)
    try:
        os.remove(os.path.join(directory, f".{name}.crc"))
    except FileNotFoundError:
        pass


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot sync a directory
        pass
    finally:
        os.close(fd)


class LocalStorage(Storage):
    """A storage rooted at a local directory (`/abs/path` or `file:///abs/path`)."""

    def __init__(self, root: str):
        root = str(root)
        if root.startswith("file://"):
            root = root[len("file://") :]
        self.root = os.path.abspath(root)
        self.uri = self.root

    def __reduce__(self):
        return (type(self), (self.root,))

    def __eq__(self, other):
        return type(other) is type(self) and other.root == self.root

    def __hash__(self):
        return hash((type(self), self.root))

    def _abs(self, path: str) -> str:
        path = check_relative(path)
        return os.path.join(self.root, *path.split("/")) if path else self.root

    # -- reading ---------------------------------------------------------------------------------------------
    def read(self, path):
        try:
            with open(self._abs(path), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise HoodieObjectNotFoundError(self.uri_of(path), "does not exist") from None
        except IsADirectoryError:
            raise HoodieStorageError(self.uri_of(path), "is a directory, not a file") from None

    def read_range(self, path, offset, length):
        try:
            with open(self._abs(path), "rb") as f:
                f.seek(offset)
                return f.read(length)
        except FileNotFoundError:
            raise HoodieObjectNotFoundError(self.uri_of(path), "does not exist") from None

    def open_input(self, path):
        """A pyarrow file (readable and seekable like a binary file; parquet reads it natively, without the GIL)."""
        import pyarrow as pa

        try:
            return pa.OSFile(self._abs(path), "rb")
        except FileNotFoundError:
            raise HoodieObjectNotFoundError(self.uri_of(path), "does not exist") from None

    def exists(self, path):
        return os.path.exists(self._abs(path))

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(self._abs(path))

    def size(self, path):
        try:
            return os.path.getsize(self._abs(path))
        except FileNotFoundError:
            raise HoodieObjectNotFoundError(self.uri_of(path), "does not exist") from None

    def list(self, path="", recursive=False, start_after=None, temp=False):
        path = check_relative(path)
        found: list[FileInfo] = []
        self._scan(path, recursive, found, temp)
        if start_after is not None:
            found = [f for f in found if f.path > start_after]
        found.sort(key=lambda f: f.path)
        return found

    def _scan(self, path, recursive, found, temp):
        try:
            entries = list(os.scandir(self._abs(path)))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            rel = join(path, entry.name)
            try:
                if entry.is_dir(follow_symlinks=False):
                    if recursive:
                        self._scan(rel, recursive, found, temp)
                    continue
                if not temp and is_temp_name(entry.name):
                    continue
                st = entry.stat()
            except FileNotFoundError:  # removed while listing
                continue
            found.append(FileInfo(rel, st.st_size, st.st_mtime))

    def list_dirs(self, path=""):
        try:
            return sorted(e.name for e in os.scandir(self._abs(path)) if e.is_dir(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            return []

    # -- writing ---------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def open_output(self, path, create=False) -> Iterator[IO[bytes]]:
        target = self._abs(path)
        if path == "":
            raise HoodieStorageError(self.uri, "the root is a directory; it cannot be written as an object")
        directory, name = os.path.split(target)
        if create and os.path.exists(target):
            raise HoodieObjectExistsError(self.uri_of(path), "already exists; refusing to overwrite it")
        tmp = os.path.join(directory, temp_name(name))
        placed = False
        try:
            with _create_temp(tmp, directory) as f:
                yield f
                f.flush()
                _sync_data(f.fileno())
            if create:
                self._link_new(tmp, target, path)
            else:
                os.replace(tmp, target)
                placed = True
                _drop_checksum(target)
            _fsync_dir(directory)
        finally:
            if not placed:
                try:
                    os.remove(tmp)
                except FileNotFoundError:
                    pass

    def _link_new(self, tmp, target, path):
        try:
            os.link(tmp, target)
        except FileExistsError:
            raise HoodieObjectExistsError(self.uri_of(path), "already exists; refusing to overwrite it") from None
        except OSError:  # no hard links here: reserve the name exclusively, then move the content over it
            try:
                os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                raise HoodieObjectExistsError(self.uri_of(path), "already exists; refusing to overwrite it") from None
            os.replace(tmp, target)

    def read_version(self, path):
        target = self._abs(path)
        try:
            with open(target, "rb") as f:
                return f.read(), _token(os.fstat(f.fileno()))
        except FileNotFoundError:
            raise HoodieObjectNotFoundError(self.uri_of(path), "does not exist") from None

    def put_if(self, path, data, version):
        """Create-if-absent (link), or replace under an exclusive `flock` of the current file after checking that
        it is still the file of `version` (a replace makes a new inode, so the version token changes)."""
        import fcntl

        if version is None:
            self.create(path, data)
            return _token(os.stat(self._abs(path)))
        target = self._abs(path)
        try:
            fd = os.open(target, os.O_RDONLY)
        except FileNotFoundError:
            raise HoodieObjectChangedError(self.uri_of(path), "vanished since it was read; not replaced") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(target)
            except FileNotFoundError:
                current = None
            if current is None or current.st_ino != os.fstat(fd).st_ino or _token(current) != version:
                raise HoodieObjectChangedError(self.uri_of(path), "changed since it was read; not replaced")
            self.write(path, data)
            return _token(os.stat(target))
        finally:
            os.close(fd)

    def make_dirs(self, path: str) -> None:
        os.makedirs(self._abs(path), exist_ok=True)

    def delete(self, path):
        """Delete a file; directories it leaves empty go too (up to the root), as an object store has none."""
        target = self._abs(path)
        try:
            os.remove(target)
        except FileNotFoundError:
            return False
        _drop_checksum(target)
        self._after_removals(os.path.dirname(target))
        return True

    def delete_many(self, paths):
        directories = set()
        for path in paths:
            target = self._abs(path)
            try:
                os.remove(target)
            except FileNotFoundError:
                continue
            _drop_checksum(target)
            directories.add(os.path.dirname(target))
        for directory in sorted(directories, reverse=True):  # deepest first: a parent may empty in turn
            self._after_removals(directory)

    def _after_removals(self, directory):
        """Sync a directory files were removed from, then remove it and its parents while they are empty."""
        _fsync_dir(directory)
        while directory != self.root and directory.startswith(self.root + os.sep):
            try:
                os.rmdir(directory)  # only an empty directory: a writer's temp file keeps it
            except OSError:
                break
            directory = os.path.dirname(directory)

    def delete_tree(self, path):
        target = self._abs(path)
        if path == "":
            raise HoodieStorageError(self.uri, "refusing to delete the whole root")
        shutil.rmtree(target, ignore_errors=True)

    # -- local files -----------------------------------------------------------------------------------------
    def local_file(self, path, info=None):
        """The file itself (no copy)."""
        target = self._abs(path)
        if not os.path.isfile(target):
            raise HoodieObjectNotFoundError(self.uri_of(path), "does not exist")
        return target

    def write_cached(self, path, data):
        self.write(path, data)
        return self._abs(path)

    def child(self, path):
        return LocalStorage(self._abs(path))
