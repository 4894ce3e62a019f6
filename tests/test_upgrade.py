"""`hoodie-stream upgrade PATH --to 8|9` (format/write/upgrade.py) on real version 6 tables: the upgraded table reads
as it read before, through HoodieTable and hudi-rs, for every query type; its timeline and hoodie.properties are
Hudi 1.x's; what is not upgraded is refused, naming why, with the table left as it was; an interrupted upgrade is
finished by the next run. (Apache Hudi 1.2 reads tables the sink wrote and this command upgraded in
tests/test_java_hudi_versions.py.)"""

from __future__ import annotations

import os

import pytest

from hoodie_stream import HoodieTable
from hoodie_stream.__main__ import main
from hoodie_stream.errors import HoodieError
from hoodie_stream.format.avro.models import read_container
from hoodie_stream.format.table import config as table_config
from hoodie_stream.format.table import versions
from hoodie_stream.format.timeline.instant import Instant
from hoodie_stream.format.write import upgrade as upgrades
from oracle import assert_same_rows, rs_read

COW = ["sample-cow-v6_complexkeygen_hivestyle", "sample-cow-v6_simplekeygen_nonhivestyle"]
TRIPS = "trips-mor-avro-v6_trips_8i3d"


def reads(table):
    """Every query type's answer, keyed by the query (the instants are the same before and after the upgrade)."""
    commits = [i.timestamp for i in table.timeline.commits_timeline()]
    out = {"snapshot": table.read(), "read_optimized": table.read("read_optimized")}
    for ts in commits:
        out[f"as of {ts}"] = table.read(as_of=ts)
    if table.meta_fields:
        out["incremental"] = table.read("incremental")
    return out


def files_of(base):
    return sorted(os.path.relpath(os.path.join(d, f), base) for d, _, fs in os.walk(base) for f in fs)


@pytest.mark.parametrize("to", [8, 9])
@pytest.mark.parametrize("name", COW)
def test_an_upgraded_table_reads_as_before(fixture_table, capsys, name, to):
    base = fixture_table(name)
    before = reads(HoodieTable(base))
    data_files = [f for f in files_of(base) if not f.startswith(".hoodie")]
    assert main(["upgrade", str(base), "--to", str(to)]) == 0
    assert f"upgraded to table version {to}" in capsys.readouterr().out
    table = HoodieTable(base)
    assert table.config.version == to and table.timeline.layout == 2
    assert [f for f in files_of(base) if not f.startswith(".hoodie")] == data_files  # data files untouched
    assert not [f for f in os.listdir(base / ".hoodie") if Instant.from_file_name(f)], "old timeline files left"
    after = reads(table)
    assert after.keys() == before.keys()
    for query, rows in before.items():
        assert_same_rows(after[query], rows, context=f"{name} {query} after the upgrade to {to}")
    assert_same_rows(after["snapshot"], rs_read(base), context="hudi-rs")
    for inst in table.timeline.commits_timeline():
        assert inst.completion_time >= inst.timestamp
        raw = (base / ".hoodie" / "timeline" / inst.file_name).read_bytes()
        assert raw.startswith(b"Obj\x01") and read_container(raw)["operationType"]  # Avro, as Hudi 1.x writes it
    props = table.config.props
    assert props["hoodie.timeline.layout.version"] == "2" and props["hoodie.table.initial.version"] == "6"
    assert props["hoodie.record.merge.mode"] == "EVENT_TIME_ORDERING"  # an ordering field, Hudi's default payload
    assert props["hoodie.table.keygenerator.type"] in ("COMPLEX", "SIMPLE")
    if to == 9:
        assert "hoodie.table.precombine.field" not in props and props["hoodie.table.ordering.fields"]
        assert "hoodie.compaction.payload.class" not in props and "hoodie.record.merge.strategy.id" not in props
        assert props["hoodie.table.legacy.payload.class"].endswith("DefaultHoodieRecordPayload")
    else:
        assert props["hoodie.record.merge.strategy.id"] == versions.EVENT_TIME_STRATEGY
    # again: nothing to do
    assert main(["upgrade", str(base), "--to", str(to), "--json"]) == 0
    assert '"instants": 0' in capsys.readouterr().out


def test_an_interrupted_upgrade_leaves_a_readable_table_and_the_next_run_finishes_it(fixture_table, monkeypatch):
    base = fixture_table(COW[0])
    before = HoodieTable(base).read()

    def crash(*_args, **_kwargs):
        raise OSError("killed")

    monkeypatch.setattr(upgrades, "modify_properties", crash)  # killed after the new timeline, before the switch
    with pytest.raises(OSError):
        upgrades.upgrade(str(base), 8)
    table = HoodieTable(base)
    assert table.config.version == 6 and len(table.timeline.commits_timeline()) == 2
    assert_same_rows(table.read(), before, context="after the crash")
    monkeypatch.setattr(upgrades, "modify_properties", table_config.modify_properties)
    monkeypatch.setattr(upgrades, "_delete_old", lambda storage: crash())  # killed after the switch
    with pytest.raises(OSError):
        upgrades.upgrade(str(base), 8)
    assert HoodieTable(base).config.version == 8
    assert_same_rows(HoodieTable(base).read(), before, context="switched, old files left")
    monkeypatch.undo()
    result = upgrades.upgrade(str(base), 8)
    assert result["instants"] == 0 and result["deleted"] == 6
    assert_same_rows(HoodieTable(base).read(), before, context="finished")


@pytest.mark.parametrize(
    ("name", "damage", "why"),
    [
        (TRIPS, None, "log files in their latest slice"),
        (COW[0], "pending", "pending instants"),
        ("sample-cow-v6_simplekeygen_nonhivestyle_overwritetable", None, "replace commits"),
    ],
)
def test_what_is_not_upgraded_is_refused_and_left_as_it_was(fixture_table, name, damage, why):
    base = fixture_table(name)
    if damage == "pending":
        (base / ".hoodie" / "29990101000000000.commit.requested").write_bytes(b"")
    files = {f: (base / f).read_bytes() for f in files_of(base)}
    with pytest.raises(HoodieError, match=why):
        upgrades.upgrade(str(base), 8)
    assert {f: (base / f).read_bytes() for f in files_of(base)} == files


def test_a_payload_version_9_expresses_with_merge_properties_is_refused_at_9_not_at_8(fixture_table):
    base = fixture_table(COW[0])
    table_config.modify_properties(
        base, {"hoodie.compaction.payload.class": "org.apache.hudi.common.model.PartialUpdateAvroPayload"}
    )
    with pytest.raises(HoodieError, match="PartialUpdateAvroPayload .* upgrade to 8"):
        upgrades.upgrade(str(base), 9)
    upgrades.upgrade(str(base), 8)
    assert HoodieTable(base).config.props["hoodie.record.merge.mode"] == "CUSTOM"


def test_sigkill_at_random_moments_of_an_upgrade_then_run_it_again(fixture_table, tmp_path):
    """The command killed (SIGKILL) at seeded random moments of its work, on fresh copies of a table: watched from
    outside, from the moment its first file appears in `.hoodie/timeline/` to its end (measured on a first run).
    After each kill the table reads as before (at version 6 or 8, whichever the kill left), and running the command
    again finishes the upgrade."""
    import random
    import shutil
    import signal
    import subprocess
    import sys
    import time

    source = fixture_table(COW[1])
    expected = HoodieTable(source).read()

    def start(base):
        command = [sys.executable, "-m", "hoodie_stream", "upgrade", str(base), "--to", "8"]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while not (base / ".hoodie" / "timeline").exists() and proc.poll() is None:
            assert time.monotonic() < deadline
        return proc, time.monotonic()

    proc, began = start(shutil.copytree(source, tmp_path / "timed"))
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    work = time.monotonic() - began
    rng = random.Random(20261129)
    seen = set()
    for i in range(10):
        base = shutil.copytree(source, tmp_path / f"copy-{i}")
        proc, began = start(base)
        time.sleep(max(0.0, began + rng.uniform(0, work) - time.monotonic()))
        proc.send_signal(signal.SIGKILL)
        finished = proc.wait(timeout=120) == 0
        table = HoodieTable(base)
        old_left = bool(list((base / ".hoodie").glob("*.commit")))
        seen.add((finished, table.config.version, old_left))
        assert_same_rows(table.read(), expected, context=f"killed run {i}: {seen}")
        assert (
            subprocess.run([sys.executable, "-m", "hoodie_stream", "upgrade", str(base), "--to", "8"]).returncode == 0
        )
        table = HoodieTable(base)
        assert table.config.version == 8 and not list((base / ".hoodie").glob("*.commit")), f"run {i}"
        assert_same_rows(table.read(), expected, context=f"run {i} finished")
    assert (False, 6, True) in seen, f"no kill landed before the switch: {seen}"


def test_an_upgrade_on_the_s3_server_with_the_process_caches_on(fixture_table, s3_server, shared):
    """On an object store the process caches the timeline and the listings (`shared`: on for this test as for
    object stores): read before, upgraded, read again in the same process: the upgraded table, as hudi-rs reads it."""
    from locations import Location

    local = Location(str(fixture_table(COW[0])))
    s3 = local.copy_to(Location(s3_server.new_table_uri("up"), s3_server.options(), "s3"))
    before = HoodieTable(s3.uri, s3.options).read()
    result = upgrades.upgrade(s3.uri, 9, s3.options)
    assert result["instants"] == 6 and result["deleted"] == 6
    table = HoodieTable(s3.uri, s3.options)
    assert table.config.version == 9 and table.timeline.layout == 2 and len(table.timeline.commits_timeline()) == 2
    assert_same_rows(table.read(), before, context="s3 upgraded")
    assert_same_rows(table.read(), rs_read(s3.uri, storage_options=s3.options), context="s3 upgraded vs hudi-rs")


# -- a table with an archived timeline --------------------------------------------------------------------------------
def build_archived_table(path, commits=28):
    """A merge-on-read table whose archived timeline (`.hoodie/archived/`, hoodie_stream.compaction.archiver) holds
    delta commits, compactions (their plans), cleans and rollbacks; compacted at the end (the upgrade's condition)."""
    import pyarrow as pa

    from hoodie_stream.compaction import clean as cleaning
    from hoodie_stream.compaction.archiver import archive
    from hoodie_stream.format.timeline.active_timeline import Timeline
    from hoodie_stream.format.write.writer import HoodieWriter
    from hoodie_stream.options import parse_compaction_options
    from test_archiver import SMALL, _compact, _rows

    schema = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string())])
    writer = HoodieWriter.create(path, table_name="t", record_key_fields=["id"], schema=schema, precombine_field="ts")
    txn = writer.start()
    file_id = txn.insert_log_only("", _rows(range(8), 0)).file_id
    txn.commit()
    base = txn.instant
    for n in range(1, commits):
        txn = writer.start()
        txn.append_log("", file_id, base, _rows([n % 8, 8 + n], n), num_inserts=1)
        if n % 3 == 2:
            txn.rollback()  # a failed write, rolled back
        else:
            txn.commit()
        if n % 4 == 0:
            base = _compact(path)
            cleaning.clean(path, Timeline(path), parse_compaction_options(dict(SMALL, **{"clean.retain_commits": "1"})))
    assert archive(path, Timeline(path), parse_compaction_options(SMALL))
    _compact(path)
    return path


@pytest.fixture(scope="module")
def archived_table(tmp_path_factory):
    return build_archived_table(str(tmp_path_factory.mktemp("archived") / "t"))


def archived_reads(table):
    """The snapshot and read-optimized answers and an as-of read at every commit, archived ones included (incremental
    reads: the test)."""
    commits = sorted(
        [i.timestamp for i in table.timeline.commits_timeline()]
        + [i.timestamp for i in table.archived_timeline().completed(["commit", "deltacommit"])]
    )
    out = {"snapshot": table.read(), "read_optimized": table.read("read_optimized")}
    for ts in commits:
        out[f"as of {ts}"] = _attempt(lambda ts=ts: table.read(as_of=ts))
    return out, commits


def _attempt(read):
    """The rows a read answers, or the error it raises (a time travel before what the cleaner retained)."""
    try:
        return read()
    except HoodieError as e:
        return type(e).__name__


def _same(got, expected, context):
    if isinstance(expected, str) or isinstance(got, str):
        assert got == expected, context
    else:
        assert_same_rows(got, expected, context=context)


def _copy(src, dst):
    import shutil

    return str(shutil.copytree(src, dst))


def _records(path):
    from hoodie_stream.format.timeline.archived_timeline import ArchivedTimeline
    from hoodie_stream.storage import LocalStorage

    return ArchivedTimeline.load(LocalStorage(path))


@pytest.mark.parametrize("to", [8, 9])
def test_an_archived_timeline_becomes_the_lsm_history(archived_table, tmp_path, to):
    from hoodie_stream.format.timeline.archived_timeline import commit_metadata_of
    from hoodie_stream.format.timeline.lsm_history import LSMHistory, latest_manifest
    from hoodie_stream.storage import LocalStorage

    path = _copy(archived_table, tmp_path / "t")
    table = HoodieTable(path)
    before, commits = archived_reads(table)
    legacy = _records(path)
    archived = legacy.completed()
    assert {i.action for i in archived} >= {"deltacommit", "commit", "clean", "rollback"}
    incremental = {
        ts: _attempt(lambda p=prev: table.read("incremental", start=p)) for prev, ts in zip(commits, commits[1:])
    }
    assert any(isinstance(r, str) for r in before.values())  # as of a commit the cleaner did not retain: refused
    archive_files = sorted(os.listdir(os.path.join(path, ".hoodie", "archived")))

    result = upgrades.upgrade(path, to, batch=4)
    assert result["archived"] == len(archived)
    table = HoodieTable(path)
    assert table.config.version == to and table.timeline.layout == 2
    assert sorted(os.listdir(os.path.join(path, ".hoodie", "archived"))) == archive_files  # kept, as Hudi keeps it

    # the history: one row per archived instant, as Hudi's upgrade converts it
    history = table.archived_timeline()
    assert isinstance(history, LSMHistory)
    assert [(i.timestamp, i.action) for i in history.instants] == [(i.timestamp, i.action) for i in archived]
    for inst in archived:
        row = history.records[inst.timestamp]
        assert row["completionTime"] == max(inst.state_transition_time, inst.timestamp)
        if inst.action in ("commit", "deltacommit"):
            expected = commit_metadata_of(legacy.record(inst.timestamp, inst.action)["hoodieCommitMetadata"])
            got = history.commit_metadata(inst.timestamp)
            # `compacted`, which the archived record has not, is null (its default) as Hudi's conversion leaves it
            assert {**got.to_dict(), "compacted": None} == {**expected.to_dict(), "compacted": None}, inst
            assert got.is_compaction == expected.is_compaction == (inst.action == "commit")
            assert read_container(row["metadata"])["extraMetadata"]["ROLLING_STAT"] == ""  # the archived record's
        elif inst.action == "clean":
            assert read_container(row["metadata"]) == legacy.record(inst.timestamp, "clean")["hoodieCleanMetadata"]
            assert row["plan"] is None  # Hudi's conversion reads the requested record's hoodieCleanMetadata: none
        else:
            assert (
                read_container(row["metadata"]) == legacy.record(inst.timestamp, "rollback")["hoodieRollbackMetadata"]
            )
        if inst.action == "commit":  # a compaction: its plan
            plan = legacy.record(inst.timestamp, "compaction", "requested")["hoodieCompactionPlan"]
            assert read_container(row["plan"]) == plan
    # batches of 4 instants in layer-0 files, then compacted (10 files of a layer make one of the next)
    directory = ".hoodie/timeline/history"
    files = [e.file_name for e in latest_manifest(LocalStorage(path), directory)[1]]
    assert len(files) == -(-len(archived) // 4) and all(f.endswith("_0.parquet") for f in files)

    # every query reads as before
    after, commits_after = archived_reads(table)
    assert commits_after == commits and after.keys() == before.keys()
    for query, rows in before.items():
        _same(after[query], rows, context=f"{query} after the upgrade to {to}")
    completion = {**history.completion_times(), **{i.timestamp: i.completion_time for i in table.timeline.instants}}
    # incremental windows from each active commit: (prev, ...] by instant time = [completion of ts, ...] by completion
    # time. (A window from an archived commit differs by design: version 6 reads the records of archived commits
    # too, versions 8 and 9 the records the window's active commits wrote, time_travel.incremental_window.)
    active = {i.timestamp for i in table.timeline.commits_timeline()}
    for ts, rows in incremental.items():
        if ts not in active:
            continue
        _same(_attempt(lambda t=ts: table.read("incremental", start=completion[t])), rows, f"incremental from {ts}")
    assert_same_rows(after["snapshot"], rs_read(path), context="hudi-rs")
    assert upgrades.upgrade(path, to)["instants"] == 0  # again: nothing to do


def test_an_interrupted_upgrade_of_an_archived_timeline_is_finished_by_the_next_run(archived_table, tmp_path):
    """The upgrade cut after each storage change in turn (test_archiver's CrashingStorage), then run again: the table
    reads as before whatever the cut left, and the rerun leaves the history a whole run writes."""
    from hoodie_stream.format.timeline.lsm_history import LSMHistory
    from hoodie_stream.storage import LocalStorage
    from test_archiver import Crash, CrashingStorage

    reference = _copy(archived_table, tmp_path / "reference")
    expected_rows = HoodieTable(reference).read()
    upgrades.upgrade(reference, 8, batch=3)

    def history(path):  # the rows, their Avro containers decoded (each has its own random sync marker)
        records = LSMHistory.load(LocalStorage(path), ".hoodie/timeline/history").records
        return {
            ts: {k: read_container(v) if k in ("metadata", "plan") and v else v for k, v in row.items()}
            for ts, row in records.items()
        }

    expected = history(reference)
    for budget in range(0, 200):
        path = _copy(archived_table, tmp_path / f"cut{budget}")
        try:
            upgrades.upgrade(CrashingStorage(path, budget), 8, batch=3)
            finished = True
        except Crash:
            finished = False
        assert_same_rows(HoodieTable(path).read(), expected_rows, context=f"cut after {budget} changes")
        upgrades.upgrade(path, 8, batch=3)
        table = HoodieTable(path)
        assert table.config.version == 8, budget
        assert not [f for f in os.listdir(os.path.join(path, ".hoodie")) if Instant.from_file_name(f)], budget
        assert history(path) == expected, budget
        assert_same_rows(table.read(), expected_rows, context=f"cut after {budget} changes, run again")
        if finished:
            break
    else:
        pytest.fail("the upgrade never finished")
