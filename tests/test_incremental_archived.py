"""Incremental reads whose window reaches the archived timeline (Spark-free), on tables this project's writer makes
and its archiver archives, against a plain-Python model of Hudi's rules (what Hudi 0.15 and 1.2 answer:
tests/test_java_hudi_incremental_archived.py):

- table version 9 (timeline layout 2, the LSM history), as Hudi 1.x: the window is the commits, archived ones
  included, that completed in [start, end]; the rows are the latest versions (as of the window's last commit) of
  the records those commits wrote, file groups only archived commits wrote among them;
- table version 6 (layout 1, `.hoodie/archived/`), as Hudi's V1 incremental relation: the window's commits are
  the active timeline's in (start, end]; the rows are the latest versions, in the file groups they wrote, of the
  records with commit times in (start, end]; a file group only archived commits wrote is not read;
- a window whose last slice a clean deleted is refused, naming the file (Hudi fails on it); one open at its end
  reads the latest slices.

hudi-rs (tests/oracle.py `rs_read`) reads layout 2 but not the LSM history: it agrees on windows inside the active
timeline and, on a window reaching the history, returns only the rows of the active commits."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

from hoodie_stream import HoodieTable
from hoodie_stream.compaction.archiver import archive
from hoodie_stream.format.read.time_travel import HoodieTimeTravelError, incremental_instants
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.write.writer import HoodieWriter
from hoodie_stream.options import parse_compaction_options
from oracle import rs_read

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("p", pa.string()), ("v", pa.string())])
ARCHIVE = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "compaction.delta_commits": "1"}
COMMITS = 9


def _rows(keys, partition, n):
    return pa.Table.from_pylist([{"id": k, "ts": n, "p": partition, "v": f"{k}@{n}"} for k in keys], SCHEMA)


def build(path, version):
    """Commit 0 opens file group A (partition a), commit 1 file group B (partition b, no later commit writes it),
    commits 2.. update a key of A and insert one; then archived (the first commits leave the active timeline).
    Returns the model: per commit (instant time, {key: value}) in order."""
    writer = HoodieWriter.create(
        path,
        table_name="t",
        record_key_fields=["id"],
        schema=SCHEMA,
        precombine_field="ts",
        partition_fields=["p"],
        table_version=version,
    )
    written = []
    txn = writer.start()
    group_a = txn.insert_log_only("a", _rows(["a0", "a1", "a2"], "a", 0)).file_id
    txn.commit()
    base_a = txn.instant
    written.append((txn.instant, {k: f"{k}@0" for k in ("a0", "a1", "a2")}))
    txn = writer.start()
    txn.insert_log_only("b", _rows(["b0", "b1"], "b", 1))
    txn.commit()
    written.append((txn.instant, {k: f"{k}@1" for k in ("b0", "b1")}))
    for n in range(2, COMMITS):
        keys = [f"a{n % 3}", f"a{n + 10}"]
        txn = writer.start()
        txn.append_log("a", group_a, base_a, _rows(keys, "a", n), num_inserts=1)
        txn.commit()
        written.append((txn.instant, {k: f"{k}@{n}" for k in keys}))
    moved = archive(path, Timeline(path), parse_compaction_options({**ARCHIVE, "clean.retain_commits": "20"}))
    assert [i.timestamp for i in moved if i.action == "deltacommit"][:2] == [written[0][0], written[1][0]]
    return written


@pytest.fixture(scope="module", params=[6, 9])
def table(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp(f"incr_archived_v{request.param}") / "t")
    return path, request.param, build(path, request.param)


def model(written, window):
    """The rows (commit time, key, value) Hudi returns for the window: it reads the latest slices made of the files
    the window's commits wrote, so the latest version of every key among those commits' writes."""
    latest = {}
    for ts, rows in written:
        if ts in window:
            latest.update({k: (ts, k, v) for k, v in rows.items()})
    return sorted(latest.values())


def _rows_of(table):
    return sorted((r["_hoodie_commit_time"], r["id"], r["v"]) for r in table.to_pylist())


def test_windows_reaching_the_archive_read_as_hudi_does(table):
    path, version, written = table
    hoodie = HoodieTable(path)
    archived = {i.timestamp for i in hoodie.archived_timeline().completed(["deltacommit"])}
    assert {written[0][0], written[1][0]} <= archived
    active = [i for i in hoodie.timeline.commits_timeline()]
    done = {i.timestamp: i.completion_time or i.timestamp for i in active}
    everything = [ts for ts, _ in written]
    starts = [None, "000", everything[0], everything[1], everything[2], active[0].timestamp]
    ends = [None, everything[1], active[0].timestamp, active[-1].timestamp]
    for start in starts:
        for end in ends:
            if version >= 8:  # by completion time, both ends included
                window = {ts for ts in everything if (start is None or _done(hoodie, ts, done) >= start)}
                window = {ts for ts in window if end is None or _done(hoodie, ts, done) <= end}
            else:
                window = {ts for ts in done if (start is None or ts > start) and (end is None or ts <= end)}
            assert {i.timestamp for i in incremental_instants(hoodie.timeline, start, end)} == window, (start, end)
            expected = model(written, window)
            ours = _rows_of(hoodie.read("incremental", start=start, end=end))
            assert ours == expected, (version, start, end)


def _done(hoodie, ts, active_done):
    """The completion time of `ts` (layout 2; from the LSM history for an archived instant)."""
    if ts in active_done:
        return active_done[ts]
    return hoodie.archived_timeline().completion_times().get(ts, ts)  # type: ignore[attr-defined]


def test_from_the_first_commit_version_9_reads_what_the_archived_commits_wrote(table):
    path, version, written = table
    hoodie = HoodieTable(path)
    ours = _rows_of(hoodie.read("incremental", start="000"))
    active = {i.timestamp for i in hoodie.timeline.commits_timeline()}
    if version >= 8:  # b0, b1 too: only archived commit 1 wrote them
        assert {r[1] for r in ours} == {k for _ts, rows in written for k in rows}
    else:  # the keys the active commits wrote
        assert {r[1] for r in ours} == {k for ts, rows in written if ts in active for k in rows}
    # hudi-rs reads the active timeline only: the rows of the active commits
    theirs = _rows_of(rs_read(path, "incremental", start="000"))
    assert theirs == [r for r in ours if r[0] in active]
    start = sorted(active)[0]
    inside = hoodie.read("incremental", start=start)
    assert _rows_of(inside) == _rows_of(rs_read(path, "incremental", start=start))


def test_a_window_whose_slice_was_cleaned_is_refused_an_open_one_reads(table, tmp_path):
    path, version, written = table
    path = str(shutil.copytree(path, tmp_path / "t"))
    before = _rows_of(HoodieTable(path).read("incremental", start="000"))
    # the files of the archived commits' file group B go (as a clean whose record was archived deletes them)
    gone = [p for p in (tmp_path / "t" / "b").iterdir() if ".log." in p.name]
    assert gone
    for p in gone:
        p.unlink()
    hoodie = HoodieTable(path)
    first_active = hoodie.timeline.commits_timeline()[0].timestamp
    if version >= 8:  # the window reads B's only slice, made of archived commit 1's log file: Hudi 1.2 fails on it
        end = _done(hoodie, written[1][0], {})
        with pytest.raises(HoodieTimeTravelError, match=r"reads b/.*\.log\.1_0-0-0, which a clean deleted"):
            hoodie.read("incremental", start="000", end=end)
        with pytest.raises(HoodieTimeTravelError, match=r"reads b/"):
            hoodie.read("incremental", start="000")
    else:  # no active commit in the window: nothing read (Hudi 0.15 answers no rows); B is never read
        assert hoodie.read("incremental", start="000", end=written[1][0]).num_rows == 0
        assert _rows_of(hoodie.read("incremental", start="000")) == before
    # a window that starts in the active timeline does not read B
    assert "b" not in {r["p"] for r in hoodie.read("incremental", start=first_active).to_pylist()}
