"""A storage that records every call, for proving that the table's whole life goes through the storage layer.

Its URI (`rec://<name>`) is no local path, and its objects live in a backing directory under other names (each
path segment reversed), so code that bypassed the storage — building a local path from the table's location and
opening it — would find nothing and create nothing where the table is. Every call is appended as a JSON line to a
log file, from the driver and from the Spark tasks alike (the storage travels to them pickled by value).
"""

import contextlib
import json
import os
import sys

from hoodie_stream.storage import LocalStorage, Storage, check_relative


def _hidden(path):
    return "/".join(segment[::-1] for segment in path.split("/")) if path else ""


def _shown(path):
    return _hidden(path)


class RecordingStorage(Storage):
    def __init__(self, name, backing_dir, log_path, prefix=""):
        self.name = name
        self.backing_dir = str(backing_dir)
        self.log_path = str(log_path)
        self.prefix = prefix
        self.uri = f"rec://{name}" + (f"/{prefix}" if prefix else "")
        self._local = LocalStorage(self.backing_dir)

    def __reduce__(self):
        return (type(self), (self.name, self.backing_dir, self.log_path, self.prefix))

    def _record(self, op, path):
        line = json.dumps(
            {
                "op": op,
                "path": path,
                "pid": os.getpid(),
                "worker": "pyspark" in sys.modules and os.environ.get("PYSPARK_PYTHON") is not None and _in_task(),
            }
        )
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def _at(self, op, path):
        path = check_relative(path)
        full = f"{self.prefix}/{path}" if self.prefix and path else (self.prefix or path)
        self._record(op, full)
        return _hidden(full)

    def read(self, path):
        return self._local.read(self._at("read", path))

    def read_range(self, path, offset, length):
        return self._local.read_range(self._at("read_range", path), offset, length)

    def open_input(self, path):
        return self._local.open_input(self._at("open_input", path))

    def read_version(self, path):
        return self._local.read_version(self._at("read_version", path))

    def put_if(self, path, data, version):
        return self._local.put_if(self._at("put_if", path), data, version)

    def exists(self, path):
        return self._local.exists(self._at("exists", path))

    def size(self, path):
        return self._local.size(self._at("size", path))

    def list(self, path="", recursive=False, start_after=None, temp=False):
        hidden = self._at("list", path)
        out = []
        for info in self._local.list(hidden, recursive, temp=temp):
            shown = _shown(info.path)
            if self.prefix:
                shown = shown[len(self.prefix) + 1 :]
            out.append(type(info)(shown, info.size, info.mtime))
        return sorted((f for f in out if start_after is None or f.path > start_after), key=lambda f: f.path)

    def list_dirs(self, path=""):
        return sorted(d[::-1] for d in self._local.list_dirs(self._at("list_dirs", path)))

    @contextlib.contextmanager
    def open_output(self, path, create=False):
        with self._local.open_output(self._at("create" if create else "write", path), create=create) as f:
            yield f

    def delete(self, path):
        return self._local.delete(self._at("delete", path))

    def delete_tree(self, path):
        return self._local.delete_tree(self._at("delete_tree", path))

    def child(self, path):
        path = check_relative(path)
        return RecordingStorage(
            self.name, self.backing_dir, self.log_path, f"{self.prefix}/{path}" if self.prefix else path
        )

    def unhidden_copy(self, dest):
        """Copy the objects to a local directory under their real names (for readers that take a local path)."""
        for info in self._local.list("", recursive=True):
            target = os.path.join(dest, *_shown(info.path).split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(self._local.read(info.path))
        return dest


def _in_task():
    try:
        from pyspark import TaskContext

        return TaskContext.get() is not None
    except Exception:
        return False


def read_calls(log_path):
    if not os.path.exists(log_path):
        return []
    with open(log_path) as f:
        return [json.loads(line) for line in f if line.strip()]
