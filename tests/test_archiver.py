"""Timeline archiving (Spark-free): archive files round-trip against Hudi 0.15's HoodieArchivedMetaEntry schema,
the instants chosen follow a plain model of Hudi 0.15's HoodieTimelineArchiver rules, readers see the same rows
once instants are archived, and a run interrupted after any number of storage operations is finished by the next
one: every instant archived exactly once, the active timeline a contiguous suffix."""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hoodie_stream.compaction import clean as cleaning
from hoodie_stream.compaction.archiver import archive, instants_to_archive
from hoodie_stream.compaction.execute import compact_operation
from hoodie_stream.compaction.operation import plan_operations
from hoodie_stream.compaction.plan import pending_plans, schedule_compaction
from hoodie_stream.errors import HoodieConfigError
from hoodie_stream.format.hoodie_table import HoodieTable
from hoodie_stream.format.log_file.log_block import BlockType, HeaderKey
from hoodie_stream.format.log_file.reader import read_log_file
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.archived_timeline import (
    SCHEMA,
    ArchivedTimeline,
    archive_files,
    encode_archive_blocks,
    meta_entry,
    read_archive_records,
    write_archive_file,
)
from hoodie_stream.format.timeline.commit_metadata import CommitMetadata
from hoodie_stream.format.timeline.instant import Instant
from hoodie_stream.format.write.writer import HoodieWriter
from hoodie_stream.options import parse_compaction_options
from hoodie_stream.storage import LocalStorage
from oracle import assert_same_rows, rs_read

SCHEMA_SHA256 = "8203d069f518b22b168ca699681bf568d02f78b81997adce33ec735f04da9e9c"  # Hudi 0.15.0's, 14903 chars
SMALL = {
    "hoodie.keep.min.commits": "3",
    "hoodie.keep.max.commits": "5",
    "clean.retain_commits": "2",
    "compaction.delta_commits": "3",
}


# -- the archive file format ---------------------------------------------------------------------------------------
def test_the_schema_is_hudi_0_15s_verbatim():
    assert len(SCHEMA) == 14903
    assert hashlib.sha256(SCHEMA.encode()).hexdigest() == SCHEMA_SHA256


def _entry(ts, action="deltacommit", state="COMPLETED", files=2):
    stats = [
        {"fileId": f"f{i}", "path": f"p/.f{i}_0.log.1_0-1-1", "prevCommit": "null", "numWrites": i, "numInserts": i}
        for i in range(files)
    ]
    return {
        "commitTime": ts,
        "actionType": action,
        "version": None,
        "actionState": state,
        "stateTransitionTime": ts,
        "hoodieCommitMetadata": {
            "partitionToWriteStats": {"p": stats},
            "extraMetadata": {"schema": "{}", "ROLLING_STAT": ""},
            "version": None,
            "operationType": "UPSERT",
        },
    }


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=25), st.integers(1, 12))
def test_blocks_hold_batch_records_encoded_as_fastavro_encodes_them(files, batch):
    entries = [_entry(f"2025010100000{i:04d}", files=n) for i, n in enumerate(files)]
    blocks = encode_archive_blocks(entries, batch)
    assert [b.block_type for b in blocks] == [BlockType.AVRO_DATA] * -(-len(entries) // batch)
    parsed = fastavro.parse_schema(json.loads(SCHEMA))
    k = 0
    for block in blocks:
        assert block.header == {HeaderKey.SCHEMA: SCHEMA}  # the one header entry, no INSTANT_TIME
        content = io.BytesIO(block.content)
        assert int.from_bytes(content.read(4), "big") == 3
        count = int.from_bytes(content.read(4), "big")
        assert count == min(batch, len(entries) - k)
        for _ in range(count):
            size = int.from_bytes(content.read(4), "big")
            expected = io.BytesIO()
            fastavro.schemaless_writer(expected, parsed, entries[k])
            assert content.read(size) == expected.getvalue()
            k += 1
    assert k == len(entries)


def test_archive_files_round_trip_with_versions(tmp_path):
    storage = LocalStorage(str(tmp_path))
    first = [_entry("20250101000000001", state=s) for s in ("REQUESTED", "INFLIGHT", "COMPLETED")]
    second = [_entry("20250101000000002")]
    assert write_archive_file(storage, first, 2).endswith(".commits_.archive.1_1-0-1")
    assert write_archive_file(storage, second).endswith(".commits_.archive.2_1-0-1")
    assert [v for v, _ in archive_files(storage)] == [1, 2]
    blocks = read_log_file(storage, ".hoodie/archived/.commits_.archive.1_1-0-1")
    assert [len(b.content) > 8 for b in blocks] == [True, True] and blocks[0].footer == {}
    records = read_archive_records(storage)
    assert [(r["commitTime"], r["actionState"]) for r in records] == [
        ("20250101000000001", "REQUESTED"),
        ("20250101000000001", "INFLIGHT"),
        ("20250101000000001", "COMPLETED"),
        ("20250101000000002", "COMPLETED"),
    ]
    assert records[0]["hoodieCommitMetadata"]["partitionToWriteStats"]["p"][1]["numWrites"] == 1
    timeline = ArchivedTimeline.of(records + records)  # an instant archived twice is listed once
    assert [(i.timestamp, i.state) for i in timeline.completed()] == [
        ("20250101000000001", "completed"),
        ("20250101000000002", "completed"),
    ]
    meta = timeline.commit_metadata("20250101000000002")
    assert meta.operation_type == "UPSERT" and meta.all_write_stats()[1].num_inserts == 1


def test_meta_entry_converts_as_hudi_does():
    meta = CommitMetadata.from_dict(
        {
            "partitionToWriteStats": {
                "": [{"fileId": "f", "path": "x", "numWrites": 2, "logVersion": 3, "totalLogFilesCompacted": 1}]
            },
            "compacted": True,
            "extraMetadata": {"schema": "s"},
            "operationType": "UPSERT",
        }
    )
    entry = meta_entry(Instant("20250101000000001", "commit", "completed"), meta.to_json(), 0.0)
    avro = entry["hoodieCommitMetadata"]
    assert avro["operationType"] == "COMPACT" and avro["version"] is None
    assert avro["extraMetadata"] == {"schema": "s", "ROLLING_STAT": ""}
    stat = avro["partitionToWriteStats"][""][0]
    assert stat["totalLogFiles"] is None and "logVersion" not in stat and stat["numWrites"] == 2
    requested = meta_entry(Instant("20250101000000001", "deltacommit", "requested"), b"", 0.0)
    assert requested["hoodieCommitMetadata"] == {
        "partitionToWriteStats": {},
        "extraMetadata": {"ROLLING_STAT": ""},
        "version": None,
        "operationType": "UNKNOWN",
    }
    empty = meta_entry(Instant("20250101000000001", "deltacommit", "completed"), b"", 0.0)
    assert "hoodieCommitMetadata" not in empty and empty["actionState"] == "COMPLETED"
    assert meta_entry(Instant("1", "rollback", "inflight"), b"", 0.0).keys() == empty.keys()


def test_keep_max_must_exceed_keep_min():
    with pytest.raises(HoodieConfigError, match="archive.max_commits.*greater than 'archive.min_commits'"):
        parse_compaction_options({"hoodie.keep.min.commits": "30", "hoodie.keep.max.commits": "30"})


# -- the choice of instants, against a model of Hudi's rules ---------------------------------------------------------
ACTIONS = st.sampled_from(
    [("deltacommit", "completed")] * 6
    + [
        ("commit", "completed"),  # a completed compaction
        ("compaction", "requested"),
        ("deltacommit", "inflight"),
        ("clean", "completed"),
        ("clean", "completed"),
        ("rollback", "completed"),
        ("savepoint", "completed"),
    ]
)


def model_choice(instants, low, high, retain, delta_max):
    """Hudi 0.15's choice (KEEP_LATEST_COMMITS, num_commits trigger), over (ts, action, state) triples."""
    done = [t for t, a, s in instants if s == "completed" and a in ("commit", "deltacommit", "replacecommit")]
    pend = [t for t, a, s in instants if s != "completed" and a in ("commit", "deltacommit", "replacecommit")]
    if len(done) > retain:
        ectr = done[len(done) - retain]
        if pend and ectr > pend[0]:
            older = [t for t in done if t < pend[0]]
            ectr = older[-1] if older else None
        if ectr is not None and low < sum(t > ectr for t in done) + 2:
            low, high = sum(t > ectr for t in done) + 2, sum(t > ectr for t in done) + 2 + high - low
    out = []
    for action in ("rollback", "clean"):
        mine = [t for t, a, s in instants if a == action and s == "completed"]
        if len(mine) > high:
            out += [(t, action) for t in mine[: len(mine) - low]]
    if len(done) > high:
        bounds = []
        writes = [t for t, a, s in instants if s != "completed" and a in ("commit", "deltacommit", "compaction")]
        if writes:
            older = [t for t in done if t < writes[0]]
            bounds.append(older[-1] if older else writes[0])
        bounds += [t for t, a, s in instants if a == "savepoint"][:1]
        compactions = [t for t, a, s in instants if a == "commit" and s == "completed"]
        last = compactions[-1] if compactions else None
        deltas = [t for t, a, s in instants if a == "deltacommit" and (last is None or t > last)]
        if last or deltas:
            bounds.append((last or deltas[0]) if len(deltas) < delta_max else deltas[len(deltas) - delta_max])
        chosen = [t for t in done if not bounds or t < min(bounds)][: len(done) - low]
        actions = {t: a for t, a, s in instants}
        out += [(t, actions[t]) for t in chosen]
    return out


_TIMELINES = itertools.count()


def _timeline_dir(tmp_path, steps):
    storage = LocalStorage(str(tmp_path / f"t{next(_TIMELINES)}"))
    storage.make_dirs(".hoodie")
    instants = []
    for n, (action, state) in enumerate(steps):
        ts = f"20250101{n:09d}"
        states = ["requested", "inflight", "completed"]
        for s in states[: states.index(state) + 1]:
            inst = Instant(ts, action, s)
            if action == "commit" and s != "completed":
                inst = Instant(ts, "compaction", s)
            storage.create(f".hoodie/{inst.file_name}", b"")
        instants.append((ts, action, state))
    return storage, instants


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(ACTIONS, min_size=0, max_size=24), st.integers(1, 4), st.integers(1, 3), st.integers(1, 6))
def test_choice_follows_hudis_rules(tmp_path, steps, low, spread, retain):
    storage, instants = _timeline_dir(tmp_path, steps)
    opts = parse_compaction_options(
        {
            "hoodie.keep.min.commits": str(low),
            "hoodie.keep.max.commits": str(low + spread),
            "clean.retain_commits": str(retain),
            "compaction.delta_commits": "3",
        }
    )
    chosen = [(i.timestamp, i.action) for i in instants_to_archive(Timeline(storage), opts)]
    assert chosen == model_choice(instants, low, low + spread, retain, 3)


# -- a real table ------------------------------------------------------------------------------------------------
def _rows(ids, ts):
    return pa.table({"id": [f"k{i}" for i in ids], "ts": [ts] * len(ids), "v": [f"v{ts}"] * len(ids)})


def _compact(path):
    tl = Timeline(path)
    opts = parse_compaction_options()
    instant = schedule_compaction(path, tl, opts, force=True)
    ops = plan_operations(pending_plans(tl)[instant])
    tl.transition_to_inflight(instant, "compaction", b"")
    committed = {i.timestamp for i in tl.commits_timeline()}
    stats = [compact_operation(path, instant, op, committed, 100 << 20, f"{k}-0-0")[0] for k, op in enumerate(ops)]
    tl.complete(instant, "compaction", CommitMetadata({}, True, {}, "COMPACT").with_stats(stats).to_json())
    return instant


def build_table(path, commits=12, compact_at=5, clean_retain=8):
    """A log-only file group updated by every delta commit, compacted once, then cleaned."""
    schema = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string())])
    writer = HoodieWriter.create(path, table_name="t", record_key_fields=["id"], schema=schema, precombine_field="ts")
    txn = writer.start()
    file_id = txn.insert_log_only("", _rows(range(8), 0)).file_id
    txn.commit()
    base = txn.instant
    for n in range(1, commits):
        txn = writer.start()
        txn.append_log("", file_id, base, _rows([n % 8, 8 + n], n), num_inserts=1)
        txn.commit()
        if n == compact_at:
            base = _compact(path)
    cleaning.clean(
        path, Timeline(path), parse_compaction_options(dict(SMALL, **{"clean.retain_commits": str(clean_retain)}))
    )
    return path


@pytest.fixture(scope="module")
def table_dir(tmp_path_factory):
    return build_table(str(tmp_path_factory.mktemp("archive") / "t"))


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return str(dst)


def test_reads_are_the_same_after_archiving(table_dir, tmp_path):
    path = _copy(table_dir, tmp_path / "t")
    table = HoodieTable(path)
    active = [i.timestamp for i in table.timeline.commits_timeline()]
    before = {
        "snapshot": table.read(),
        "read_optimized": table.read("read_optimized"),
        "as_of": table.read(as_of=active[6]),
        "incremental": table.read("incremental", start=active[-4]),
    }
    moved = archive(path, Timeline(path), parse_compaction_options(SMALL))
    assert [i.timestamp for i in moved] == active[: len(moved)] and len(moved) > 6
    table = HoodieTable(path)
    assert table.timeline.commits_timeline()[0].timestamp == active[len(moved)]
    after = {
        "snapshot": table.read(),
        "read_optimized": table.read("read_optimized"),
        "as_of": table.read(as_of=active[6]),  # before the active timeline: archived slices count
        "incremental": table.read("incremental", start=active[-4]),
    }
    for query, rows in before.items():
        assert after[query].sort_by("_hoodie_record_key").equals(rows.sort_by("_hoodie_record_key")), query
    # hudi-rs, which does not read the archive, counts the archived slices as committed too
    assert_same_rows(after["snapshot"], rs_read(path), context="hudi-rs snapshot after archiving")
    assert_same_rows(after["read_optimized"], rs_read(path, "read_optimized"), context="hudi-rs read_optimized")
    archived = table.archived_timeline()
    assert [i.timestamp for i in archived.completed()] == [i.timestamp for i in moved]
    assert [i.state for i in archived.instants[:3]] == ["requested", "inflight", "completed"]
    compaction = [i for i in archived.instants if i.action in ("compaction", "commit")]
    assert [(i.action, i.state) for i in compaction] == [
        ("compaction", "requested"),
        ("compaction", "inflight"),
        ("commit", "completed"),
    ]
    assert archived.record(compaction[0].timestamp, "compaction", "requested")["hoodieCompactionPlan"]["operations"]
    assert not archive(path, Timeline(path), parse_compaction_options(SMALL))  # nothing more to archive


def test_cli_shows_archived_instants(table_dir, tmp_path):
    from hoodie_stream.cli import show, validate

    path = _copy(table_dir, tmp_path / "t")
    archive(path, Timeline(path), parse_compaction_options(SMALL))
    table = HoodieTable(path)
    rows = show.timeline(table).to_pylist()
    archived = [r for r in rows if r["archived"]]
    assert archived and all(r["completed_time"] is not None for r in archived if r["state"] == "completed")
    assert [r["instant"] for r in rows] == sorted(r["instant"] for r in rows)
    commits = show.completed_commits(table).to_pylist()
    assert commits[0]["archived"] and commits[0]["records_written"] == 8
    report = validate.validate(table, index=False)
    assert report.valid, report.text()
    assert report.checked["archived_instants"] == len({r["instant"] for r in archived})


# -- crash safety ------------------------------------------------------------------------------------------------
class Crash(Exception):
    pass


class CrashingStorage(LocalStorage):
    """A local storage that fails every change after the first `budget` ones."""

    def __init__(self, root, budget):
        super().__init__(root)
        self.budget = budget

    def _spend(self):
        if self.budget <= 0:
            raise Crash()
        self.budget -= 1

    @contextlib.contextmanager
    def open_output(self, path, create=False):
        self._spend()
        with super().open_output(path, create) as f:
            yield f

    def delete(self, path):
        self._spend()
        return super().delete(path)

    def delete_many(self, paths):
        self._spend()
        return super().delete_many(paths)

    def delete_tree(self, path):
        self._spend()
        return super().delete_tree(path)


def _state(path):
    storage = LocalStorage(path)
    records = read_archive_records(storage)
    keys = [(r["commitTime"], r["actionType"], r["actionState"]) for r in records]
    return Timeline(path), keys


def test_a_crashed_run_is_finished_by_the_next(table_dir, tmp_path):
    opts = parse_compaction_options(SMALL)
    reference = _copy(table_dir, tmp_path / "reference")
    expected_moved = [i.timestamp for i in archive(reference, Timeline(reference), opts)]
    _, expected_records = _state(reference)
    expected_rows = HoodieTable(reference).read().sort_by("_hoodie_record_key")
    all_commits = [i.timestamp for i in Timeline(table_dir).commits_timeline()]
    for budget in range(0, 200):
        path = _copy(table_dir, tmp_path / f"crash{budget}")
        try:
            archive(CrashingStorage(path, budget), Timeline(path), opts)
            finished = True
        except Crash:
            finished = False
        timeline, records = _state(path)
        active = [i.timestamp for i in timeline.commits_timeline()]
        assert all_commits[-len(active) :] == active  # a contiguous suffix, whenever it stopped
        archive(path, Timeline(path), opts)  # the rerun
        timeline, records = _state(path)
        assert len(records) == len(set(records))  # nothing archived twice
        assert sorted(records) == sorted(expected_records), budget  # nothing lost
        assert [i.timestamp for i in timeline.commits_timeline()] == all_commits[len(expected_moved) :]
        assert HoodieTable(path).read().sort_by("_hoodie_record_key").equals(expected_rows)
        if finished:
            break
    else:
        pytest.fail("the archiving run never finished")


# -- SIGKILL during archiving ------------------------------------------------------------------------------------
KILL_CHILD = """
import sys, time
from hoodie_stream.compaction.archiver import archive
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.options import parse_compaction_options
path, opts = sys.argv[1], dict(zip(sys.argv[2::2], sys.argv[3::2]))
timeline = Timeline(path)
print("go", flush=True)
started = time.monotonic()
archive(path, timeline, parse_compaction_options(opts))
print(f"done {time.monotonic() - started:.3f}", flush=True)
"""


def _archive_child(path, opts):
    import subprocess
    import sys

    args = [x for kv in opts.items() for x in kv]
    child = subprocess.Popen([sys.executable, "-c", KILL_CHILD, path, *args], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "go"
    return child


@pytest.fixture(scope="module")
def long_table(tmp_path_factory):
    """60 commits (a compaction at the 50th), cleaned keeping 50: an archiving run moves 56 instants."""
    return build_table(str(tmp_path_factory.mktemp("archive-kill") / "t"), commits=60, compact_at=50, clean_retain=50)


def test_sigkill_during_archiving_loses_nothing(long_table, tmp_path):
    """The archiving run is SIGKILLed at random moments in a child process; whatever it reached, the table reads
    the same rows, the active timeline is a contiguous suffix, and the next run archives exactly what an
    uninterrupted one does, nothing twice."""
    import random
    import signal
    import time

    opts = {"hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "5", "clean.retain_commits": "2"}
    reference = _copy(long_table, tmp_path / "reference")
    child = _archive_child(reference, opts)
    out, _ = child.communicate(timeout=120)
    duration = float(out.split()[-1])
    _, expected_records = _state(reference)
    expected_rows = HoodieTable(reference).read().sort_by("_hoodie_record_key")
    all_commits = [i.timestamp for i in Timeline(long_table).commits_timeline()]
    kept = [i.timestamp for i in Timeline(reference).commits_timeline()]
    rng = random.Random(7)
    reached = set()

    def archive_written(path):  # a complete archive file in .hoodie/archived (not the storage's temporary name)
        folder = os.path.join(path, ".hoodie", "archived")
        names = os.listdir(folder) if os.path.isdir(folder) else []
        return any(n.startswith(".commits_.archive.") and not n.endswith(".tmp") for n in names)

    def active_files(path):
        return sum(e.is_file() for e in os.scandir(os.path.join(path, ".hoodie")))

    # two kills at random moments of the run's measured length, then two on what the parent sees in the table
    # (this machine's speed varies, the events do not): once the archive file is written, once deleting began
    for n, moment in enumerate(["random", "random", "archive file written", "active files deleted"]):
        path = _copy(long_table, tmp_path / f"kill{n}")
        before = active_files(path)
        child = _archive_child(path, opts)
        if moment == "random":
            time.sleep(rng.uniform(0.05, 1.0) * duration)
        else:
            seen = (
                archive_written
                if moment == "archive file written"
                else lambda p, before=before: active_files(p) < before
            )
            deadline = time.monotonic() + 120
            while child.poll() is None and not seen(path) and time.monotonic() < deadline:
                time.sleep(0.001)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        timeline, records = _state(path)
        active = [i.timestamp for i in timeline.commits_timeline()]
        reached.add(  # where the kill landed
            "none" if not records
            else "archived" if len(active) == len(all_commits)
            else "done" if active == kept
            else "deleting"
        )  # fmt: skip
        assert all_commits[-len(active) :] == active, n  # no hole, wherever it stopped
        assert HoodieTable(path).read().sort_by("_hoodie_record_key").equals(expected_rows), n
        archive(path, Timeline(path), parse_compaction_options(opts))  # the next run
        timeline, records = _state(path)
        assert len(records) == len(set(records)) and sorted(records) == sorted(expected_records), n
        assert [i.timestamp for i in timeline.commits_timeline()] == kept, n
        assert HoodieTable(path).read().sort_by("_hoodie_record_key").equals(expected_rows), n
    assert reached & {"archived", "deleting"}, f"no kill landed inside the run ({reached})"
