"""The real CDC pipeline through crashes: the Spark driver (a child process running Spark's Kafka source into
DebeziumSink, tests/cdc_kafka_child.py) SIGKILLed in the middle of micro-batches and started again from its
checkpoint (the Kafka offsets in it), with Kafka Connect stopped and started in between. Each change lands exactly
once: the tables equal the database, every table's delta commits carry distinct, increasing streaming batch ids, and
no commit is left pending."""

from __future__ import annotations

import json
import random
import time

from cdc_workload import TABLES, create_tables, differences, random_workload, table_path
from crash_harness import kill_session, pending, session_members, start_child, timeline_state
from hoodie_stream import HoodieTable
from hoodie_stream.storage import storage_for

KILLS = 2
RUN_TIMEOUT = 300


def run_child(cdc_env, prefix, lake, chk, log):
    return start_child("cdc_kafka_child.py", [cdc_env.bootstrap, prefix, str(lake), str(chk)], log, tmp=log.parent)


def table_paths(lake, prefix, schema):
    return [table_path(lake, prefix, schema, t) for t, _, _ in TABLES]


def run_and_kill(cdc_env, prefix, schema, lake, chk, log, rng):
    """Start the child, SIGKILL it a random moment after a delta commit of this run started in some table (True),
    or let it finish first (False)."""
    paths = table_paths(lake, prefix, schema)

    def states():
        return {p: timeline_state(p) if storage_for(p).exists(".hoodie/hoodie.properties") else {} for p in paths}

    before = states()
    proc = run_child(cdc_env, prefix, lake, chk, log)
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


def batch_ids(path):
    table = HoodieTable(path)
    out = []
    for inst in table.timeline.completed(["deltacommit"]):
        extra = table.timeline.read_commit_metadata(inst.timestamp).extra_metadata
        out.extend(int(v) for v in json.loads(extra["_hudi_streaming_sink_checkpoint"]).values())
    return out


def test_sigkilled_driver_and_restarted_connect_change_each_row_exactly_once(cdc_env, pg_schema, tmp_path):
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
            if round_ == 1:  # Kafka Connect stopped and started: Debezium resumes from its committed offset
                cdc_env.restart_connect()
                connector.wait_running()
                next_id = random_workload(db, schema, rng, 6, next_id)
            runs += 1
            kills += run_and_kill(cdc_env, prefix, schema, lake, chk, tmp_path / f"run-{runs}.log", rng)
        print(f"{kills} of {KILLS + 1} runs killed mid-commit, {runs} runs in all")
        assert kills >= 2, f"only {kills} of {KILLS + 1} runs were killed mid-commit"
        # the last runs: until every change the connector sent is in the tables
        deadline = time.monotonic() + 300
        while True:
            runs += 1
            proc = run_child(cdc_env, prefix, lake, chk, tmp_path / f"run-{runs}.log")
            assert proc.wait(RUN_TIMEOUT) == 0, (tmp_path / f"run-{runs}.log").read_text(errors="replace")[-3000:]
            diffs = differences(db, lake, prefix, schema, TABLES)
            if not diffs:
                break
            assert time.monotonic() < deadline, diffs
            time.sleep(2)
    finally:
        connector.delete()
        db.close()
    for path in table_paths(lake, prefix, schema):
        ids = batch_ids(path)
        assert len(ids) == len(set(ids)) and ids == sorted(ids), (path, ids)
        assert pending(timeline_state(path), "deltacommit") == [], path
