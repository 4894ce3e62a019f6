"""The writer lease: one writer at a time per table, kept as Hudi's storage-based lock provider keeps it.

One object, `.hoodie/.locks/table_lock.json`, holds `{"expired": bool, "validUntil": epoch ms, "owner": text}`.
A writer takes the lease by creating the object if absent, or, when the object says `expired` or its
`validUntil` has passed (its holder stopped renewing: it died), by replacing it conditionally on the version it
read (ETag / generation on object stores, the inode on local disk): of two writers racing for it, one wins. The
holder renews it every `renew_interval` seconds with the same conditional write, pushing `validUntil` forward by
`validity_timeout`; it releases the lease by writing `expired: true` (conditionally too). A holder whose renewal
fails has lost the lease and must not commit: `ensure()` raises before each commit.

The owner text names the holder for the error a second writer gets: the streaming query id, the host, the process
and since when. A holder on the same host whose process is gone is taken over at once (its pid no longer runs the
same process); one elsewhere only once its lease expired.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ...errors import HoodieLockError, HoodieObjectChangedError, HoodieObjectExistsError, HoodieObjectNotFoundError
from ...storage import Storage

log = logging.getLogger("hoodie_stream")

LOCK_PATH = ".hoodie/.locks/table_lock.json"
_OWNER_PREFIX = "hoodie-stream "


def _now_ms() -> int:
    return int(time.time() * 1000)


def _process_start(pid: int) -> str:
    """The start time of a process (clock ticks since boot, /proc), to tell a reused pid from the holder."""
    try:  # the process table, not a file of the table
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: parsed from the lock object's owner text."""

    owner: str
    query: str = ""
    host: str = ""
    pid: int = 0
    start: str = ""
    since_ms: int = 0

    @classmethod
    def mine(cls, query: str, lease_id: str) -> Holder:
        pid = os.getpid()
        host = socket.gethostname()
        since = _now_ms()
        start = _process_start(pid)
        fields = {"id": lease_id, "query": query or "-", "host": host, "pid": pid, "start": start, "since": since}
        owner = _OWNER_PREFIX + " ".join(f"{k}={v}" for k, v in fields.items())
        return cls(owner, query, host, pid, start, since)

    @classmethod
    def parse(cls, owner: str) -> Holder:
        if not owner.startswith(_OWNER_PREFIX):
            return cls(owner)
        fields = dict(part.split("=", 1) for part in owner[len(_OWNER_PREFIX) :].split() if "=" in part)
        try:
            return cls(
                owner,
                fields.get("query", ""),
                fields.get("host", ""),
                int(fields.get("pid", "0")),
                fields.get("start", ""),
                int(fields.get("since", "0")),
            )
        except ValueError:
            return cls(owner)

    def describe(self) -> str:
        if not self.host:
            return f"owner {self.owner!r}"
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since_ms / 1000))
        query = f"streaming query {self.query}" if self.query not in ("", "-") else "a writer outside a streaming query"
        return f"{query} on host {self.host} (pid {self.pid}), holding it since {since}"

    def is_dead_here(self) -> bool:
        """True when the holder ran on this host and its process is gone."""
        if not self.host or self.host != socket.gethostname() or not self.pid:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return bool(self.start) and _process_start(self.pid) not in ("", self.start)


def _document(expired: bool, valid_until_ms: int, owner: str) -> bytes:
    return json.dumps({"expired": expired, "validUntil": valid_until_ms, "owner": owner}).encode("utf-8")


def _parse(data: bytes, where: str) -> tuple[bool, int, str]:
    try:
        doc = json.loads(data.decode("utf-8"))
        return bool(doc["expired"]), int(doc["validUntil"]), str(doc["owner"])
    except (ValueError, KeyError, TypeError):
        log.warning("%s: unreadable lock object; treating it as expired", where)
        return True, 0, ""


class TableLease:
    """The lease of one table for one writer (a sink, or an offline compaction/clean run).

    `acquire()` waits up to `wait_time_ms` for a lease another writer holds, then raises HoodieLockError naming
    the holder; `ensure()` before each commit; `release()` when done. Acquires nest (a micro-batch and the
    compaction thread of the same sink hold it together): the lease is given back when the last holder releases
    it. A daemon thread renews it while held.
    """

    def __init__(self, storage: Storage, options, query: str = "") -> None:
        self.configure(storage, options)
        self.query = query
        self.lease_id = uuid.uuid4().hex[:12]
        self.holder: Holder | None = None
        self._version: str | None = None
        self._valid_until = 0
        self._lost: str | None = None
        self._lock = threading.Lock()
        self._holds = 0
        self._holds_lock = threading.RLock()
        self.remove_on_release = False  # set while the location holds nothing but the lease (see release)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def configure(self, storage: Storage, options) -> None:
        """The storage and the lock options (validity, renewal, wait) this lease is taken with."""
        self.storage = storage
        self.validity_ms = int(options.validity_timeout_secs * 1000)
        self.renew_s = float(options.renew_interval_secs)
        self.wait_ms = int(options.wait_time_ms)

    def __getstate__(self):
        raise TypeError("a TableLease stays on the driver that holds it")

    @property
    def held(self) -> bool:
        return self.holder is not None and self._lost is None

    def where(self) -> str:
        return self.storage.uri_of(LOCK_PATH)

    # -- taking it -------------------------------------------------------------------------------------------
    def acquire(self, query: str | None = None) -> None:
        with self._holds_lock:
            if self._holds:
                self.ensure()  # raises when the lease was lost
                self._holds += 1
                return
            if query:
                self.query = query
            self._take()
            self._holds = 1

    def _take(self) -> None:
        deadline = time.monotonic() + self.wait_ms / 1000
        delay = 0.05
        while True:
            other = self._try_take()
            if other is None:
                self._start_renewing()
                return
            if time.monotonic() >= deadline:
                raise HoodieLockError(
                    f"{self.storage.uri}: another writer holds the table's lease ({self.where()}): "
                    f"{other.describe()}; waited {self.wait_ms} ms (hoodie.write.lock.wait_time_ms). Stop the "
                    "other writer, or wait until its lease expires "
                    "(hoodie.write.lock.storage.validity.timeout.secs after its last renewal)"
                )
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)

    def _try_take(self) -> Holder | None:
        """Take the lease if it is free or its holder is gone; else the holder."""
        mine = Holder.mine(self.query, self.lease_id)
        valid_until = _now_ms() + self.validity_ms
        doc = _document(False, valid_until, mine.owner)
        try:
            version = self.storage.put_if(LOCK_PATH, doc, None)
        except HoodieObjectExistsError:
            try:
                data, current = self.storage.read_version(LOCK_PATH)
            except HoodieObjectNotFoundError:
                return Holder("(released while being read)")  # retried
            expired, until, owner = _parse(data, self.where())
            holder = Holder.parse(owner)
            if holder.owner.startswith(_OWNER_PREFIX) and f"id={self.lease_id} " in holder.owner + " ":
                expired = True  # our own lease from before (e.g. released and re-acquired)
            dead = holder.is_dead_here()
            if not (expired or until < _now_ms() or dead):
                return holder
            try:
                version = self.storage.put_if(LOCK_PATH, doc, current)
            except (HoodieObjectChangedError, HoodieObjectNotFoundError):
                return holder  # another writer took it first; look again
            if not expired:
                log.warning(
                    "%s: took over the lease of %s (%s)",
                    self.storage.uri,
                    holder.describe(),
                    "its process is gone" if dead else "it was not renewed before it expired",
                )
        with self._lock:
            self.holder, self._version, self._valid_until, self._lost = mine, version, valid_until, None
        return None

    # -- keeping it ------------------------------------------------------------------------------------------
    def _start_renewing(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name="hoodie-stream-lease", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_s):
            try:
                self.renew()
            except HoodieLockError as exc:
                log.error("%s", exc)
                return
            except Exception:  # the store is unreachable: try again; ensure() refuses to commit past validUntil
                log.warning("%s: renewing the lease failed; retrying", self.storage.uri, exc_info=True)

    def renew(self) -> None:
        with self._lock:
            if self.holder is None or self._lost is not None:
                return
            valid_until = _now_ms() + self.validity_ms
            doc = _document(False, valid_until, self.holder.owner)
            try:
                self._version = self.storage.put_if(LOCK_PATH, doc, self._version)
            except (HoodieObjectChangedError, HoodieObjectNotFoundError):
                current = self._own_version(self.holder.owner)
                if current is None:
                    self._lose()
                try:
                    self._version = self.storage.put_if(LOCK_PATH, doc, current)
                except (HoodieObjectChangedError, HoodieObjectNotFoundError):
                    self._lose()
            self._valid_until = valid_until

    def _lose(self) -> NoReturn:
        self._lost = "another writer replaced the lease object (this writer's lease had expired)"
        raise HoodieLockError(f"{self.storage.uri}: lost the table's lease: {self._lost}") from None

    def _own_version(self, owner: str) -> str | None:
        """The lock object's version when it still names this holder (`owner`), unexpired: an earlier renewal of ours whose
        answer was lost (the store did the write, the connection broke before we heard) changed the version we
        knew. None when another writer holds it, or the object is gone."""
        try:
            data, current = self.storage.read_version(LOCK_PATH)
        except HoodieObjectNotFoundError:
            return None
        expired, _until, holding = _parse(data, self.where())
        if expired or holding != owner:
            return None
        log.info("%s: the lease object holds a renewal of ours whose answer was lost; keeping it", self.storage.uri)
        return current

    def ensure(self) -> None:
        """Raise HoodieLockError unless this writer holds a valid lease (renewing it now when it runs short)."""
        if self.holder is None:
            raise HoodieLockError(f"{self.storage.uri}: this writer does not hold the table's lease")
        if self._lost is not None:
            raise HoodieLockError(f"{self.storage.uri}: lost the table's lease: {self._lost}")
        if self._valid_until - _now_ms() < self.validity_ms / 2:
            self.renew()

    # -- giving it back --------------------------------------------------------------------------------------
    def release(self, remove: bool = False) -> None:
        """Give back one hold; the lease itself when it was the last: marked expired, or, with `remove` (the
        writer created nothing at the location: it is left as it was), the lock object deleted."""
        with self._holds_lock:
            if self._holds == 0:
                return
            self._holds -= 1
            if self._holds == 0:
                self._give_back(remove)

    @contextlib.contextmanager
    def hold(self, query: str | None = None) -> Iterator[TableLease]:
        self.acquire(query)
        try:
            yield self
        finally:
            self.release(self.remove_on_release)

    def _give_back(self, remove: bool = False) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        with self._lock:
            holder, self.holder = self.holder, None
            if holder is None or self._lost is not None:
                return
            released = _document(True, _now_ms(), holder.owner)
            try:
                try:
                    version = self.storage.put_if(LOCK_PATH, released, self._version)
                except HoodieObjectChangedError:
                    current = self._own_version(holder.owner)  # a renewal of ours whose answer was lost?
                    if current is None:
                        raise
                    version = self.storage.put_if(LOCK_PATH, released, current)
                if remove and self.storage.read_version(LOCK_PATH)[1] == version:
                    self.storage.delete(LOCK_PATH)  # an expired lease: whoever takes it next creates it anew
            except (HoodieObjectChangedError, HoodieObjectNotFoundError):
                log.warning("%s: the lease was taken over before it was released", self.storage.uri)
            except Exception:  # unreachable store: the lease expires by itself
                log.warning("%s: could not release the lease; it expires by itself", self.storage.uri, exc_info=True)

    def __enter__(self) -> TableLease:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


_SHARED: dict[tuple[str, str], TableLease] = {}
_SHARED_LOCK = threading.Lock()


def query_lease(storage: Storage, options, query: str) -> TableLease:
    """The lease of a table for one streaming query in this process: every sink of the query writing the table
    shares it (they are one writer: Spark runs the query's micro-batches one after the other). A query restarted
    in this process (same checkpoint, same query id) gets the same lease, so a lease object its previous run could
    not give back (the store was unreachable) is recognised as its own; while no run holds it, it takes the
    storage and lock options of the new run."""
    with _SHARED_LOCK:
        key = (storage.uri, query)
        lease = _SHARED.get(key)
        if lease is None:
            lease = _SHARED[key] = TableLease(storage, options, query)
        else:
            with lease._holds_lock:
                if not lease._holds:
                    lease.configure(storage, options)
        return lease
