"""Apache Hudi 1.2 as the oracle of `hoodie-stream upgrade` on a table with an archived timeline: a version 6
merge-on-read table whose `.hoodie/archived/` holds delta commits, compactions, cleans and rollbacks
(test_upgrade.build_archived_table), upgraded by the command; Hudi 1.2 lists the archived commits it held
(`show_archived_commits`, records written per commit) and reads the table as HoodieTable does; then Hudi 1.2 writes
into it and archives on top of the converted history, and both read the same again."""

from __future__ import annotations

import pyarrow as pa
import pytest

import java_hudi as jh
from hoodie_stream import HoodieTable
from hoodie_stream.__main__ import main
from hoodie_stream.format.timeline import lsm_history as lsm
from hoodie_stream.storage import LocalStorage
from test_java_hudi_lsm_history import _archived_commits, _records_written
from test_upgrade import build_archived_table

pytestmark = [pytest.mark.java_hudi]

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string())])
HISTORY = ".hoodie/timeline/history"


def _options(**extra):
    """Hudi's writer options for the table build_archived_table makes (non-partitioned, key `id`, ordering `ts`)."""
    return {
        "hoodie.table.name": "t",
        "hoodie.datasource.write.table.type": "MERGE_ON_READ",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.partitionpath.field": "",
        "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
        "hoodie.write.table.version": "9",
        "hoodie.metadata.enable": "false",
        "hoodie.upsert.shuffle.parallelism": "2",
        "hoodie.insert.shuffle.parallelism": "2",
        **extra,
    }


def _same(table, hudi, path, context):
    for ours, options in ((table.read(), jh.snapshot()), (table.read("read_optimized"), jh.read_optimized())):
        ok, why = jh.same_rows(ours, hudi.read(path, options))
        assert ok, f"{context}: Hudi 1.2 vs HoodieTable.read: {why}"


def test_hudi_lists_the_archived_commits_the_command_converted_and_archives_on_top(java_hudi, tmp_path, capsys):
    path = build_archived_table(str(tmp_path / "t"))
    table = HoodieTable(path)
    legacy = table.archived_timeline()
    commits = legacy.completed(["commit", "deltacommit"])
    expected = {i.timestamp: _records_written(legacy, i.timestamp) for i in commits}
    archived = [(i.timestamp, i.action) for i in legacy.completed()]
    before = table.read()

    assert main(["upgrade", path, "--to", "9"]) == 0
    assert f"{len(archived)} archived instants converted" in capsys.readouterr().out
    hudi = java_hudi("1.2.0")
    assert _archived_commits(hudi, path, "up_archived") == expected
    table = HoodieTable(path)
    ok, why = jh.same_rows(table.read(), before)
    assert ok, why
    _same(table, hudi, path, "upgraded")

    # Hudi writes into the table and archives on top of the converted history
    small = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.clean.commits.retained": "1"}
    for n in range(6):
        rows = pa.Table.from_pylist([{"id": f"k{n % 4}", "ts": 100 + n, "v": f"h{n}"}], SCHEMA)
        hudi.write(path, rows, _options(**small))
    table = HoodieTable(path)
    history = table.archived_timeline()
    assert isinstance(history, lsm.LSMHistory)
    ours = [(i.timestamp, i.action) for i in history.instants]
    # (the cleans and rollbacks Hudi archives now may be older than instants archived before the upgrade)
    assert set(archived) < set(ours), "Hudi archived nothing on top"
    assert not {i.timestamp for i in table.timeline.instants} & history.completed_times()
    files = [e.file_name for e in lsm.latest_manifest(LocalStorage(path), HISTORY)[1]]
    assert files[0].startswith(archived[0][0]), files  # the converted files first, then Hudi's
    listed = _archived_commits(hudi, path, "up_archived_after")
    assert {ts: n for ts, n in listed.items() if ts in expected} == expected
    assert {ts: n for ts, n in listed.items() if ts not in expected} == {
        i.timestamp: _records_written(history, i.timestamp)
        for i in history.completed(["commit", "deltacommit"])
        if i.timestamp not in expected
    }
    assert table.read().num_rows == before.num_rows
    _same(table, hudi, path, "after Hudi's writes and archiving")
