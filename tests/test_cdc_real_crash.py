"""The real CDC pipeline through crashes: the Spark driver (a child process running Spark's Kafka source into
DebeziumSink, tests/cdc_kafka_child.py) SIGKILLed in the middle of micro-batches and started again from its
checkpoint (the Kafka offsets in it), and Kafka Connect SIGKILLed while the database changes, after its connector
committed an offset: Debezium sends again the events since (at least once upstream). Each change lands exactly
once: the tables equal the database, every table's delta commits carry distinct, increasing streaming batch ids, and
no commit is left pending."""

from __future__ import annotations

import json
import random
import threading
import time

from cdc_workload import TABLES, create_tables, differences, random_workload, table_path
from crash_harness import kill_session, pending, session_members, start_child, timeline_state
from hoodie_stream import HoodieTable
from hoodie_stream.storage import storage_for

KILLS = 2
RUN_TIMEOUT = 600
# Killed runs take a few offsets per micro-batch, so that a kill lands in the middle of one of many commits; the
# catch-up runs after them take wide micro-batches (a loaded machine takes seconds per micro-batch).
KILLED_RUN_OFFSETS, CATCH_UP_OFFSETS = 40, 1000


def run_child(cdc_env, prefix, lake, chk, log, max_offsets):
    args = [cdc_env.bootstrap, prefix, str(lake), str(chk), str(max_offsets)]
    return start_child("cdc_kafka_child.py", args, log, tmp=log.parent)


def table_paths(lake, prefix, schema):
    return [table_path(lake, prefix, schema, t) for t, _, _ in TABLES]


def run_and_kill(cdc_env, prefix, schema, lake, chk, log, rng):
    """Start the child, SIGKILL it a random moment after a delta commit of this run started in some table (True),
    or let it finish first (False)."""
    paths = table_paths(lake, prefix, schema)

    def states():
        return {p: timeline_state(p) if storage_for(p).exists(".hoodie/hoodie.properties") else {} for p in paths}

    before = states()
    proc = run_child(cdc_env, prefix, lake, chk, log, KILLED_RUN_OFFSETS)
    groups, armed, delay = set(), None, rng.uniform(0, 1.5)
    started = time.monotonic()
    try:
        while proc.poll() is None:
            groups = {g for _pid, g in session_members(proc.pid)} or groups
            now = time.monotonic()
            if armed is None:
                for path, state in states().items():
                    if [ts for ts in pending(state, "deltacommit") if (ts, "deltacommit") not in before[path]]:
                        armed = now
            if armed is not None and now - armed >= delay:
                kill_session(proc, groups)
                return True
            assert now - started < RUN_TIMEOUT, log.read_text(errors="replace")[-3000:]
            time.sleep(0.02)
    except BaseException:
        if proc.poll() is None:
            kill_session(proc, groups)
        raise
    assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]
    return False


def kill_connect_while_writing(cdc_env, connector, schema, rng, next_id):
    """Kafka Connect SIGKILLed while a workload runs, 1-4 s after its connector committed an offset (offsets are
    committed every 5 s: scripts/cdc-env.sh), then started again; the workload's next id."""
    first = connector.confirmed_lsn()
    state, stop, seed = {"next": next_id, "error": None}, threading.Event(), rng.random()

    def write():
        writer_rng = random.Random(seed)
        try:
            with cdc_env.sql() as db:
                while not stop.is_set():
                    state["next"] = random_workload(db, schema, writer_rng, 1, state["next"])
                    time.sleep(0.05)
        except BaseException as err:  # raised in the test's thread after join()
            state["error"] = err

    worker = threading.Thread(target=write, name="workload")
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while connector.confirmed_lsn() == first:  # the kill comes 1-4 s after a commit, before the next (5 s)
            assert time.monotonic() < deadline and state["error"] is None, "the connector committed no offset in 60 s"
            time.sleep(0.1)
        time.sleep(rng.uniform(1, 4))
        cdc_env.restart_connect(kill=True)
    finally:
        stop.set()
        worker.join()
    if state["error"] is not None:
        raise state["error"]
    connector.wait_running()
    return state["next"]


def redelivered(spark, bootstrap, prefix):
    """(how many change messages of the topics repeat an earlier one: the same key, operation and LSN; how many
    keys have more than one snapshot read, i.e. Debezium took its snapshot again)."""
    from pyspark.sql import functions as F

    messages = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", prefix + r"\..*")
        .option("startingOffsets", "earliest")
        .load()
        .where(F.col("value").isNotNull())
        .select(
            "topic",
            F.col("key").cast("string").alias("key"),
            F.get_json_object(F.col("value").cast("string"), "$.payload.op").alias("op"),
            F.get_json_object(F.col("value").cast("string"), "$.payload.source.lsn").alias("lsn"),
        )
    )
    changes = messages.where(F.col("op") != "r")
    snapshot_reads = messages.where(F.col("op") == "r").groupBy("topic", "key").count()
    return changes.count() - changes.distinct().count(), snapshot_reads.where(F.col("count") > 1).count()


def batch_ids(path):
    table = HoodieTable(path)
    out = []
    for inst in table.timeline.completed(["deltacommit"]):
        extra = table.timeline.read_commit_metadata(inst.timestamp).extra_metadata
        out.extend(int(v) for v in json.loads(extra["_hudi_streaming_sink_checkpoint"]).values())
    return out


def test_sigkilled_driver_and_kafka_connect_change_each_row_exactly_once(spark, cdc_env, pg_schema, tmp_path):
    schema, rng = pg_schema, random.Random(31)
    db = cdc_env.sql()
    create_tables(db, schema, rng, items=20, others=5)
    prefix = "c" + schema[1:]
    connector = cdc_env.connector(prefix, schema, **{"topic.creation.default.partitions": 2})
    lake, chk = tmp_path / "lake", tmp_path / "chk"
    next_id, kills, runs = 1000, 0, 0
    try:
        for round_ in range(KILLS + 1):
            next_id = random_workload(db, schema, rng, 12, next_id)
            if round_ == 1:  # Kafka Connect killed: Debezium resumes from its last committed offset
                next_id = kill_connect_while_writing(cdc_env, connector, schema, rng, next_id)
                next_id = random_workload(db, schema, rng, 6, next_id)
            runs += 1
            kills += run_and_kill(cdc_env, prefix, schema, lake, chk, tmp_path / f"run-{runs}.log", rng)
        print(f"{kills} of {KILLS + 1} runs killed mid-commit, {runs} runs in all")
        assert kills >= 2, f"only {kills} of {KILLS + 1} runs were killed mid-commit"
        # the last runs: until every change the connector sent is in the tables
        deadline = time.monotonic() + 300
        while True:
            runs += 1
            proc = run_child(cdc_env, prefix, lake, chk, tmp_path / f"run-{runs}.log", CATCH_UP_OFFSETS)
            assert proc.wait(RUN_TIMEOUT) == 0, (tmp_path / f"run-{runs}.log").read_text(errors="replace")[-3000:]
            diffs = differences(db, lake, prefix, schema, TABLES)
            if not diffs:
                break
            assert time.monotonic() < deadline, diffs
            time.sleep(2)
        duplicates, snapshotted_again = redelivered(spark, cdc_env.bootstrap, prefix)
        print(f"{duplicates} messages sent again after Kafka Connect was killed")
        assert duplicates > 0, "Kafka Connect's kill sent nothing again: the test proves no redelivery"
        assert snapshotted_again == 0, f"{snapshotted_again} keys were read by a second snapshot"
    finally:
        connector.delete()
        db.close()
    for path in table_paths(lake, prefix, schema):
        ids = batch_ids(path)
        assert len(ids) == len(set(ids)) and ids == sorted(ids), (path, ids)
        assert pending(timeline_state(path), "deltacommit") == [], path
