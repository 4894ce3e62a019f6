"""Exactly once across tables under SIGKILL: one stream of three Debezium topics (PostgreSQL and MySQL shapes) runs
in a child process; the parent kills the child's whole session when the first table written has committed a
micro-batch that the second has not (between two tables' commits), restarts it from the same checkpoint, twice, then
lets it finish. Every table then holds each micro-batch once, in order, and hudi-rs reads what the Debezium model
says of all its topic's events. On local disk and on the S3 test server (the tables there, the input and the
checkpoint on local disk)."""

import json
import time

from crash_harness import completed, kill_session, session_members, start_child, timeline_state
from debezium_model import final_rows, load_set
from hoodie_stream.debezium import table_name
from hoodie_stream.storage import storage_for
from oracle import rs_read
from test_debezium_sink import assert_table_matches, batch_ids, interleaved, write_batch

SETS = [  # (message set, record key, connector)
    ("mysql_risingwave_customers_schema.jsonl", ["id"], "mysql"),
    ("pg_flink_products_schema.jsonl", ["id"], "postgresql"),
    ("pg_risingwave_chbench_district.jsonl", ["d_w_id", "d_id"], "postgresql"),
]
N_BATCHES = 5
KILLS = 2
RUN_TIMEOUT = 400


def test_a_kill_between_two_tables_commits_loses_and_duplicates_nothing(tmp_path, location):
    sets = [load_set(name) for name, _, _ in SETS]
    topics = [records[0]["topic"] for records in sets]
    assert topics == sorted(topics)  # tables are written in topic order: the first, then the second
    base = f"{location.uri}/lake"
    paths = [f"{base}/{table_name(t)}" for t in topics]
    stores = [storage_for(p, location.storage_options) for p in paths]
    tables = {t: {"hoodie.datasource.write.recordkey.field": ",".join(k)} for t, (_, k, _) in zip(topics, SETS)}
    batches = interleaved(sets, N_BATCHES)
    for i, batch in enumerate(batches):
        write_batch(tmp_path / "in", i, batch)
    args = [str(tmp_path / "in"), base, str(tmp_path / "chk"), json.dumps(tables)]
    kills = []
    for run in range(KILLS + 1):
        proc = start_child(
            "cdc_crash_child.py", args, tmp_path / f"run-{run}.log", tmp=tmp_path, storage_options=location.options
        )
        groups, started = set(), time.monotonic()
        try:
            while proc.poll() is None:
                groups = {g for _pid, g in session_members(proc.pid)} or groups
                done = [
                    len(completed(timeline_state(s), "deltacommit")) if s.exists(".hoodie/hoodie.properties") else 0
                    for s in stores[:2]
                ]
                if run < KILLS and done[0] > done[1] and done[0] > run:
                    kill_session(proc, groups)
                    kills.append(done)
                    break
                assert time.monotonic() - started < RUN_TIMEOUT, (tmp_path / f"run-{run}.log").read_text()[-3000:]
                time.sleep(0.005)
        except BaseException:
            if proc.poll() is None:
                kill_session(proc, groups)
            raise
        if run == KILLS:
            assert proc.wait() == 0, (tmp_path / f"run-{run}.log").read_text()[-3000:]
    assert len(kills) == KILLS, f"kills between the first two tables' commits: {kills}"
    for path, records, topic, (name, key, connector) in zip(paths, sets, topics, SETS):
        assert batch_ids(path, location.storage_options) == [
            i for i, b in enumerate(batches) if any(r["topic"] == topic for r in b)
        ], name
        got = rs_read(path, storage_options=location.options)
        assert_table_matches(got, final_rows(records, key, connector), key, name)
