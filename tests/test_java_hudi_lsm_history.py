"""Hudi 1.2's LSM timeline history (table version 9): what Hudi archives, this project's reader reads (the instants
that left the active timeline, their commit metadata, as Hudi's `show_archived_commits` lists them); what this
project's archiver writes, Hudi reads (`show_archived_commits`, snapshot reads) and goes on writing and archiving
on top of, and this project then reads the history both wrote."""

from __future__ import annotations

import pyarrow as pa
import pytest

import java_hudi as jh
import test_java_hudi_writes as writes
from hoodie_stream import HoodieTable
from hoodie_stream.compaction.archiver import archive
from hoodie_stream.format.timeline import lsm_history as lsm
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.options import parse_compaction_options
from hoodie_stream.storage import LocalStorage
from test_lsm_history import DIR

pytestmark = [pytest.mark.java_hudi]

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.string())])
SMALL = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.clean.commits.retained": "1"}


def _options(name, **extra):
    return writes.hudi_options(
        "1.2.0",
        name,
        global_index=False,
        **{"hoodie.write.table.version": "9", "hoodie.metadata.enable": "false", **extra},
    )


def _write(hudi, path, n, options):
    row = {"id": n % 3, "ts": n, "city": ["sf", "nyc"][n % 2], "v": f"v{n}"}
    hudi.write(path, pa.Table.from_pylist([row], SCHEMA), options)


def _archived_commits(hudi, path, name):
    hudi.sql(f"CREATE TABLE IF NOT EXISTS {name} USING hudi LOCATION '{path}'")
    rows = hudi.sql(
        f"CALL show_archived_commits(table => '{name}', limit => 1000, start_ts => '0', end_ts => '99999999999999999')"
    )
    return {r["commit_time"]: int(r["total_records_written"]) for r in rows}


def _records_written(history, ts):
    return sum(s.num_writes for s in history.commit_metadata(ts).all_write_stats())


def test_the_reader_reads_what_hudi_archived(java_hudi, tmp_path):
    hudi = java_hudi("1.2.0")
    path = str(tmp_path / "t")
    seen = {}
    for n in range(8):
        _write(hudi, path, n, _options("lsm_by_hudi", **SMALL))
        seen.update({(i.timestamp, i.action): i for i in HoodieTable(path).timeline.completed()})
    table = HoodieTable(path)
    active = {(i.timestamp, i.action) for i in table.timeline.completed()}
    gone = sorted(key for key in seen if key not in active)
    assert gone, "Hudi archived nothing"
    history = table.archived_timeline()
    assert isinstance(history, lsm.LSMHistory)
    assert [(i.timestamp, i.action) for i in history.instants] == gone
    assert [i.completion_time for i in history.instants] == [seen[key].completion_time for key in gone]
    hudis = _archived_commits(hudi, path, "lsm_by_hudi")
    commits = history.completed(["commit", "deltacommit"])
    assert set(hudis) == {i.timestamp for i in commits}
    for inst in commits:
        assert hudis[inst.timestamp] == _records_written(history, inst.timestamp)


def test_hudi_reads_and_extends_the_history_the_archiver_writes(java_hudi, tmp_path):
    hudi = java_hudi("1.2.0")
    path = str(tmp_path / "t")
    for n in range(6):
        _write(hudi, path, n, _options("lsm_by_us", **{**SMALL, "hoodie.archive.automatic": "false"}))
    opts = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "compaction.delta_commits": "1"}
    moved = archive(path, Timeline(path), parse_compaction_options({**opts, "clean.retain_commits": "1"}))
    assert len([i for i in moved if i.action == "deltacommit"]) >= 3
    table = HoodieTable(path)
    ours = table.archived_timeline()
    assert [i.timestamp for i in ours.instants] == [i.timestamp for i in moved]
    hudis = _archived_commits(hudi, path, "lsm_by_us")
    assert hudis == {
        i.timestamp: _records_written(ours, i.timestamp) for i in ours.completed(["commit", "deltacommit"])
    }
    same, why = jh.same_rows(table.read(), hudi.read(path, jh.snapshot()))
    assert same, f"snapshot after our archiving: {why}"

    for n in range(6, 10):  # Hudi writes and archives on top of the history
        _write(hudi, path, n, _options("lsm_by_us", **SMALL))
    table = HoodieTable(path)
    files = [e.file_name for e in lsm.latest_manifest(LocalStorage(path), DIR)[1]]
    assert len(files) >= 2 and files[0].startswith(moved[0].timestamp), files  # ours first, then Hudi's
    history = table.archived_timeline()
    assert [i.timestamp for i in history.instants][: len(moved)] == [i.timestamp for i in moved]
    assert len(history.instants) > len(moved)
    active = {i.timestamp for i in table.timeline.instants}
    assert not active & history.completed_times()
    same, why = jh.same_rows(table.read(), hudi.read(path, jh.snapshot()))
    assert same, f"snapshot after Hudi archived on top: {why}"
