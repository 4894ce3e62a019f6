"""Merging small archive files (Spark-free), as Hudi 0.15's archiver merges them on storage without appends: the
newest files up to the first large one are merged once they are `hoodie.archive.merge.files.batch.size`, into the
next version, records in their order; a merge interrupted after any number of storage operations never shows an
instant twice or loses one, and the next archiving run settles it as Hudi's verifyLastMergeArchiveFilesIfNecessary
does; a table archived run after run keeps `archived/` small and reads as before. (Apache Hudi loads merged archives:
the `archived` table of test_java_hudi_reads merges every two files.)"""

from __future__ import annotations

import pytest

from hoodie_stream.compaction import clean as cleaning
from hoodie_stream.compaction.archive_merge import PLAN_NAME, finish_interrupted_merge, merge_small_archive_files
from hoodie_stream.compaction.archiver import archive
from hoodie_stream.errors import HoodieConfigError
from hoodie_stream.format.avro.models import read_container
from hoodie_stream.format.hoodie_table import HoodieTable
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.archived_timeline import (
    ArchivedTimeline,
    archive_files,
    read_archive_file,
    read_archive_records,
    write_archive_file,
)
from hoodie_stream.format.write.writer import HoodieWriter
from hoodie_stream.options import parse_compaction_options
from hoodie_stream.storage import LocalStorage
from test_archiver import SMALL, Crash, CrashingStorage, _entry, _rows, build_table

ARCHIVED = ".hoodie/archived"


def _keys(records):
    return [(r["commitTime"], r["actionType"], r["actionState"]) for r in records]


def _archive_with_files(storage, sizes):
    """One archive file per entry count of `sizes` (a run each), instant times increasing."""
    n = 0
    for size in sizes:
        write_archive_file(storage, [_entry(f"2025010100{n + i:07d}", files=1) for i in range(size)])
        n += size


def test_the_newest_small_files_are_merged_into_the_next_version_in_order(tmp_path):
    storage = LocalStorage(str(tmp_path))
    _archive_with_files(storage, [1, 1, 40, 2, 1, 3, 1])  # the third is the large one
    before = read_archive_records(storage)
    big = archive_files(storage)[2][1].size
    limit = big - 1
    assert merge_small_archive_files(storage, "archived", 5, limit) is None  # 4 small files after the large one
    assert [v for v, _ in archive_files(storage)] == [1, 2, 3, 4, 5, 6, 7]
    copied = b"".join(storage.read(info.path) for _v, info in archive_files(storage)[3:])
    path = merge_small_archive_files(storage, "archived", 4, limit)
    assert storage.read(path) == copied  # the candidates' blocks, as they were
    assert path == f"{ARCHIVED}/.commits_.archive.8_1-0-1"
    assert [v for v, _ in archive_files(storage)] == [1, 2, 3, 8]
    assert _keys(read_archive_records(storage)) == _keys(before)  # the same records, in the same order
    assert read_archive_records(storage) == before
    assert not storage.exists(f"{ARCHIVED}/{PLAN_NAME}")
    # with a limit above every size, all of them (the merged file too is small), once they are 5
    assert merge_small_archive_files(storage, "archived", 5, big * 10) is None
    write_archive_file(storage, [_entry("20250102000000000")])
    merged = merge_small_archive_files(storage, "archived", 5, big * 10)
    assert merged == f"{ARCHIVED}/.commits_.archive.10_1-0-1" and [v for v, _ in archive_files(storage)] == [10]
    assert _keys(read_archive_records(storage)) == _keys(before) + [("20250102000000000", "deltacommit", "COMPLETED")]


def test_the_plan_is_hudis_merge_plan(tmp_path):
    class KeepPlan(LocalStorage):
        def delete(self, path):
            if path.endswith(PLAN_NAME):
                return False
            return super().delete(path)

    storage = KeepPlan(str(tmp_path))
    _archive_with_files(storage, [1, 1])
    merge_small_archive_files(storage, "archived", 2, 1 << 20)
    plan = read_container(storage.read(f"{ARCHIVED}/{PLAN_NAME}"))
    assert plan == {
        "candidate": [storage.uri_of(f"{ARCHIVED}/.commits_.archive.{v}_1-0-1") for v in (1, 2)],
        "mergedArchiveFileName": ".commits_.archive.3_1-0-1",
    }


def test_an_interrupted_merge_shows_every_instant_once_and_is_settled_by_the_next_run(tmp_path):
    sizes = [2, 1, 3, 1]
    reference = LocalStorage(str(tmp_path / "reference"))
    _archive_with_files(reference, sizes)
    expected = ArchivedTimeline.load(reference).instants
    expected_records = _keys(read_archive_records(reference))
    outcomes = set()
    for budget in range(0, 50):
        root = tmp_path / f"crash{budget}"
        _archive_with_files(LocalStorage(str(root)), sizes)
        try:
            merge_small_archive_files(CrashingStorage(str(root), budget), "archived", 4, 1 << 20)
            finished = True
        except Crash:
            finished = False
        storage = LocalStorage(str(root))
        assert ArchivedTimeline.load(storage).instants == expected, budget  # readers: each instant once
        finish_interrupted_merge(storage, "archived")
        assert not storage.exists(f"{ARCHIVED}/{PLAN_NAME}"), budget
        versions = [v for v, _ in archive_files(storage)]
        outcomes.add("merged" if versions == [5] else "rolled back" if versions == [1, 2, 3, 4] else str(versions))
        assert _keys(read_archive_records(storage)) == expected_records, budget  # nothing twice, nothing lost
        if finished:
            break
    else:
        pytest.fail("the merge never finished")
    assert outcomes == {"merged", "rolled back"}, outcomes


def test_a_torn_plan_is_removed_and_the_files_stay(tmp_path):
    storage = LocalStorage(str(tmp_path))
    _archive_with_files(storage, [1, 1])
    storage.create(f"{ARCHIVED}/{PLAN_NAME}", b"Obj\x01\x02")
    finish_interrupted_merge(storage, "archived")
    assert [v for v, _ in archive_files(storage)] == [1, 2] and not storage.exists(f"{ARCHIVED}/{PLAN_NAME}")


def test_options_are_hudis():
    opts = parse_compaction_options({})
    assert (opts.archive_merge, opts.archive_merge_files, opts.archive_merge_small_bytes) == (True, 10, 20 << 20)
    opts = parse_compaction_options(
        {
            "hoodie.archive.merge.enable": "false",
            "hoodie.archive.merge.files.batch.size": "3",
            "hoodie.archive.merge.small.file.limit.bytes": "1000",
        }
    )
    assert (opts.archive_merge, opts.archive_merge_files, opts.archive_merge_small_bytes) == (False, 3, 1000)
    with pytest.raises(HoodieConfigError, match="hoodie.archive.merge.files.batch.size"):
        parse_compaction_options({"hoodie.archive.merge.files.batch.size": "1"})


def test_a_table_archived_run_after_run_keeps_few_archive_files_and_reads_the_same(tmp_path):
    """Each archiving run writes a file; with merging on, `archived/` stays under the batch size plus the merged
    file, every instant once; without it, a file per run. Both tables read the same rows."""
    counts, rows = {}, {}
    for merge in ("true", "false"):
        path = build_table(str(tmp_path / merge / "t"), commits=6, compact_at=3, clean_retain=3)
        opts = parse_compaction_options(
            dict(SMALL, **{"hoodie.archive.merge.enable": merge, "hoodie.archive.merge.files.batch.size": "3"})
        )
        writer = HoodieWriter(path)
        written = {i.timestamp for i in Timeline(path).completed(["deltacommit"])}
        runs = 0
        for n in range(24):
            txn = writer.start()
            txn.insert_log_only("", _rows([100 + n], n))
            txn.commit()
            written.add(txn.instant)
            cleaning.clean(path, Timeline(path), opts)
            runs += bool(archive(path, Timeline(path), opts))
        storage = LocalStorage(path)
        files = archive_files(storage)
        counts[merge] = (runs, len(files))
        records = [r for _v, info in files for r in read_archive_file(storage, info.path)]
        assert len(_keys(records)) == len(set(_keys(records)))  # nothing archived twice
        archived = {i.timestamp for i in ArchivedTimeline.load(storage).completed(["deltacommit"])}
        active = {i.timestamp for i in Timeline(path).completed(["deltacommit"])}
        assert archived.isdisjoint(active) and archived | active == written  # nothing lost
        rows[merge] = HoodieTable(path).read().sort_by("_hoodie_record_key").select(["id", "ts", "v"])
    (runs, merged_files), (runs_off, files_off) = counts["true"], counts["false"]
    assert runs >= 6 and files_off == runs_off, counts
    assert merged_files <= 3, counts
    assert rows["true"].equals(rows["false"])
