"""Test helpers for calling the format core's storage-based functions with plain local file paths."""

import hashlib
import os

from hoodie_stream.storage import LocalStorage


def at(path):
    """(storage rooted at the file's directory, the file's name) of a local file path."""
    path = os.fspath(path)
    return LocalStorage(os.path.dirname(path)), os.path.basename(path)


LOCK_DIR = os.path.join(".hoodie", ".locks")


def tree(base):
    """{relative path: sha1} of every file under a directory (a table, to compare before and after). The writer
    lease's object (`.hoodie/.locks/`) is left out: each writer renews and releases it; it holds no table data."""
    out = {}
    for root, _dirs, files in os.walk(base):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, base)
            if rel.startswith(LOCK_DIR + os.sep):
                continue
            with open(path, "rb") as f:
                out[rel] = hashlib.sha1(f.read()).hexdigest()
    return out
