"""Storage on an object store: S3 (and S3-compatible servers), Google Cloud Storage, Azure Blob / ADLS Gen2.

Built on `obstore` (Python bindings of the Rust `object_store` crate that hudi-rs and delta-rs use): one client for
all three clouds, taking the same option names as those readers, with the conditional writes the commit protocol
needs and pyarrow's file systems lack: create-if-absent is a PUT with `If-None-Match: *` (S3, Azure) or
`ifGenerationMatch=0` (GCS), and `put_if` replaces an object only while its ETag (generation on GCS) is the one
read (`If-Match`), which the writer lease (`lease.py`) renews with. There is no rename: every object appears in
one PUT (multipart for large data files), so a completed instant is visible at once or not at all.

Every request is counted by kind (`requests`: GET, HEAD, PUT, LIST, DELETE) in the process that makes it. Messages
name the URI and the store's answer (HTTP status and error code), with every secret option value removed.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import io
import re
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Any

from ..errors import (
    HoodieConfigError,
    HoodieObjectChangedError,
    HoodieObjectExistsError,
    HoodieObjectNotFoundError,
    HoodieStorageError,
)
from .base import FileInfo, Storage
from .options import CLIENT_KEYS, RETRY_KEYS, redact, store_kind
from .paths import check_relative, join

# objects up to this size are read in one GET by open_input (parquet footers and column chunks then cost nothing)
WHOLE_READ_MAX = 32 << 20
# data files above this size are uploaded in parts
MULTIPART_CHUNK = 16 << 20
SPOOL_IN_MEMORY = 8 << 20

_CODE = re.compile(r"<Code>([^<]+)</Code>")
_MESSAGE = re.compile(r"<Message>([^<]+)</Message>")
_STATUS = re.compile(r"status code: (\d{3}) ([A-Za-z ]+)")


# client options taking a duration: "30s", "500ms", "2m" (humantime, as obstore takes them) or seconds as a number
DURATION_KEYS = frozenset(
    {
        "connect_timeout",
        "timeout",
        "read_timeout",
        "pool_idle_timeout",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
        "retry_timeout",
    }
)
_DURATION = re.compile(r"^\s*(\d+(\.\d+)?)\s*(ns|us|ms|s|sec|secs|m|min|mins|h|hr|hrs|d)?\s*$")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "m": 60, "min": 60, "mins": 60, "h": 3600, "hr": 3600}
_UNIT_SECONDS.update({"hrs": 3600, "d": 86400})


def _duration(key, value):
    """A duration option as a timedelta; a number without a unit is seconds."""
    if isinstance(value, datetime.timedelta):
        return value
    match = _DURATION.match(str(value))
    if not match:
        raise HoodieConfigError(
            f"storage option {key!r}: {value!r} is not a duration (e.g. '30s', '500ms', '2m', or seconds as a number)"
        )
    return datetime.timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS.get(match.group(3) or "s", 1))


def _client_settings(options):
    """(store config, client options, retry config) for obstore from resolved storage options; malformed
    durations and retry counts raise HoodieConfigError naming the option."""
    config: dict[str, Any] = {}
    client: dict[str, Any] = {}
    retry: dict[str, Any] = {}
    for key, value in options.items():
        bare = key.split("_", 1)[1] if "_" in key and key.split("_", 1)[0] in ("aws", "google", "azure") else key
        if key in RETRY_KEYS:
            if key == "max_retries":
                try:
                    retry[key] = int(str(value).strip())
                except ValueError:
                    raise HoodieConfigError(f"storage option 'max_retries': {value!r} is not a whole number") from None
                if retry[key] < 0:
                    raise HoodieConfigError(f"storage option 'max_retries': {value!r} is negative")
            else:
                retry[key] = _duration(key, value)
        elif key in CLIENT_KEYS or (bare in CLIENT_KEYS and bare != key):
            client[bare] = _duration(key, value) if bare in DURATION_KEYS else value
        elif key == "aws_endpoint_url":
            config["aws_endpoint"] = value
        else:
            config[key] = value
    return config, client, retry


class _RangeReader(io.RawIOBase):
    """obstore's ReadableFile (range GETs through a buffer) as the raw file pyarrow's PythonFile needs."""

    def __init__(self, reader, on_read):
        super().__init__()
        self._reader = reader
        self._on_read = on_read

    def readable(self):
        return True

    def seekable(self):
        return True

    def readinto(self, buffer):
        data = self._reader.read(len(buffer))
        n = len(data)
        memoryview(buffer).cast("B")[:n] = memoryview(data)
        self._on_read(n)
        return n

    def seek(self, offset, whence=io.SEEK_SET):
        return self._reader.seek(offset, whence)

    def tell(self):
        return self._reader.tell()

    def close(self):
        if not self.closed:
            self._reader.close()
        super().close()


class ObjectStorage(Storage):
    """A storage rooted at `s3://bucket/prefix` (or `s3a://`), `gs://bucket/prefix`, `abfs[s]://container@account
    .dfs.core.windows.net/prefix` or `az://account/container/prefix`, with resolved storage options."""

    def __init__(self, uri: str, options: dict[str, str] | None = None):
        self.kind = store_kind(uri)
        if self.kind not in ("s3", "gcs", "azure"):
            raise HoodieConfigError(f"{uri}: not an object store URI")
        self.uri = uri.rstrip("/")
        self.options = dict(options or {})
        self._store = None
        self.requests: collections.Counter[str] = collections.Counter()

    def __reduce__(self):
        return (type(self), (self.uri, self.options))

    def __eq__(self, other):
        return type(other) is type(self) and other.uri == self.uri and other.options == self.options

    def __hash__(self):
        return hash((type(self), self.uri))

    def __repr__(self):  # the URI only: options hold secrets
        return f"ObjectStorage({self.uri!r})"

    # -- the client ------------------------------------------------------------------------------------------
    @property
    def store(self):
        if self._store is None:
            from obstore.store import from_url

            try:
                config, client, retry = _client_settings(self.options)
            except HoodieConfigError as err:
                raise HoodieConfigError(f"{self.uri}: {err}") from None
            try:
                self._store = from_url(self.uri, config=config, client_options=client, retry_config=retry or None)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # an unknown key or a malformed URL; pyo3 panics are BaseExceptions
                raise HoodieConfigError(f"{self.uri}: {self._reason(exc)}") from None
        return self._store

    def _reason(self, exc):
        text = str(exc)
        code = _CODE.search(text)
        status = _STATUS.search(text)
        message = _MESSAGE.search(text)
        if status or code:
            parts = []
            if status:
                parts.append(f"{status.group(1)} {status.group(2).strip()}")
            if code:
                parts.append(code.group(1))
            reason = " ".join(parts) + (f" ({message.group(1)})" if message else "")
        else:
            reason = (
                text.split("\n\nDebug source:", 1)[0].strip().splitlines()[0] if text.strip() else type(exc).__name__
            )
        return redact(f"{reason}", self.options)

    def _fail(self, exc, path, op):
        """The HoodieError for a failed request (raised by the caller with `from None`: obstore's own text may
        carry request details)."""
        import obstore.exceptions as oe

        where = self.uri_of(path)
        text = str(exc)
        if "NoSuchBucket" in text or "ContainerNotFound" in text or "bucket does not exist" in text.lower():
            return HoodieStorageError(where, f"{op} failed: the bucket does not exist ({self._reason(exc)})")
        if isinstance(exc, FileNotFoundError):  # obstore raises its NotFoundError as one
            return HoodieObjectNotFoundError(where, "does not exist")
        if isinstance(exc, oe.AlreadyExistsError):
            return HoodieObjectExistsError(where, "already exists; refusing to overwrite it")
        if isinstance(exc, oe.PreconditionError):
            return HoodieObjectChangedError(where, "changed since it was read; not replaced")
        reason = self._reason(exc)
        if isinstance(exc, (oe.PermissionDeniedError, oe.UnauthenticatedError)) or re.search(
            r"\b(401|403)\b|AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch", reason
        ):
            return HoodieStorageError(where, f"{op} refused: {reason} (check the credentials in storage_options)")
        return HoodieStorageError(where, f"{op} failed: {reason}")

    def _call(self, kind, op, path, fn, *args, **kwargs):
        self.requests[kind] += 1
        try:
            return fn(self.store, *args, **kwargs)
        except Exception as exc:
            if isinstance(exc, (HoodieStorageError, HoodieConfigError)):
                raise
            raise self._fail(exc, path, op) from None

    @staticmethod
    def _key(path):
        return check_relative(path)

    # -- reading ---------------------------------------------------------------------------------------------
    def read(self, path):
        import obstore

        result = self._call("GET", "read", path, obstore.get, self._key(path))
        return bytes(result.bytes())

    def read_range(self, path, offset, length):
        import obstore

        if length <= 0:
            return b""
        try:
            return bytes(
                self._call("GET", "read", path, obstore.get_range, self._key(path), start=offset, length=length)
            )
        except HoodieStorageError as err:
            if "416" in err.reason or "InvalidRange" in err.reason:  # past the end, as a local file reads
                return b""
            raise

    def read_version(self, path):
        import obstore

        result = self._call("GET", "read", path, obstore.get, self._key(path))
        meta = result.meta
        return bytes(result.bytes()), _version(meta)

    def open_input(self, path):
        """The object in memory (one GET) when it is small, else a seekable reader issuing range GETs."""
        import obstore
        import pyarrow as pa

        size = self.size(path)
        if size <= WHOLE_READ_MAX:
            data = self._call("GET", "read", path, obstore.get, self._key(path)).bytes()
            return pa.BufferReader(pa.py_buffer(memoryview(data)))
        buffer = 4 << 20
        try:
            reader = obstore.open_reader(self.store, self._key(path), buffer_size=buffer)
        except Exception as exc:
            raise self._fail(exc, path, "read") from None

        def count(n):  # one ranged GET per buffer refill
            self.requests["GET"] += max(1, -(-n // buffer)) if n else 0

        return pa.PythonFile(io.BufferedReader(_RangeReader(reader, count), buffer_size=1 << 20), mode="r")

    def head(self, path):
        import obstore

        return self._call("HEAD", "stat", path, obstore.head, self._key(path))

    def exists(self, path):
        """An object at `path`, or objects under it (a directory)."""
        import obstore

        key = self._key(path)
        if key:
            try:
                self.head(key)
                return True
            except HoodieObjectNotFoundError:
                pass
        listing = self._call("LIST", "list", path, obstore.list_with_delimiter, key or None)
        return bool(listing["objects"] or listing["common_prefixes"])

    def size(self, path):
        return int(self.head(path)["size"])

    def list(self, path="", recursive=False, start_after=None):
        import obstore

        key = self._key(path)
        prefix = key + "/" if key else ""
        found = []
        if recursive or start_after is not None:  # from an offset: listed without a delimiter, children kept
            offset = None if start_after is None else self._key(start_after)
            try:
                for batch in obstore.list(self.store, key or None, offset=offset, chunk_size=1000):
                    found.extend(batch)
            except Exception as exc:
                raise self._fail(exc, path, "list") from None
            self.requests["LIST"] += max(1, -(-len(found) // 1000))  # one request per page of 1000
            if not recursive:
                found = [meta for meta in found if "/" not in meta["path"][len(prefix) :]]
        else:
            listing = self._call("LIST", "list", path, obstore.list_with_delimiter, key or None)
            found = listing["objects"]
            self.requests["LIST"] += max(0, (len(found) + len(listing["common_prefixes"]) - 1) // 1000)
        out = [
            FileInfo(meta["path"], int(meta["size"]), meta["last_modified"].timestamp())
            for meta in found
            if meta["path"].startswith(prefix) and meta["path"] != key
        ]
        out.sort(key=lambda f: f.path)
        return out

    def list_dirs(self, path=""):
        import obstore

        key = self._key(path)
        listing = self._call("LIST", "list", path, obstore.list_with_delimiter, key or None)
        names = [p.rstrip("/").rpartition("/")[2] for p in listing["common_prefixes"]]
        return sorted(n for n in names if n)

    # -- writing ---------------------------------------------------------------------------------------------
    def _put(self, path, data, create, version=None):
        import obstore

        key = self._key(path)
        if not key:
            raise HoodieStorageError(self.uri, "the root is a prefix; it cannot be written as an object")
        if create:
            mode: Any = "create"
        elif version is not None:
            e_tag, _, ver = version.partition("|")
            mode = {k: v for k, v in (("e_tag", e_tag), ("version", ver)) if v}
        else:
            mode = "overwrite"
        size = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else None
        multipart = mode == "overwrite" and (size is None or size > MULTIPART_CHUNK)
        parts = 1 if not multipart or size is None else 2 + -(-size // MULTIPART_CHUNK)
        self.requests["PUT"] += parts - 1
        result = self._call(
            "PUT",
            "write",
            path,
            obstore.put,
            key,
            data,
            mode=mode,
            use_multipart=multipart,
            chunk_size=MULTIPART_CHUNK,
        )
        return _version(result)

    def write(self, path, data):
        data = _joined(data)
        self._put(path, data, create=False)
        return len(data)

    def create(self, path, data=b""):
        data = _joined(data)
        self._put(path, data, create=True)
        return len(data)

    def put_if(self, path, data, version):
        return self._put(path, _joined(data), create=version is None, version=version)

    @contextlib.contextmanager
    def open_output(self, path, create=False) -> Iterator[IO[bytes]]:
        """A local spool file (in memory up to 8 MB, then in the cache directory) uploaded when the block ends."""
        from .local_cache import spool_dir

        self._key(path)
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY, dir=spool_dir()) as spool:
            yield spool
            spool.flush()
            size = spool.tell()
            spool.seek(0)
            if create or size <= MULTIPART_CHUNK:
                self._put(path, spool.read(), create=create)
            else:
                self.requests["PUT"] += 1 + -(-size // MULTIPART_CHUNK)
                self._call("PUT", "write", path, _put_file, self._key(path), spool, chunk_size=MULTIPART_CHUNK)

    def delete(self, path):
        import obstore

        try:
            self.head(path)
        except HoodieObjectNotFoundError:
            return False
        self._call("DELETE", "delete", path, obstore.delete, self._key(path))
        return True

    def delete_tree(self, path):
        import obstore

        if not self._key(path):
            raise HoodieStorageError(self.uri, "refusing to delete the whole root")
        keys = [info.path for info in self.list(path, recursive=True)]
        for start in range(0, len(keys), 1000):
            self._call("DELETE", "delete", path, obstore.delete, keys[start : start + 1000])

    # -- navigation ------------------------------------------------------------------------------------------
    def child(self, path):
        key = self._key(path)
        child = ObjectStorage(join(self.uri, key) if key else self.uri, self.options)
        return child


def _put_file(store, key, spool, chunk_size):
    import obstore

    return obstore.put(store, key, spool, use_multipart=True, chunk_size=chunk_size)


def _version(meta) -> str:
    """The version token of an object: its ETag, and its generation/version where the store has one."""
    return f"{meta.get('e_tag') or ''}|{meta.get('version') or ''}"


def _joined(data: bytes | bytearray | memoryview | Iterable[bytes]) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):  # obstore takes bytes (a memoryview it would iterate)
        return bytes(data)
    return b"".join(data)
