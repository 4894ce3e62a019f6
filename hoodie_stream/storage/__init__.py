"""The storage layer: the only code that touches files (see `base.Storage`).

`storage_for(location, storage_options)` gives the storage of a table path or URI: a plain path or `file://` URI
is a `LocalStorage`; `s3://`, `s3a://`, `gs://`, `abfs[s]://` and `az://` URIs an `ObjectStorage` (obstore);
`hdfs://` is refused with the reason; a `Storage` passed in is used as it is.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import HoodieConfigError
from .base import FileInfo, Storage
from .local import LocalStorage
from .options import resolve, store_kind
from .paths import check_relative, check_segment, join, split

__all__ = ["FileInfo", "LocalStorage", "Storage", "check_relative", "check_segment", "join", "split", "storage_for"]


def storage_for(
    location: str | Storage,
    storage_options: Mapping[str, object] | None = None,
    fallback_options: Mapping[str, object] | None = None,
) -> Storage:
    """The storage rooted at `location`: a Storage (returned as it is), a local path or `file://` URI, or an
    object store URI (`s3://`, `s3a://`, `gs://`, `abfs://`, `abfss://`, `az://`) with its options resolved from
    `storage_options`, the environment and `fallback_options` (see `options.resolve`). Other schemes are refused
    (HoodieConfigError) before anything is touched."""
    if isinstance(location, Storage):
        return location
    text = str(location)
    kind = store_kind(text)
    options = resolve(text, storage_options, fallback_options)
    if kind == "local":
        return LocalStorage(text)
    if kind == "hdfs":
        raise HoodieConfigError(
            f"{text}: hdfs:// tables are not supported yet: the commit protocol needs an exclusive create, which "
            "pyarrow's HadoopFileSystem does not offer (its move overwrites); mount the file system (NFS gateway, "
            "FUSE) and give a local path"
        )
    from .object_store import ObjectStorage

    return ObjectStorage(text, options)
