"""Local copies of objects, for what must be memory-mapped when the objects live elsewhere (the index state).

A copy is made once per (storage URI, path) and kept under the cache directory (`HOODIE_STREAM_CACHE_DIR`, else
`hoodie_stream_cache` in the system's temporary directory), in a subdirectory per storage root; it is written to a
temporary name and renamed into place, so a reader never maps a partial copy. The objects cached this way are never
rewritten with other content under the same name (index state files are named by the instant that wrote them), so
a copy that exists is current. Paths stay inside the cache directory: they are checked like every storage path.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid

from .paths import check_relative

CACHE_DIR_ENV = "HOODIE_STREAM_CACHE_DIR"


def cache_root() -> str:
    return os.environ.get(CACHE_DIR_ENV) or os.path.join(tempfile.gettempdir(), "hoodie_stream_cache")


def spool_dir() -> str:
    """Where writes to a remote store spool data files before the upload (inside the cache directory)."""
    path = os.path.join(cache_root(), "spool")
    os.makedirs(path, exist_ok=True)
    return path


def cached_copy(storage, path: str) -> str:
    """A local file holding the bytes of `storage`'s object at `path` (copied on first use)."""
    path = check_relative(path)
    root = os.path.join(cache_root(), hashlib.sha256(storage.uri.encode("utf-8")).hexdigest()[:24])
    target = os.path.join(root, *path.split("/"))
    if os.path.isfile(target):
        return target
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = f"{target}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(storage.read(path))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target
