"""The LSM timeline history of table versions 8 and 9 (Spark-free): files, manifests and `_version_` as Hudi 1.2
writes them, the reader's snapshot rules (a missing or unreadable `_version_`, `*.tmp` manifests, a crash between
the parquet file, the manifest and `_version_`), the time-range file skipping, layer compaction, and the archiver on
a layout-2 table: the instants it moves are read back from the history, readers read the same rows, and a run
interrupted after any number of storage changes is finished by the next one."""

from __future__ import annotations

import io
import os
import shutil

import pyarrow.parquet as pq
import pytest

from hoodie_stream import HoodieTable
from hoodie_stream.compaction.archiver import archive
from hoodie_stream.errors import HoodieFormatError
from hoodie_stream.format.timeline import lsm_history as lsm
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.commit_metadata import CommitMetadata, WriteStat
from hoodie_stream.format.write.upgrade import upgrade
from hoodie_stream.options import parse_compaction_options
from hoodie_stream.storage import LocalStorage
from test_archiver import Crash, CrashingStorage, _compact, build_table

DIR = ".hoodie/timeline/history"
# manifest_2 of a history Hudi 1.2.0 wrote (byte for byte)
HUDI_MANIFEST = (
    b'{\n  "files" : [ {\n    "fileName" : "20261129160659842_20261129160659842_0.parquet",\n    "fileLen" : 2847\n'
    b'  }, {\n    "fileName" : "20261129160702231_20261129160702231_0.parquet",\n    "fileLen" : 2851\n  } ]\n}'
)


def _row(ts, action="deltacommit", writes=1):
    meta = CommitMetadata({"p": [WriteStat(file_id="f", path=f"p/f_{ts}.parquet", num_writes=writes)]})
    return {
        "instantTime": ts,
        "completionTime": str(int(ts) + 5),
        "action": action,
        "metadata": meta.to_avro(),
        "plan": None,
        "version": 1,
    }


def _ts(n):
    return f"2025010100{n:07d}"


def test_manifests_are_jacksons_pretty_json():
    entries = [
        lsm.ManifestEntry("20261129160659842_20261129160659842_0.parquet", 2847),
        lsm.ManifestEntry("20261129160702231_20261129160702231_0.parquet", 2851),
    ]
    assert lsm.manifest_json(entries) == HUDI_MANIFEST
    assert lsm.manifest_json([]) == b'{\n  "files" : [ ]\n}'


def test_files_are_laid_out_as_parquet_avro_writes_them():
    data = lsm.encode_history_file([_row(_ts(2)), _row(_ts(1), "clean")])
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert meta.num_row_groups == 1 and meta.format_version == "1.0"
    assert meta.metadata == {b"parquet.avro.schema": lsm.SCHEMA.encode(), b"writer.model.name": b"avro"}
    assert {meta.row_group(0).column(i).compression for i in range(6)} == {"GZIP"}
    schema = pq.ParquetFile(io.BytesIO(data)).schema
    assert [schema.column(i).max_definition_level for i in range(6)] == [1, 1, 1, 1, 1, 0]  # version: required


def test_appends_make_snapshots_read_back_in_instant_order(tmp_path):
    storage = LocalStorage(str(tmp_path))
    assert lsm.LSMHistory.load(storage, DIR).records == {}  # no history yet
    first = lsm.write_history_file(storage, DIR, [_row(_ts(2)), _row(_ts(1), "clean")])
    assert first == f"{DIR}/{_ts(1)}_{_ts(2)}_0.parquet"
    lsm.write_history_file(storage, DIR, [_row(_ts(3), "commit", 7)])
    assert storage.read(f"{DIR}/_version_") == b"2"
    assert [e.file_name for e in lsm.read_manifest(storage, DIR, 2)] == [
        f"{_ts(1)}_{_ts(2)}_0.parquet",
        f"{_ts(3)}_{_ts(3)}_0.parquet",
    ]
    assert lsm.read_manifest(storage, DIR, 2)[0].file_len == storage.size(first)
    history = lsm.LSMHistory.load(storage, DIR)
    assert [(i.timestamp, i.action, i.state, i.completion_time) for i in history.instants] == [
        (_ts(1), "clean", "completed", str(int(_ts(1)) + 5)),
        (_ts(2), "deltacommit", "completed", str(int(_ts(2)) + 5)),
        (_ts(3), "commit", "completed", str(int(_ts(3)) + 5)),
    ]
    assert [i.timestamp for i in history.completed(["commit", "deltacommit"])] == [_ts(2), _ts(3)]
    assert history.commit_metadata(_ts(3)).all_write_stats()[0].num_writes == 7
    assert history.commit_metadata(_ts(1)) is None  # a clean carries no commit metadata
    # a file the latest snapshot lists already is not written again (a run that crashed after its manifest)
    assert lsm.write_history_file(storage, DIR, [_row(_ts(3), "commit", 7)]) is None
    assert storage.read(f"{DIR}/_version_") == b"2"


def test_the_time_range_skips_files_by_their_names(tmp_path):
    storage = LocalStorage(str(tmp_path))
    for n in range(0, 9, 3):
        lsm.write_history_file(storage, DIR, [_row(_ts(n)), _row(_ts(n + 1)), _row(_ts(n + 2))])
    # a file outside the range is not opened: break it
    storage.write(f"{DIR}/{_ts(0)}_{_ts(2)}_0.parquet", b"not parquet")
    history = lsm.LSMHistory.load(storage, DIR, start=_ts(3), end=_ts(7))
    assert sorted(history.records) == [_ts(4), _ts(5), _ts(6), _ts(7)]  # (start, end]
    with pytest.raises(HoodieFormatError, match=f"{_ts(0)}_{_ts(2)}_0.parquet"):
        lsm.LSMHistory.load(storage, DIR)


def test_version_file_missing_or_unreadable_falls_back_to_the_manifests(tmp_path):
    storage = LocalStorage(str(tmp_path))
    lsm.write_history_file(storage, DIR, [_row(_ts(1))])
    lsm.write_history_file(storage, DIR, [_row(_ts(2))])
    storage.write(f"{DIR}/manifest_9.tmp", b"garbage")  # ignored, as Hudi ignores *.tmp
    for content in (None, b"", b"x1"):
        storage.delete(f"{DIR}/_version_")
        if content is not None:
            storage.write(f"{DIR}/_version_", content)
        assert lsm.latest_snapshot_version(storage, DIR) == 2
        assert sorted(lsm.LSMHistory.load(storage, DIR).records) == [_ts(1), _ts(2)]


def test_bad_manifests_are_errors_naming_the_file(tmp_path):
    storage = LocalStorage(str(tmp_path))
    lsm.write_history_file(storage, DIR, [_row(_ts(1))])
    storage.write(f"{DIR}/manifest_1", b"{not json")
    with pytest.raises(HoodieFormatError, match="history/manifest_1"):
        lsm.LSMHistory.load(storage, DIR)
    storage.write(f"{DIR}/_version_", b"4")
    with pytest.raises(HoodieFormatError, match="history/manifest_4"):
        lsm.LSMHistory.load(storage, DIR)
    storage.write(f"{DIR}/manifest_4", b'{"files":[{"fileName":"x.parquet","fileLen":1}]}')
    with pytest.raises(HoodieFormatError, match="history/x.parquet: not a timeline history file name"):
        lsm.LSMHistory.load(storage, DIR)


@pytest.mark.parametrize("budget", [0, 1, 2, 3])
def test_a_crash_between_parquet_manifest_and_version_leaves_the_previous_snapshot(tmp_path, budget):
    """Writes: the parquet file, the manifest (a delete of a leftover, then the create), `_version_`."""
    path = str(tmp_path)
    lsm.write_history_file(LocalStorage(path), DIR, [_row(_ts(1))])
    with pytest.raises(Crash):
        lsm.write_history_file(CrashingStorage(path, budget), DIR, [_row(_ts(2))])
    storage = LocalStorage(path)
    assert sorted(lsm.LSMHistory.load(storage, DIR).records) == [_ts(1)]
    lsm.write_history_file(storage, DIR, [_row(_ts(2))])  # the next run writes it again
    assert sorted(lsm.LSMHistory.load(storage, DIR).records) == [_ts(1), _ts(2)]
    assert storage.read(f"{DIR}/_version_") == b"2"


def test_layers_are_compacted_and_old_snapshots_cleaned(tmp_path):
    storage = LocalStorage(str(tmp_path))
    for n in range(12):
        lsm.write_history_file(storage, DIR, [_row(_ts(2 * n)), _row(_ts(2 * n + 1))])
        made = lsm.compact_history(storage, DIR, batch_size=4, retained_versions=2)
        if n % 4 == 3:
            assert made == [f"{_ts(2 * n - 6)}_{_ts(2 * n + 1)}_1.parquet"]
        else:
            assert made == []
    names = [e.file_name for e in lsm.latest_manifest(storage, DIR)[1]]
    assert sorted(names) == [
        f"{_ts(0)}_{_ts(7)}_1.parquet",
        f"{_ts(8)}_{_ts(15)}_1.parquet",
        f"{_ts(16)}_{_ts(23)}_1.parquet",
    ]
    assert sorted(lsm.LSMHistory.load(storage, DIR).records) == [_ts(n) for n in range(24)]
    on_disk = sorted(os.listdir(tmp_path / DIR))
    # 12 appends and 3 merges: 15 snapshots; the last run merged once: 2 + 1 kept
    assert [n for n in on_disk if n.startswith("manifest_")] == ["manifest_13", "manifest_14", "manifest_15"]
    kept = {e.file_name for v in (13, 14, 15) for e in lsm.read_manifest(storage, DIR, v)}
    assert {n for n in on_disk if n.endswith(".parquet")} == kept  # what no kept snapshot lists is deleted
    assert f"{_ts(0)}_{_ts(1)}_0.parquet" not in kept
    # a fourth layer-1 file: layer 1 reaches the batch size (4) and merges into layer 2
    for n in range(12, 16):
        lsm.write_history_file(storage, DIR, [_row(_ts(2 * n)), _row(_ts(2 * n + 1))])
        made = lsm.compact_history(storage, DIR, batch_size=4, retained_versions=2)
    assert made == [f"{_ts(24)}_{_ts(31)}_1.parquet", f"{_ts(0)}_{_ts(31)}_2.parquet"]
    assert [e.file_name for e in lsm.latest_manifest(storage, DIR)[1]] == [f"{_ts(0)}_{_ts(31)}_2.parquet"]
    assert sorted(lsm.LSMHistory.load(storage, DIR).records) == [_ts(n) for n in range(32)]


# -- the archiver on a layout-2 table --------------------------------------------------------------------------------
OPTS = {
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
    "clean.retain_commits": "1",
    "compaction.delta_commits": "1",
}


@pytest.fixture(scope="module")
def v9_table(tmp_path_factory):
    """A merge-on-read table of 10 delta commits and 2 compactions (the last one makes it upgradable), upgraded to
    table version 9: its timeline in `.hoodie/timeline/`, completion times in the names, Avro commit metadata."""
    path = build_table(str(tmp_path_factory.mktemp("lsm") / "t"), commits=10, compact_at=3)
    _compact(path)
    upgrade(path, 9)
    return path


def test_the_archiver_moves_instants_into_the_history(v9_table, tmp_path):
    path = shutil.copytree(v9_table, tmp_path / "t")
    table = HoodieTable(path)
    before = table.timeline.instants
    rows = table.read().sort_by("_hoodie_record_key")
    moved = archive(path, Timeline(path), parse_compaction_options(OPTS))
    assert len(moved) == len(before) - 2
    table = HoodieTable(path)
    assert table.timeline.instants == before[len(moved) :]
    history = table.archived_timeline()
    assert [(i.timestamp, i.action, i.completion_time) for i in history.instants] == [
        (i.timestamp, i.action, i.completion_time) for i in moved
    ]
    for inst in moved:  # the archived metadata is the completed file's
        assert history.commit_metadata(inst.timestamp) == Timeline(v9_table).read_commit_metadata(inst.timestamp)
    compaction = next(i for i in moved if i.action == "commit")
    plan = LocalStorage(v9_table).read(f".hoodie/timeline/{compaction.timestamp}.compaction.requested")
    assert plan and history.records[compaction.timestamp]["plan"] == plan
    assert table.read().sort_by("_hoodie_record_key").equals(rows)
    assert archive(path, Timeline(path), parse_compaction_options(OPTS)) == []  # nothing more to archive


def test_a_crashed_archiving_run_is_finished_by_the_next(v9_table, tmp_path):
    opts = parse_compaction_options(OPTS)
    reference = str(shutil.copytree(v9_table, tmp_path / "reference"))
    expected = [i.timestamp for i in archive(reference, Timeline(reference), opts)]
    commits = [i.timestamp for i in Timeline(v9_table).commits_timeline()]
    for budget in range(0, 60):
        path = str(shutil.copytree(v9_table, tmp_path / f"crash{budget}"))
        storage = CrashingStorage(path, budget)
        try:
            archive(storage, Timeline(storage), opts)
            finished = True
        except Crash:
            finished = False
        active = [i.timestamp for i in Timeline(path).commits_timeline()]
        assert commits[-len(active) :] == active, budget  # a contiguous suffix, whenever it stopped
        archive(path, Timeline(path), opts)  # the rerun
        history = lsm.LSMHistory.load(LocalStorage(path), DIR)
        assert sorted(history.records) == expected, budget
        active = [i.timestamp for i in Timeline(path).commits_timeline()]
        # an instant whose completed file a crash left (archived already) goes with the next run that archives
        assert [ts for ts in active if ts not in history.records] == commits[len(expected) :], budget
        assert commits[-len(active) :] == active, budget
        files = [e.file_name for e in lsm.latest_manifest(LocalStorage(path), DIR)[1]]
        assert len(files) == 1, (budget, files)  # written once: a rerun does not write the same instants again
        if finished:
            break
    else:
        pytest.fail("the archiving run never finished")
