"""Storage on an object store: S3 (and S3-compatible servers), Google Cloud Storage, Azure Blob / ADLS Gen2.

Built on `obstore` (Python bindings of the Rust `object_store` crate that hudi-rs and delta-rs use): one client for
all three clouds, taking the same option names as those readers, with the conditional writes the commit protocol
needs and pyarrow's file systems lack: create-if-absent is a PUT with `If-None-Match: *` (S3, Azure) or
`ifGenerationMatch=0` (GCS), and `put_if` replaces an object only while its ETag (generation on GCS) is the one
read (`If-Match`), which the writer lease (`lease.py`) renews with. There is no rename: every object appears in
one PUT (multipart for large data files), so a completed instant is visible at once or not at all.

Every request is counted by kind (`requests`: GET, HEAD, PUT, LIST, DELETE) in the process that makes it. Messages
name the URI and the store's answer (HTTP status and error code), with every secret option value removed.

Local copies (`local_file`, for memory-mapping) live in the storage's `LocalCache` (`local_cache.py`), named by the
object's ETag and size as the listing gives them (or a HEAD when no listing is at hand: listings of a versioned
bucket carry no version id, so the ETag alone names the content); `write_cached` keeps the bytes it PUT there under
the ETag the PUT answered, so a state file just written is never read back. Uploads spool in the same directory.
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
from .local_cache import LocalCache
from .options import CLIENT_KEYS, RETRY_KEYS, check_plain_http, redact, store_kind
from .paths import check_relative, join

# objects up to this size are read in one GET by open_input (parquet footers and column chunks then cost nothing)
WHOLE_READ_MAX = 32 << 20
# data files above this size are uploaded in parts
MULTIPART_CHUNK = 16 << 20
SPOOL_IN_MEMORY = 8 << 20

_CODE = re.compile(r"<Code>([^<]+)</Code>")
_MESSAGE = re.compile(r"<Message>([^<]+)</Message>")
_STATUS = re.compile(r"status code: (\d{3}) ([A-Za-z ]+)")
# a range read past the end: the store's answer (its status, or S3's code), never digits elsewhere in the reason (an
# error naming an endpoint's port or a request's duration in ms may hold "416")
_PAST_THE_END = re.compile(r"(?:^|: )416 Range Not Satisfiable\b|\bInvalidRange\b")
# answers refusing the credentials (S3 codes; a 401 or 403 from any store)
_REFUSED = re.compile(
    r"\b(401|403)\b|AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|InvalidToken|ExpiredToken|InvalidClientTokenId"
)


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


def endpoint_of(kind, uri, options):
    """The endpoint a store's requests go to, as messages name it: the configured one (a URL's user info left out),
    else the store's public endpoint."""
    for key in ("aws_endpoint_url", "aws_endpoint", "google_endpoint", "azure_endpoint"):
        if options.get(key):
            return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1", str(options[key]).rstrip("/"))
    if kind == "s3":
        return f"https://s3.{options.get('aws_region') or 'us-east-1'}.amazonaws.com"
    if kind == "gcs":
        return "https://storage.googleapis.com"
    if str(options.get("azure_storage_use_emulator", "")).lower() == "true":
        return "http://127.0.0.1:10000"
    rest = uri.split("://", 1)[1]
    if "@" in rest.split("/", 1)[0]:  # abfss://container@account.dfs.core.windows.net
        return "https://" + rest.split("/", 1)[0].split("@", 1)[1]
    account = options.get("azure_storage_account_name") or rest.split("/", 1)[0]
    return f"https://{account.split('.', 1)[0]}.blob.core.windows.net"


class _RangeReader(io.RawIOBase):
    """obstore's ReadableFile (range GETs through a buffer) as the raw file pyarrow's PythonFile needs."""

    def __init__(self, reader, on_read, on_error):
        super().__init__()
        self._reader = reader
        self._on_read = on_read
        self._on_error = on_error  # the HoodieError of a failed range GET (ObjectStorage._fail)

    def readable(self):
        return True

    def seekable(self):
        return True

    def readinto(self, buffer):
        try:
            data = self._reader.read(len(buffer))
        except Exception as exc:
            raise self._on_error(exc) from None
        n = len(data)
        memoryview(buffer).cast("B")[:n] = memoryview(data)
        self._on_read(n)
        return n

    def seek(self, offset, whence=io.SEEK_SET):
        try:
            return self._reader.seek(offset, whence)
        except Exception as exc:
            raise self._on_error(exc) from None

    def tell(self):
        return self._reader.tell()

    def close(self):
        if not self.closed:
            self._reader.close()
        super().close()


class ObjectStorage(Storage):
    """A storage rooted at `s3://bucket/prefix` (or `s3a://`), `gs://bucket/prefix`, `abfs[s]://container@account
    .dfs.core.windows.net/prefix` or `az://account/container/prefix`, with resolved storage options."""

    def __init__(self, uri: str, options: dict[str, str] | None = None, local_cache: LocalCache | None = None):
        self.kind = store_kind(uri)
        if self.kind not in ("s3", "gcs", "azure"):
            raise HoodieConfigError(f"{uri}: not an object store URI")
        self.uri = uri.rstrip("/")
        self.options = dict(options or {})
        self.local_cache = local_cache or LocalCache()
        self._store = None
        self.requests: collections.Counter[str] = collections.Counter()

    def __reduce__(self):
        return (type(self), (self.uri, self.options, self.local_cache))

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
                check_plain_http(self.uri, self.options)
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
        at = redact(f"endpoint {endpoint_of(self.kind, self.uri, self.options)}", self.options)
        if "NoSuchBucket" in text or "ContainerNotFound" in text or "bucket does not exist" in text.lower():
            return HoodieStorageError(where, f"{op} failed: the bucket does not exist ({self._reason(exc)}; {at})")
        if isinstance(exc, FileNotFoundError):  # obstore raises its NotFoundError as one
            return HoodieObjectNotFoundError(where, "does not exist")
        if isinstance(exc, oe.AlreadyExistsError):
            return HoodieObjectExistsError(where, "already exists; refusing to overwrite it")
        if isinstance(exc, oe.PreconditionError):
            return HoodieObjectChangedError(where, "changed since it was read; not replaced")
        reason = self._reason(exc)
        if isinstance(exc, (oe.PermissionDeniedError, oe.UnauthenticatedError)) or _REFUSED.search(reason):
            return HoodieStorageError(where, f"{op} refused: {reason} ({at}; check the credentials in storage_options)")
        if op == "stat" and reason.startswith("400") and not _CODE.search(text):
            # a HEAD answer has no body to name the error: S3 refuses an invalid or expired session token so
            return HoodieStorageError(
                where,
                f"{op} refused: {reason}, without a reason (the answer to a HEAD has none; an invalid or expired "
                f"session token is refused so): check the credentials in storage_options ({at})",
            )
        return HoodieStorageError(where, f"{op} failed: {reason} ({at})")

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
        return bytes(self._call("GET", "read", path, _get, self._key(path))[0])

    def read_range(self, path, offset, length):
        import obstore

        if length <= 0:
            return b""
        try:
            return bytes(
                self._call("GET", "read", path, obstore.get_range, self._key(path), start=offset, length=length)
            )
        except HoodieStorageError as err:
            if _PAST_THE_END.search(err.reason):  # past the end, as a local file reads
                return b""
            raise

    def read_version(self, path):
        data, meta = self._call("GET", "read", path, _get, self._key(path))
        return bytes(data), _version(meta)

    def open_input(self, path):
        """The object in memory (one GET) when it is small, else a seekable reader issuing range GETs."""
        import obstore
        import pyarrow as pa

        size = self.size(path)
        if size <= WHOLE_READ_MAX:
            data, _meta = self._call("GET", "read", path, _get, self._key(path))
            return pa.BufferReader(pa.py_buffer(memoryview(data)))
        buffer = 4 << 20
        try:
            reader = obstore.open_reader(self.store, self._key(path), buffer_size=buffer)
        except Exception as exc:
            raise self._fail(exc, path, "read") from None

        def count(n):  # one ranged GET per buffer refill
            self.requests["GET"] += max(1, -(-n // buffer)) if n else 0

        def failed(exc):
            return self._fail(exc, path, "read")

        raw = _RangeReader(reader, count, failed)
        return pa.PythonFile(io.BufferedReader(raw, buffer_size=1 << 20), mode="r")

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

    def list(self, path="", recursive=False, start_after=None, temp=False):  # puts are atomic: no temp objects
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
            FileInfo(meta["path"], int(meta["size"]), meta["last_modified"].timestamp(), _version(meta))
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
        self._key(path)
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY, dir=self.local_cache.spool_dir()) as spool:
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
        self.local_cache.discard(self.uri, [path])
        return True

    def delete_many(self, paths):
        """Bulk deletes: one request per 1000 objects on S3 (DeleteObjects; a missing key is no error there), per
        256 on Azure (a blob batch), one per object on GCS; a store that refuses to delete a missing object has the
        batch deleted again one object at a time, the missing ones skipped."""
        import obstore

        keys = sorted({self._key(p) for p in paths})
        per_request = {"s3": 1000, "azure": 256}.get(self.kind, 1)
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            self.requests["DELETE"] += -(-len(batch) // per_request) - 1
            try:
                self._call("DELETE", "delete", batch[0], obstore.delete, batch)
            except HoodieObjectNotFoundError:
                for key in batch:
                    try:
                        self._call("DELETE", "delete", key, obstore.delete, key)
                    except HoodieObjectNotFoundError:
                        pass
        self.local_cache.discard(self.uri, keys)

    def delete_tree(self, path):
        if not self._key(path):
            raise HoodieStorageError(self.uri, "refusing to delete the whole root")
        self.delete_many(info.path for info in self.list(path, recursive=True))
        self.local_cache.discard_tree(self.uri, path)

    # -- local copies ----------------------------------------------------------------------------------------
    def local_file(self, path, info=None):
        """A local copy of the object (see the module docstring): the one named by `info`'s version and size
        (from a listing of this storage), else by a HEAD's; fetched when there is none, and then named by the
        version the GET answered."""
        if info is None:
            meta = self.head(path)
            version, size = _version(meta), int(meta["size"])
        else:
            version, size = info.version, info.size
        found = self.local_cache.lookup(self.uri, path, _content_tag(version), size)
        if found is not None:
            return found
        data, version = self.read_version(path)
        return self.local_cache.place(self.uri, path, _content_tag(version), data)

    def write_cached(self, path, data):
        data = _joined(data)
        version = self._put(path, data, create=False)
        return self.local_cache.place(self.uri, path, _content_tag(version), data)

    def with_local_cache(self, cache):
        return ObjectStorage(self.uri, self.options, cache)

    # -- navigation ------------------------------------------------------------------------------------------
    def child(self, path):
        key = self._key(path)
        return ObjectStorage(join(self.uri, key) if key else self.uri, self.options, self.local_cache)


def _get(store, key):
    """(the object's bytes, obstore's Bytes, and its metadata): the GET and the reading of its body, whose failure
    (the network cut while the body arrives) is the request's."""
    import obstore

    result = obstore.get(store, key)
    return result.bytes(), result.meta


def _put_file(store, key, spool, chunk_size):
    import obstore

    return obstore.put(store, key, spool, use_multipart=True, chunk_size=chunk_size)


def _version(meta) -> str:
    """The version token of an object: its ETag, and its generation/version where the store has one (S3 answers
    some writes to an unversioned bucket with the version "null", which its listings leave out)."""
    version = meta.get("version")
    return f"{meta.get('e_tag') or ''}|{'' if version in (None, 'null') else version}"


def _content_tag(version: str) -> str:
    """What names an object's content in a version token: its ETag (the whole token when the store gives none)."""
    return version.partition("|")[0] or version


def _joined(data: bytes | bytearray | memoryview | Iterable[bytes]) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):  # obstore takes bytes (a memoryview it would iterate)
        return bytes(data)
    return b"".join(data)
