"""Two writers on one table on the S3 server (tests/s3_server.py): the writer lease (`format/table/lock.py`) lets
one write at a time. A second streaming query (in another process, or in the same SparkSession: a notebook cell run
twice, with a new sink or the same one) is refused within `hoodie.write.lock.wait_time_ms`, naming the holder, while
the first goes on; a writer SIGKILLed mid-batch on another host is taken over once its lease expired, its pending
instant rolled back before anything new is written; the offline compactor waits for, or is refused by, a running
sink. Each first query's table is checked against the stream model through hudi-rs and HoodieTable."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from hoodie_stream import HoodieStreamSink
from hoodie_stream.compaction.offline import compact_table
from hoodie_stream.errors import HoodieLockError
from hoodie_stream.format.table.lock import LOCK_PATH, Holder
from hoodie_stream.storage import storage_for
from s3_stream_helpers import (
    FAST_LEASE,
    assert_only_committed_files,
    assert_table_is,
    completed_batches,
    identifier,
    pending_instants,
    sink_options,
    start_query,
    writing_instants,
)
from stream_model import TableModel, generate_batches, table_rows, write_batch_file

HERE = os.path.dirname(os.path.abspath(__file__))
WAIT_S = int(FAST_LEASE["hoodie.write.lock.wait_time_ms"]) / 1000


def lock_document(uri, options):
    return json.loads(storage_for(uri, options).read(LOCK_PATH))


def assert_names_holder(message, query_id, uri):
    """The refusal names the table, the holder's streaming query, host, process and since when."""
    assert uri in message, message
    assert f"streaming query {query_id}" in message, message
    assert f"on host {socket.gethostname()}" in message and "pid" in message and "since" in message, message
    assert "hoodie.write.lock.wait_time_ms" in message, message


def assert_released(uri, options, query_id, timeout=15):
    """The lease the query held is given back soon after it stopped (marked expired, no longer renewed)."""
    deadline = time.monotonic() + timeout
    while True:
        doc = lock_document(uri, options)
        assert Holder.parse(doc["owner"]).query == query_id
        if doc["expired"]:
            return
        assert time.monotonic() < deadline, f"the lease of stopped query {query_id} is still held: {doc}"
        time.sleep(0.1)


def refusal_of(query, timeout=60):
    """(message, seconds) of a query that must fail: its exception text and how long it ran."""
    from pyspark.errors import StreamingQueryException

    started = time.monotonic()
    with pytest.raises(StreamingQueryException) as err:
        query.awaitTermination(timeout)
    assert not query.isActive
    return str(err.value), time.monotonic() - started


# -- one SparkSession, two queries ------------------------------------------------------------------------------
@pytest.mark.parametrize("same_sink", [False, True], ids=["new-sink", "same-sink"])
def test_a_second_query_in_the_same_session_is_refused_and_the_first_goes_on(spark, s3_table, tmp_path, same_sink):
    """A notebook cell run twice: a second streaming query on the table, through a new sink or the very same sink
    object, fails on its first micro-batch naming the first query; the first query keeps writing."""
    uri, storage_options = s3_table
    batches = generate_batches(3, seed=21, keys_per_batch=12, key_space=30)
    model = TableModel()
    first_sink = HoodieStreamSink(uri, sink_options(), storage_options=storage_options)
    source1, source2 = str(tmp_path / "in1"), str(tmp_path / "in2")
    write_batch_file(source1, 0, batches[0])
    first = start_query(spark, first_sink, source1, str(tmp_path / "chk1"))
    second = None
    try:
        first.processAllAvailable()
        model.apply_batch(batches[0])

        write_batch_file(source2, 0, batches[1])
        second_sink = (
            first_sink if same_sink else HoodieStreamSink(uri, sink_options(), storage_options=storage_options)
        )
        started = time.monotonic()
        second = start_query(spark, second_sink, source2, str(tmp_path / "chk2"))
        message, _ = refusal_of(second)
        assert time.monotonic() - started >= WAIT_S, "refused before hoodie.write.lock.wait_time_ms"
        assert_names_holder(message, first.id, uri)
        assert Holder.parse(lock_document(uri, storage_options)["owner"]).query == first.id

        # the first query goes on
        write_batch_file(source1, 1, batches[2])
        first.processAllAvailable()
        model.apply_batch(batches[2])
        assert first.isActive and first.exception() is None
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert_released(uri, storage_options, first.id)
    assert_table_is(uri, storage_options, model.rows(), "after the first query's two batches")
    committed = completed_batches(uri, storage_options)
    assert [entries for _ts, entries in committed] == [{identifier(first.id): b} for b in (0, 1)]
    assert pending_instants(uri, storage_options) == []
    assert_only_committed_files(uri, storage_options)


# -- the offline compactor while a sink runs ---------------------------------------------------------------------
def timeline_names(uri, options):
    return sorted(info.path for info in storage_for(uri, options).list(".hoodie"))


@pytest.mark.slow
def test_the_offline_compactor_is_refused_while_a_sink_holds_the_lease_then_runs_after_it(spark, s3_table, tmp_path):
    """A sink with async compaction holds the lease for its query: the offline compactor (function and command
    line) is refused naming the query and writes nothing; one that waits long enough runs once the query stopped,
    and the table is the model's, read through hudi-rs and HoodieTable (snapshot and read-optimized)."""
    from hoodie_stream import HoodieTable

    uri, storage_options = s3_table
    options = sink_options(
        **{"compaction.schedule.enabled": "true", "compaction.async.enabled": "true", "compaction.delta_commits": "2"}
    )
    batches = generate_batches(3, seed=5, keys_per_batch=12, key_space=30, monotonic=True)
    model = TableModel()
    source = str(tmp_path / "in")
    write_batch_file(source, 0, batches[0])
    query = start_query(
        spark, HoodieStreamSink(uri, options, storage_options=storage_options), source, str(tmp_path / "chk")
    )
    waiting = None
    try:
        for i, events in enumerate(batches):
            if i:
                write_batch_file(source, i, events)
            query.processAllAvailable()
            model.apply_batch(events)
        deadline = time.monotonic() + 60  # the sink's own async compaction done: the timeline stays still
        while pending_instants(uri, storage_options) and time.monotonic() < deadline:
            time.sleep(0.2)
        before = timeline_names(uri, storage_options)
        assert any(name.endswith(".commit") for name in before), "the sink's async compaction ran"

        started = time.monotonic()
        with pytest.raises(HoodieLockError) as err:
            list(compact_table(uri, options=FAST_LEASE, spark=spark, storage_options=storage_options))
        assert time.monotonic() - started >= WAIT_S
        assert_names_holder(str(err.value), query.id, uri)

        cli_options = [f"--storage-option={k}={v}" for k, v in storage_options.items()]
        cli = subprocess.run(
            [sys.executable, "-m", "hoodie_stream", "compact", "--path", uri, *cli_options]
            + ["--option", "hoodie.write.lock.wait_time_ms=1000"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 2, cli.stderr
        assert cli.stderr.startswith("error: ") and cli.stdout == ""
        assert_names_holder(cli.stderr, query.id, uri)
        assert storage_options["aws_secret_access_key"] not in cli.stderr
        assert timeline_names(uri, storage_options) == before, "a refused compactor wrote to the timeline"

        # a compactor that waits long enough runs once the query ended
        lines: list[str] = []
        failure: list[BaseException] = []

        def compact():
            try:
                waiting_options = dict(FAST_LEASE, **{"hoodie.write.lock.wait_time_ms": "60000"})
                lines.extend(compact_table(uri, options=waiting_options, spark=spark, storage_options=storage_options))
            except BaseException as exc:
                failure.append(exc)

        waiting = threading.Thread(target=compact, name="offline-compactor")
        waiting.start()
        time.sleep(2 * WAIT_S)
        assert waiting.is_alive() and not lines, "the compactor ran while the query held the lease"
    finally:
        query.stop()
        if waiting is not None:
            waiting.join(120)
    assert not failure, failure
    assert lines and lines[-1].startswith("completed compaction"), lines
    compacted = lines[-1].split()[-1]
    table = HoodieTable(uri, storage_options=storage_options)
    assert table.timeline.commits_timeline()[-1].timestamp == compacted
    assert table.timeline.commits_timeline()[-1].action == "commit"
    assert_table_is(uri, storage_options, model.rows(), "after offline compaction")
    read_optimized = table_rows(table.read("read_optimized"))
    assert read_optimized == model.rows(), "the compacted base files hold every row"
    assert pending_instants(uri, storage_options) == []
    assert_only_committed_files(uri, storage_options)


# -- a writer in another process, on another host ----------------------------------------------------------------
OTHER_HOST = "writer-a.example"


def start_child(tmp_path, uri, storage_options, options, source, name):
    """tests/writer_child.py running a query on the table as a writer on OTHER_HOST; (process, query id)."""
    spec = {
        "source": source,
        "table": uri,
        "checkpoint": str(tmp_path / f"chk-{name}"),
        "stop": str(tmp_path / f"stop-{name}"),
        "options": options,
        "storage_options": storage_options,
        "host": OTHER_HOST,
    }
    log = open(tmp_path / f"{name}.log", "w+b")
    env = dict(os.environ, TMPDIR=str(tmp_path), SPARK_LOCAL_DIRS=str(tmp_path), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "writer_child.py"), json.dumps(spec)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # its PySpark workers are killed with it (crash_harness.kill_session)
    )
    deadline = time.monotonic() + 120
    while True:
        log.seek(0)
        for line in log.read().decode(errors="replace").splitlines():
            if line.startswith("started "):
                return proc, line.split()[1]
        assert proc.poll() is None, f"writer child exited ({proc.returncode}):\n{child_log(tmp_path, name)}"
        assert time.monotonic() < deadline, f"writer child did not start:\n{child_log(tmp_path, name)}"
        time.sleep(0.1)


def child_log(tmp_path, name):
    return "\n".join((tmp_path / f"{name}.log").read_text(errors="replace").splitlines()[-40:])


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_query_in_another_process_is_refused_then_takes_over_the_lease_of_a_killed_writer(
    spark, s3_table, tmp_path, caplog
):
    """Writer A (another process, reporting another host) holds the table. A second query here is refused within
    the wait time naming A's query, host and since when; A's table is its model. A is SIGKILLed in the middle of
    a micro-batch: its lease is not taken over before it expired (A's host is not this one, so its process cannot
    be checked), then the new query takes over, rolls A's pending delta commit back before writing, and the
    table holds A's completed batches and the new query's, nothing of A's last one."""
    from crash_harness import kill_session, session_members

    uri, storage_options = s3_table
    storage = storage_for(uri, storage_options)
    batches = generate_batches(4, seed=8, keys_per_batch=12, key_space=30)
    source_a, source_b = str(tmp_path / "in-a"), str(tmp_path / "in-b")
    write_batch_file(source_a, 0, batches[0])
    child, query_a = start_child(tmp_path, uri, storage_options, sink_options(), source_a, "a")
    try:
        wait_for(
            lambda: storage.exists(".hoodie/hoodie.properties") and len(completed_batches(uri, storage_options)) == 1,
            120,
            "A's batch 0",
        )
        write_batch_file(source_a, 1, batches[1])
        wait_for(lambda: len(completed_batches(uri, storage_options)) == 2, 60, "A's batch 1")
        model = TableModel()
        for events in batches[:2]:
            model.apply_batch(events)
        assert_table_is(uri, storage_options, model.rows(), "A's table after its batches 0 and 1")

        # a second query, here: refused within the wait time, naming A
        write_batch_file(source_b, 0, batches[3])
        started = time.monotonic()
        refused = start_query(
            spark,
            HoodieStreamSink(uri, sink_options(), storage_options=storage_options),
            source_b,
            str(tmp_path / "chk-b"),
        )
        message, _ = refusal_of(refused)
        assert WAIT_S <= time.monotonic() - started < WAIT_S + 30
        assert uri in message and f"streaming query {query_a} on host {OTHER_HOST}" in message, message
        assert "since" in message and "pid" in message, message
        assert len(completed_batches(uri, storage_options)) == 2 and pending_instants(uri, storage_options) == []

        # A is killed while it writes its batch 2
        write_batch_file(source_a, 2, batches[2])
        groups = set()

        def a_is_writing():
            groups.update(g for _pid, g in session_members(child.pid))
            assert child.poll() is None, f"writer A exited:\n{child_log(tmp_path, 'a')}"
            return bool(writing_instants(storage))

        wait_for(a_is_writing, 60, "A writing its batch 2")
        kill_session(child, groups)
    finally:
        if child.poll() is None:
            kill_session(child, set())
    killed_at = time.time() * 1000
    (half_written,) = writing_instants(storage)
    assert len(completed_batches(uri, storage_options)) == 2, "the kill came after A's batch 2 completed"
    lock = lock_document(uri, storage_options)
    assert not lock["expired"] and Holder.parse(lock["owner"]).query == query_a
    assert_table_is(uri, storage_options, model.rows(), "after A was killed: nothing of its batch 2")

    # the query again (same checkpoint), waiting long enough: it takes over once A's lease expired
    waiting = sink_options(**{"hoodie.write.lock.wait_time_ms": "30000"})
    with caplog.at_level(logging.WARNING, logger="hoodie_stream"):
        query_b = start_query(
            spark, HoodieStreamSink(uri, waiting, storage_options=storage_options), source_b, str(tmp_path / "chk-b")
        )
        try:
            query_b.processAllAvailable()
        finally:
            query_b.stop()
    assert query_b.id == refused.id
    committed = completed_batches(uri, storage_options)
    assert [entries for _ts, entries in committed] == [
        {identifier(query_a): 0},
        {identifier(query_a): 1},
        {identifier(query_a): 1, identifier(query_b.id): 0},
    ]
    taken_over = next(r for r in caplog.records if "took over the lease" in r.getMessage())
    assert f"streaming query {query_a} on host {OTHER_HOST}" in taken_over.getMessage()
    assert "not renewed before it expired" in taken_over.getMessage()
    assert taken_over.created * 1000 >= lock["validUntil"] > killed_at, "taken over before A's lease expired"

    # A's half-written instant was rolled back before the new query wrote
    table_names = [info.path.rpartition("/")[2] for info in storage.list(".hoodie")]
    rollbacks = sorted(n.split(".")[0] for n in table_names if n.endswith(".rollback"))
    assert rollbacks and half_written < rollbacks[0] < committed[2][0], (half_written, rollbacks, committed)
    assert not any(n.startswith(half_written + ".deltacommit") for n in table_names if n.count(".") == 1)
    model.apply_batch(batches[3])
    assert_table_is(uri, storage_options, model.rows(), "A's batches 0 and 1, then the new query's")
    assert pending_instants(uri, storage_options) == []
    assert_only_committed_files(uri, storage_options)


@pytest.mark.slow
def test_the_offline_compactor_during_a_sinks_async_compaction_is_refused_then_takes_over_a_killed_sink(
    spark, s3_table, tmp_path, caplog
):
    """Writer A (another process, reporting another host) streams with async compaction. The offline compactor,
    started while A's compaction is inflight, is refused within the wait time naming A. A is SIGKILLed in the
    middle of a compaction; the offline compactor, waiting long enough, takes the lease over once A's expired,
    rolls back what A left pending, completes the compactions, and the table is the model of A's completed
    batches, read through hudi-rs and HoodieTable, with no file of an unfinished instant left."""
    from crash_harness import kill_session, session_members

    uri, storage_options = s3_table
    storage = storage_for(uri, storage_options)
    options = sink_options(
        **{"compaction.schedule.enabled": "true", "compaction.async.enabled": "true", "compaction.delta_commits": "2"}
    )
    batches = generate_batches(12, seed=12, keys_per_batch=3000, key_space=6000, monotonic=True)
    source = str(tmp_path / "in-a")
    write_batch_file(source, 0, batches[0])
    child, query_a = start_child(tmp_path, uri, storage_options, options, source, "a")
    groups: set[int] = set()
    fed = 1

    def inflight_compaction():
        names = {info.name for info in storage.list(".hoodie")}
        inflight = sorted(n.split(".")[0] for n in names if n.endswith(".compaction.inflight"))
        return [ts for ts in inflight if f"{ts}.commit" not in names]

    def feed_until_a_compaction_runs():
        """Give A batches, one at a time, until one of its compactions is seen inflight; returns it."""
        nonlocal fed
        while fed < len(batches):
            write_batch_file(source, fed, batches[fed])
            fed += 1
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                groups.update(g for _pid, g in session_members(child.pid))
                assert child.poll() is None, f"writer A exited:\n{child_log(tmp_path, 'a')}"
                running = inflight_compaction()
                if running:
                    return running[0]
                created = storage.exists(".hoodie/hoodie.properties")
                if created and len(completed_batches(uri, storage_options)) >= fed:
                    break
                time.sleep(0.02)
        raise AssertionError(f"no compaction of A's was seen inflight after {fed} batches")

    try:
        feed_until_a_compaction_runs()
        started = time.monotonic()
        with pytest.raises(HoodieLockError) as err:
            list(compact_table(uri, options=FAST_LEASE, spark=spark, storage_options=storage_options))
        assert WAIT_S <= time.monotonic() - started < WAIT_S + 30
        message = str(err.value)
        assert uri in message and f"streaming query {query_a} on host {OTHER_HOST}" in message, message
        assert "since" in message and "pid" in message, message

        killed_during = feed_until_a_compaction_runs()
        kill_session(child, groups)
    finally:
        if child.poll() is None:
            kill_session(child, groups)
    still_inflight = killed_during in inflight_compaction()
    committed = completed_batches(uri, storage_options)
    model = TableModel()
    for events in batches[: len(committed)]:
        model.apply_batch(events)
    assert [entries for _ts, entries in committed] == [{identifier(query_a): b} for b in range(len(committed))]
    lock = lock_document(uri, storage_options)
    assert not lock["expired"] and Holder.parse(lock["owner"]).query == query_a, lock

    waiting = dict(FAST_LEASE, **{"hoodie.write.lock.wait_time_ms": "60000"})
    with caplog.at_level(logging.WARNING, logger="hoodie_stream"):
        lines = list(compact_table(uri, options=waiting, spark=spark, storage_options=storage_options))
    taken_over = next(r for r in caplog.records if "took over the lease" in r.getMessage())
    assert f"streaming query {query_a} on host {OTHER_HOST}" in taken_over.getMessage()
    assert taken_over.created * 1000 >= lock["validUntil"], "taken over before A's lease expired"
    print(f"killed during compaction {killed_during} (inflight after the kill: {still_inflight}); {lines}")
    if still_inflight:
        assert f"reverted interrupted compaction {killed_during} to requested" in lines, lines
    from hoodie_stream import HoodieTable

    table = HoodieTable(uri, storage_options=storage_options)
    assert killed_during in {i.timestamp for i in table.timeline.completed(["commit"])}, lines
    assert pending_instants(uri, storage_options) == [], lines
    assert_table_is(uri, storage_options, model.rows(), "A's completed batches, compacted offline")
    assert table_rows(table.read("read_optimized")) == model.rows(), "the compacted base files hold every row"
    assert_only_committed_files(uri, storage_options)
