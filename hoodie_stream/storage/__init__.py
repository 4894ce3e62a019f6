"""The storage layer: the only code that touches files (see `base.Storage`).

`storage_for(location)` gives the storage of a table path or URI: a plain path or `file://` URI is a
`LocalStorage`; a `Storage` passed in is used as it is.
"""

from __future__ import annotations

from ..errors import HoodieConfigError
from .base import FileInfo, Storage
from .local import LocalStorage
from .paths import check_relative, check_segment, join, split

__all__ = ["FileInfo", "LocalStorage", "Storage", "check_relative", "check_segment", "join", "split", "storage_for"]


def storage_for(location: str | Storage) -> Storage:
    """The storage rooted at `location`: a Storage (returned as it is), a local path or a `file://` URI."""
    if isinstance(location, Storage):
        return location
    text = str(location)
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in ("", "file"):
        return LocalStorage(text)
    raise HoodieConfigError(
        f"{text}: storage scheme {scheme + '://'!r} is not supported (local paths and file:// URIs are)"
    )
