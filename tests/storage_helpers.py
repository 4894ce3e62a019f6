"""Test helpers for calling the format core's storage-based functions with plain local file paths."""

import os

from hoodie_stream.storage import LocalStorage


def at(path):
    """(storage rooted at the file's directory, the file's name) of a local file path."""
    path = os.fspath(path)
    return LocalStorage(os.path.dirname(path)), os.path.basename(path)
