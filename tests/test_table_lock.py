"""The writer lease (`format/table/lock.py`): one writer at a time, taken over when its holder died.

The oracle is the lock object itself (Hudi's storage-based lock document: expired / validUntil / owner) and the
behaviour a second writer sees: refused within the wait time with the holder named, or taking over a lease that
expired or whose process is gone. Runs on a local table here; tests/test_object_storage_lock.py runs the same
protocol against the S3 server.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from hoodie_stream.errors import HoodieLockError
from hoodie_stream.format.table.lock import LOCK_PATH, Holder, TableLease
from hoodie_stream.options import LockOptions
from hoodie_stream.storage import storage_for

FAST = LockOptions(validity_timeout_secs=3, renew_interval_secs=0.5, wait_time_ms=400)


def lock_document(storage):
    return json.loads(storage.read(LOCK_PATH))


def foreign_document(valid_until_ms, expired=False):
    owner = f"hoodie-stream id=abc query=q-other host=other-host pid=4242 start=1 since={valid_until_ms - 3000}"
    return json.dumps({"expired": expired, "validUntil": valid_until_ms, "owner": owner}).encode()


@pytest.fixture
def storage(tmp_path):
    return storage_for(str(tmp_path / "table"))


def test_the_lock_object_is_hudis_document(storage):
    lease = TableLease(storage, FAST, "q-1")
    lease.acquire()
    try:
        doc = lock_document(storage)
        assert set(doc) == {"expired", "validUntil", "owner"}
        assert doc["expired"] is False
        assert 2500 < doc["validUntil"] - time.time() * 1000 <= 3000
        holder = Holder.parse(doc["owner"])
        assert (holder.query, holder.pid) == ("q-1", os.getpid())
    finally:
        lease.release()
    assert lock_document(storage)["expired"] is True


def test_a_second_writer_is_refused_within_the_wait_time_with_the_holder_named(storage):
    first = TableLease(storage, FAST, "query-one")
    first.acquire()
    try:
        second = TableLease(storage, FAST, "query-two")
        started = time.monotonic()
        with pytest.raises(HoodieLockError) as err:
            second.acquire()
        waited = time.monotonic() - started
        assert 0.4 <= waited < 1.5
        message = str(err.value)
        assert "query-one" in message and "pid" in message and "since" in message
        assert storage.uri in message
        assert Holder.parse(lock_document(storage)["owner"]).query == "query-one"  # untouched
    finally:
        first.release()


def test_a_released_lease_is_taken_at_once(storage):
    first = TableLease(storage, FAST, "a")
    first.acquire()
    first.release()
    second = TableLease(storage, FAST, "b")
    second.acquire()
    assert Holder.parse(lock_document(storage)["owner"]).query == "b"
    second.release()


def test_a_valid_lease_of_another_host_is_respected(storage):
    storage.create(LOCK_PATH, foreign_document(int(time.time() * 1000) + 60_000))
    with pytest.raises(HoodieLockError, match="q-other on host other-host"):
        TableLease(storage, FAST, "mine").acquire()


def test_an_expired_lease_of_another_host_is_taken_over(storage, caplog):
    storage.create(LOCK_PATH, foreign_document(int(time.time() * 1000) - 1))
    lease = TableLease(storage, FAST, "mine")
    with caplog.at_level(logging.WARNING, logger="hoodie_stream"):
        lease.acquire()
    assert Holder.parse(lock_document(storage)["owner"]).query == "mine"
    assert "took over the lease of streaming query q-other on host other-host" in caplog.text
    lease.release()


def test_renewal_keeps_the_lease_and_a_lost_lease_refuses_to_commit(storage):
    lease = TableLease(storage, FAST, "renewing")
    lease.acquire()
    first_until = lock_document(storage)["validUntil"]
    time.sleep(1.2)  # two renewals
    assert lock_document(storage)["validUntil"] > first_until
    lease.ensure()
    # another writer replaces the object (as a takeover after this writer stalled past validUntil would)
    _, version = storage.read_version(LOCK_PATH)
    storage.put_if(LOCK_PATH, foreign_document(int(time.time() * 1000) + 60_000), version)
    time.sleep(0.8)
    with pytest.raises(HoodieLockError, match="lost the table's lease"):
        lease.ensure()
    lease.release()  # does not overwrite the new holder's object
    assert Holder.parse(lock_document(storage)["owner"]).host == "other-host"


def test_of_writers_racing_for_an_expired_lease_exactly_one_wins(storage):
    storage.create(LOCK_PATH, foreign_document(int(time.time() * 1000) - 1))
    opts = LockOptions(validity_timeout_secs=30, renew_interval_secs=10, wait_time_ms=0)
    leases = [TableLease(storage, opts, f"racer-{i}") for i in range(8)]
    outcomes = {}
    barrier = threading.Barrier(len(leases))

    def race(lease):
        barrier.wait()
        try:
            lease.acquire()
            outcomes[lease.query] = "won"
        except HoodieLockError:
            outcomes[lease.query] = "refused"

    threads = [threading.Thread(target=race, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [q for q, o in outcomes.items() if o == "won"]
    assert len(winners) == 1
    assert Holder.parse(lock_document(storage)["owner"]).query == winners[0]
    for lease in leases:
        lease.release()


def test_a_killed_holder_on_this_host_is_taken_over_at_once(storage, tmp_path):
    """A holder SIGKILLed while holding the lease: its pid is gone, so a writer on the same host takes over
    without waiting for the validity timeout."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from hoodie_stream.format.table.lock import TableLease
        from hoodie_stream.options import LockOptions
        from hoodie_stream.storage import storage_for
        lease = TableLease(storage_for({storage.uri!r}), LockOptions(validity_timeout_secs=600), "doomed")
        lease.acquire()
        print("held", flush=True)
        time.sleep(600)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(HoodieLockError, match="doomed"):
            TableLease(storage, FAST, "waiting").acquire()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        lease = TableLease(storage, FAST, "successor")
        started = time.monotonic()
        lease.acquire()
        assert time.monotonic() - started < 0.5  # not the 600 s validity timeout
        assert Holder.parse(lock_document(storage)["owner"]).query == "successor"
        lease.release()
    finally:
        if child.poll() is None:
            child.kill()
