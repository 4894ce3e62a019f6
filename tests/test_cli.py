"""The command line (`python -m hoodie_stream`, hoodie_stream/cli/): every command on the real v6 fixtures and on
written tables, on local disk and on the S3 test server; `validate` finding each kind of damage; `--json`."""

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import readable_table_zips
from hoodie_stream.__main__ import main
from hoodie_stream.checkpoints import index_state
from hoodie_stream.cli import progress
from hoodie_stream.format.file_group.file_names import parse_base_file_name, parse_log_file_name
from hoodie_stream.format.file_group.fs_view import FileSystemView
from hoodie_stream.format.hoodie_table import HoodieTable
from hoodie_stream.format.log_file.reader import read_log_blocks
from hoodie_stream.format.write.writer import HoodieWriter
from locations import Location
from stream_model import OPTIONS, events_df, generate_batches

ZIPS = [p.stem for p in readable_table_zips()]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64()), ("name", pa.string())])


def cli(capsys, *argv, options=None):
    """(exit code, stdout, stderr) of `python -m hoodie_stream argv...` run in this process."""
    args = [str(a) for a in argv]
    for key, value in (options or {}).items():
        args += ["--storage-option", f"{key}={value}"]
    capsys.readouterr()
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys, *argv, options=None, expect=0):
    code, out, err = cli(capsys, *argv, "--json", options=options)
    assert code == expect, (argv, out, err)
    return json.loads(out)


def rows(n, start, city, ts):
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "city": [city] * n, "ts": [ts] * n, "name": [f"{city}-{i}-{ts}" for i in ids]}, SCHEMA)


class Written:
    """A table HoodieWriter wrote (no Spark): an insert commit of base files in two partitions, then a delta commit
    updating 3 keys of `sf` in a log file and inserting 2 keys of `nyc` in a new log-only file group."""

    def __init__(self, location: Location):
        self.location = location
        writer = HoodieWriter.create(
            location.uri,
            table_name="t",
            record_key_fields=["id"],
            schema=SCHEMA,
            precombine_field="ts",
            partition_fields=["city"],
            storage_options=location.storage_options,
        )
        txn = writer.start(operation="INSERT")
        self.base = {city: txn.write_base(city, rows(10, i * 10, city, 1)) for i, city in enumerate(["sf", "nyc"])}
        self.first = txn.commit()
        txn = writer.start()
        sf = self.base["sf"]
        self.update = txn.append_log(
            "sf", sf.file_id, self.first, rows(3, 0, "sf", 2), base_file=sf.path.rsplit("/", 1)[-1]
        )
        self.insert = txn.insert_log_only("nyc", rows(2, 100, "nyc", 2))
        self.second = txn.commit()
        self.writer = writer

    def table(self) -> HoodieTable:
        return self.location.table()

    def args(self):
        return {"options": self.location.options}


def problems(report, check):
    return [p for p in report["problems"] if p["check"] == check]


# -- read commands on the fixtures ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ZIPS)
def test_read_commands_on_fixtures(capsys, fixture_table, name):
    base = fixture_table(name)
    table = HoodieTable(base)
    timeline = cli_json(capsys, "timeline", base)
    assert [(r["instant"], r["action"], r["state"]) for r in timeline] == [
        tuple(i[:3]) for i in table.timeline.instants
    ]
    commits = cli_json(capsys, "commits", base)
    assert [r["instant"] for r in commits] == [i.timestamp for i in table.timeline.commits_timeline()]
    for row in commits:
        meta = table.timeline.read_commit_metadata(row["instant"])
        assert row["records_written"] == sum(s.num_writes for s in meta.all_write_stats())
    slices = cli_json(capsys, "slices", base)
    on_disk = {
        os.path.relpath(os.path.join(d, f), base): os.path.getsize(os.path.join(d, f))
        for d, _, files in os.walk(base)
        if ".hoodie" not in os.path.relpath(d, base).split(os.sep)
        for f in files
        if parse_base_file_name(f) or parse_log_file_name(f)
    }
    for row in slices:
        if row["base_file"]:
            assert row["base_file_size"] == on_disk[os.path.join(row["partition"], row["base_file"])]
    stats = cli_json(capsys, "stats", base)
    assert stats["data_files"] == len(on_disk)
    assert stats["data_bytes"] == sum(on_disk.values())
    assert stats["write_amplification"]["table_bytes"] == sum(r["total_size"] for r in slices)
    if on_disk:
        assert stats["file_sizes"][-1]["instant"] == "ALL" and stats["file_sizes"][-1]["files"] == len(on_disk)
    report = cli_json(capsys, "validate", base)
    assert report["valid"] and report["checked"]["data_files"] == len(on_disk), report
    # the text forms print too
    for command in ("timeline", "commits", "slices", "stats", "validate"):
        code, out, _ = cli(capsys, command, base)
        assert code == 0 and out.strip()


def test_rollback_and_clean_on_a_fixture(capsys, fixture_table):
    base = fixture_table("trips-mor-avro-v6_trips_8i3d")
    table = HoodieTable(base)
    first, last = [i.timestamp for i in table.timeline.commits_timeline()]
    before_delete = table.read(as_of=first)
    assert table.read().num_rows == 5
    refused, _, err = cli(capsys, "rollback", base, first)
    assert refused == 2 and "not the last write" in err and last in err
    done = cli_json(capsys, "rollback", base, last)
    assert done["instant"] == last and done["files"] and done["rollback_instant"] > last
    table = HoodieTable(base)
    assert table.read().sort_by("_hoodie_record_key").equals(before_delete.sort_by("_hoodie_record_key"))
    assert [i.timestamp for i in table.timeline.commits_timeline()] == [first]
    assert cli_json(capsys, "validate", base)["valid"]
    assert cli_json(capsys, "clean", base)["files_deleted"] == 0  # 1 commit: nothing to clean


# -- every command on written tables, local and S3 ------------------------------------------------------------------
def test_commands_on_a_written_table(capsys, location):
    t = Written(location)
    opts = t.args()
    timeline = cli_json(capsys, "timeline", location.uri, **opts)
    assert [(r["instant"], r["state"]) for r in timeline] == [(t.first, "completed"), (t.second, "completed")]
    commits = cli_json(capsys, "commits", location.uri, **opts)
    assert [(r["instant"], r["records_written"], r["records_updated"]) for r in commits] == [
        (t.first, 20, 0),
        (t.second, 5, 3),
    ]
    assert cli_json(capsys, "commits", location.uri, "--limit", "1", **opts)[0]["instant"] == t.second
    slices = cli_json(capsys, "slices", location.uri, **opts)
    assert sorted((r["partition"], r["log_files"]) for r in slices) == [("nyc", 0), ("nyc", 1), ("sf", 1)]
    only_sf = cli_json(capsys, "slices", location.uri, "--partition", "sf", **opts)
    assert [r["file_id"] for r in only_sf] == [t.base["sf"].file_id]
    stats = cli_json(capsys, "stats", location.uri, **opts)
    wa = stats["write_amplification"]
    assert [c["write_amplification"] for c in wa["commits"]] == [0.0, round(5 / 3, 2)]
    assert wa["total"]["records_written"] == 25 and wa["total"]["records_updated"] == 3
    written = sum(s.total_write_bytes for s in [*t.base.values(), t.update, t.insert])
    assert wa["bytes_written"] == written and wa["table_bytes"] == sum(r["total_size"] for r in slices)
    assert wa["bytes_write_amplification"] == round(written / wa["table_bytes"], 2)
    assert cli_json(capsys, "validate", location.uri, **opts)["valid"]
    # rollback of the last delta commit: the table reads as after the first commit
    after_first = t.table().read(as_of=t.first).sort_by("_hoodie_record_key")
    done = cli_json(capsys, "rollback", location.uri, t.second, **opts)
    assert sorted(done["files"]) == sorted([t.update.path, t.insert.path])
    assert not any(location.exists(p) for p in done["files"])
    assert t.table().read().sort_by("_hoodie_record_key").equals(after_first)
    assert cli_json(capsys, "validate", location.uri, **opts)["valid"]
    # a pending write is rolled back too
    txn = t.writer.start()
    stat = txn.insert_log_only("sf", rows(2, 200, "sf", 3))
    pending = cli_json(capsys, "rollback", location.uri, txn.instant, **opts)
    assert pending["state"] == "inflight" and stat.path in pending["files"] and not location.exists(stat.path)
    assert cli_json(capsys, "clean", location.uri, **opts)["files_deleted"] == 0
    missing, _, err = cli(capsys, "rollback", location.uri, "20000101000000000", **opts)
    assert missing == 2 and "no instant 20000101000000000" in err


# -- validate finds each kind of damage -----------------------------------------------------------------------------
def test_validate_finds_a_missing_base_or_log_file(capsys, location):
    t = Written(location)
    opts = t.args()
    for stat, instant in ((t.base["nyc"], t.first), (t.update, t.second), (t.insert, t.second)):
        data = location.read(stat.path)
        location.remove(stat.path)
        report = cli_json(capsys, "validate", location.uri, **opts, expect=1)
        assert [(p["path"], p["instant"]) for p in problems(report, "missing_file")] == [(stat.path, instant)]
        assert not report["valid"]
        location.write(stat.path, data)
        assert cli_json(capsys, "validate", location.uri, **opts)["valid"]


def test_validate_finds_a_corrupt_log_block(capsys, location):
    t = Written(location)
    path = t.update.path
    data = location.read(path)
    block = read_log_blocks(data)[0]
    start = data.find(block.content)
    assert start > 0
    middle = start + len(block.content) // 2
    location.write(path, data[:middle] + b"\xff" * 16 + data[middle + 16 :])
    report = cli_json(capsys, "validate", location.uri, **t.args(), expect=1)
    found = problems(report, "corrupt_log_block")
    assert [(p["path"], p["instant"]) for p in found] == [(path, t.second)], report
    # a block whose framing is broken (Hudi's reader returns it as CORRUPT) is named too
    location.write(path, data[:-3])
    found = problems(cli_json(capsys, "validate", location.uri, **t.args(), expect=1), "corrupt_log_block")
    assert [p["path"] for p in found] == [path] and "corrupt" in found[0]["message"]


def test_validate_finds_stray_files_of_a_rolled_back_instant(capsys, location):
    t = Written(location)
    txn = t.writer.start()
    base = txn.write_base("sf", rows(2, 300, "sf", 3))
    log = txn.append_log(
        "nyc", t.base["nyc"].file_id, t.first, rows(1, 10, "nyc", 3), base_file=t.base["nyc"].path.rsplit("/", 1)[-1]
    )
    kept = {s.path: location.read(s.path) for s in (base, log)}
    txn.rollback()
    assert cli_json(capsys, "validate", location.uri, **t.args())["valid"]
    for path, data in kept.items():  # files a rollback missed (a task that wrote after it)
        location.write(path, data)
    report = cli_json(capsys, "validate", location.uri, **t.args(), expect=1)
    strays = problems(report, "stray_file")
    assert sorted((p["path"], p["instant"]) for p in strays) == sorted((p, txn.instant) for p in kept)
    assert all("rolled back" in p["message"] or "not completed" in p["message"] for p in strays)


def _keys_of(table):
    """(key, partition, file_id) of every record of the latest slices (global index keys: the record keys)."""
    parts = []
    committed = {i.timestamp for i in table.timeline.commits_timeline()}
    for fs in FileSystemView(table.storage, table.timeline).latest_slices():
        records = table.read_slice(fs, committed, table.arrow_schema())
        n = records.num_rows
        parts.append(
            pa.table(
                {
                    "key": records["_hoodie_record_key"],
                    "partition": pa.array([fs.partition] * n, pa.string()),
                    "file_id": pa.array([fs.file_id] * n, pa.string()),
                }
            )
        )
    return pa.concat_tables(parts).sort_by("key")


def test_validate_finds_an_index_state_that_disagrees_with_the_table(capsys, location):
    t = Written(location)
    table = t.table()
    storage = table.storage
    state = _keys_of(table)
    assert state.num_rows == 22

    def save(state):
        for info in storage.list(index_state.INDEX_DIR, recursive=True):
            storage.delete(info.path)
        half = state.num_rows // 2  # two key groups
        index_state.save_full(storage, 0, t.second, state.slice(0, half))
        index_state.save_full(storage, 1, t.second, state.slice(half))
        index_state.write_latest(storage, t.second)

    def check(state, expect_problem):
        save(state)
        code, out, err = cli(capsys, "validate", location.uri, "--json", **t.args())
        report = json.loads(out)
        found = problems(report, "index_state")
        assert code == (1 if expect_problem else 0), (out, err)
        return report, found

    report, found = check(state, False)
    assert report["checked"]["index_keys"] == 22 and not found
    # a tombstone (a delete of a key the table never held: no location) is fine
    tombstone = pa.table({"key": ["999"], "partition": pa.array([None], pa.string()), "file_id": [None]})
    assert not check(pa.concat_tables([state, tombstone.cast(state.schema)]), False)[1]
    # a key of the table missing from the index
    gone = state["key"][5].as_py()
    _, found = check(state.filter(pc.not_equal(state["key"], gone)), True)
    assert len(found) == 1 and repr(gone) in found[0]["message"] and "does not have it" in found[0]["message"]
    assert found[0]["instant"] == t.second and found[0]["path"] == index_state.INDEX_DIR
    # a key at another file group than the table holds it in
    moved = state["key"][0].as_py()
    other = t.base["nyc"].file_id if state["file_id"][0].as_py() != t.base["nyc"].file_id else t.base["sf"].file_id
    file_ids = pc.if_else(pc.equal(state["key"], moved), other, state["file_id"])
    _, found = check(state.set_column(2, "file_id", file_ids), True)
    assert any(repr(moved) in p["message"] and "holds it in" in p["message"] for p in found)
    # a key the table does not hold, placed at an existing file group
    extra = pa.table({"key": ["5000"], "partition": ["sf"], "file_id": [t.base["sf"].file_id]})
    _, found = check(pa.concat_tables([state, extra]), True)
    assert len(found) == 1 and "'5000'" in found[0]["message"] and "does not hold it" in found[0]["message"]
    # skipping the index check
    code, _, _ = cli(capsys, "validate", location.uri, "--skip-index", **t.args())
    assert code == 0


def test_validate_checks_the_index_state_a_sink_wrote(capsys, spark, location):
    sink = location.sink(OPTIONS)
    for batch_id, events in enumerate(generate_batches(3, seed=5, keys_per_batch=30, key_space=60)):
        sink(events_df(spark, events), batch_id)
    sink.close()
    opts = {"options": location.options}
    report = cli_json(capsys, "validate", location.uri, **opts)
    assert report["valid"] and report["checked"]["index_keys"] > 0, report
    assert cli_json(capsys, "commits", location.uri, **opts)[-1]["batch_id"] == 2
    storage = location.storage
    # the index state of one key group that holds keys is lost: its keys are missing
    infos = storage.list(index_state.INDEX_DIR, recursive=True)
    groups = sorted({i.path.rpartition("/")[0] for i in infos} - {index_state.INDEX_DIR})
    assert groups
    storage.delete_many([i.path for i in infos if i.path.startswith(groups[0] + "/")])
    report = cli_json(capsys, "validate", location.uri, **opts, expect=1)
    found = problems(report, "index_state")
    assert found and all("does not have it" in p["message"] for p in found), report


# -- compaction, through the process entry point ---------------------------------------------------------------------
def run_module(*argv, options=None):
    args = [sys.executable, "-m", "hoodie_stream", *map(str, argv)]
    for key, value in (options or {}).items():
        args += ["--storage-option", f"{key}={value}"]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.spark
def test_compact_then_validate_in_a_process(location):
    t = Written(location)
    before = t.table().read().sort_by("_hoodie_record_key")
    done = run_module("compact", location.uri, "--json", options=location.options)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert len(result["scheduled"]) == 1 and result["completed"] == result["scheduled"] and not result["pending"]
    table = t.table()
    after = table.read().sort_by("_hoodie_record_key")
    assert after.drop_columns(["_hoodie_file_name"]).equals(before.drop_columns(["_hoodie_file_name"]))
    commits = [i for i in table.timeline.commits_timeline() if i.timestamp == result["completed"][0]]
    assert commits and commits[0].action == "commit"
    checked = run_module("validate", location.uri, "--json", options=location.options)
    assert checked.returncode == 0 and json.loads(checked.stdout)["valid"], checked.stdout
    # a completed compaction is not rolled back
    refused = run_module("rollback", location.uri, result["completed"][0], options=location.options)
    assert refused.returncode == 2 and "only the last completed delta commit" in refused.stderr


@pytest.mark.spark
def test_compact_and_clean_a_fixture(capsys, fixture_table):
    base = fixture_table("trips-mor-avro-v6_trips_8i3d")
    before = HoodieTable(base).read().sort_by("_hoodie_record_key")
    done = run_module("compact", "--path", base, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert len(result["completed"]) == 1 and result["messages"][-1] == f"completed compaction {result['completed'][0]}"
    after = HoodieTable(base).read().sort_by("_hoodie_record_key")
    assert after.drop_columns(["_hoodie_file_name"]).equals(before.drop_columns(["_hoodie_file_name"]))
    replaced = [r for r in cli_json(capsys, "slices", base) if r["base_instant"] == result["completed"][0]]
    assert len(replaced) == 1 and replaced[0]["log_files"] == 0
    # the slice the compaction replaced goes; the files its commits named are not reported missing afterwards
    cleaned = cli_json(capsys, "clean", base, "--option", "clean.retain_commits=1")
    assert cleaned["files_deleted"] == 2 and len(cleaned["cleans"]) == 1
    assert cli_json(capsys, "validate", base)["valid"]
    assert HoodieTable(base).read().sort_by("_hoodie_record_key").equals(after)


def test_validate_in_a_process_names_problems_and_exits_nonzero(tmp_path):
    t = Written(Location(str(tmp_path / "t")))
    t.location.remove(t.insert.path)
    done = run_module("validate", t.location.uri)
    assert done.returncode == 1
    assert t.insert.path in done.stdout and t.second in done.stdout and "missing_file" in done.stdout
    done = run_module("validate", "--path", t.location.uri, "--json")
    assert done.returncode == 1 and not json.loads(done.stdout)["valid"]


# -- progress bars ---------------------------------------------------------------------------------------------------
def test_progress_bar_only_on_a_terminal(capsys):
    pytest.importorskip("tqdm")  # the test extra installs it
    assert list(progress.progress(range(3), "counting", total=3, enabled=True)) == [0, 1, 2]
    assert "counting" in capsys.readouterr().err
    assert list(progress.progress(range(3), "counting", total=3)) == [0, 1, 2]  # stdout captured: no terminal
    assert "counting" not in capsys.readouterr().err


def test_no_progress_bar_without_tqdm(capsys, monkeypatch):
    def no_tqdm(name, *args):
        raise ImportError(name)

    monkeypatch.setattr(progress.importlib, "import_module", no_tqdm)
    assert not progress.shown(True)
    assert list(progress.progress(range(3), "counting", enabled=True)) == [0, 1, 2]
    assert "counting" not in capsys.readouterr().err


def test_validate_shows_a_bar_when_stdout_is_a_terminal(capsys, monkeypatch, tmp_path):
    pytest.importorskip("tqdm")
    t = Written(Location(str(tmp_path / "t")))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    code, _, err = cli(capsys, "validate", t.location.uri)
    assert code == 0 and "validate log files" in err
    code, _, err = cli(capsys, "validate", t.location.uri, "--no-progress")
    assert code == 0 and "validate log files" not in err


def test_table_is_given_once(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["timeline"])
    with pytest.raises(SystemExit):
        main(["timeline", str(tmp_path), "--path", str(tmp_path)])
    capsys.readouterr()
    assert main(["rollback", "--path", str(tmp_path), "20260101000000000"]) == 2  # PATH by --path, then INSTANT
    assert "hoodie.properties" in capsys.readouterr().err


def test_a_failure_that_is_no_hoodie_error_exits_2_not_1(capsys, monkeypatch, tmp_path):
    """Exit code 1 means "validate found problems": a command that fails otherwise (the store, the OS) exits 2."""
    from hoodie_stream.cli import commands

    def fail(*_args):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(commands, "run", fail)
    assert main(["validate", str(tmp_path)]) == 2
    assert "error: OSError: [Errno 5] Input/output error" in capsys.readouterr().err


def test_commits_limit_must_be_positive(capsys, tmp_path):
    for bad in ("0", "-3", "x"):
        with pytest.raises(SystemExit):
            main(["commits", str(tmp_path), "--limit", bad])
        assert "--limit" in capsys.readouterr().err


# -- summary, JSON errors, compact's outcome lines, pending compaction plans that cannot run ------------------------
def test_summary_takes_path_json_and_storage_options(capsys, location):
    t = Written(location)
    info = cli_json(capsys, "summary", "--path", location.uri, **t.args())
    assert info["table"] == "t" and info["rows"] == 22 and info["partition_fields"] == ["city"]
    assert [(c["instant"], c["records_written"], c["records_deleted"]) for c in info["commits"]] == [
        (t.first, 20, 0),
        (t.second, 5, 0),
    ]
    assert info["file_groups"] == 3 and info["log_files"] == 2
    code, out, _ = cli(capsys, "summary", location.uri, **t.args())
    assert code == 0 and out.startswith("table 't' at ") and "rows (snapshot): 22" in out


def test_errors_are_one_json_object_on_stderr_with_json(capsys, monkeypatch, tmp_path):
    """With --json an error is {"error": class, "message": ...} on stderr, stdout stays empty, the exit code is 2."""
    code, out, err = cli(capsys, "timeline", tmp_path / "none", "--json")
    error = json.loads(err)
    assert code == 2 and out == "" and set(error) == {"error", "message"}
    assert error["error"] == "HoodieTableNotFoundError" or error["error"].startswith("Hoodie"), error
    assert str(tmp_path / "none") in error["message"] and "does not exist" in error["message"]
    code, _, err = cli(capsys, "timeline", tmp_path / "none")  # the text form is as before
    assert code == 2 and err.startswith("error: ") and not err.startswith("error: {")
    # a usage error argparse reports, and a failure that is no HoodieError
    with pytest.raises(SystemExit) as exit_:
        main(["commits", str(tmp_path), "--limit", "0", "--json"])
    out, err = capsys.readouterr()
    error = json.loads(err)
    assert exit_.value.code == 2 and out == "" and error["error"] == "ArgumentError" and "--limit" in error["message"]
    from hoodie_stream.cli import commands

    def fail(*_args):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(commands, "run", fail)
    assert main(["validate", str(tmp_path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and json.loads(err) == {"error": "OSError", "message": "[Errno 5] Input/output error"}


class _NoSpark:
    """Stands for the local Spark of `compact`: records whether it was started."""

    started = 0

    def __init__(self, *_args):
        pass

    def getOrCreate(self):  # noqa: N802  (Spark's name)
        _NoSpark.started += 1
        return self

    def stop(self):
        pass


def test_compact_prints_one_truthful_outcome(capsys, monkeypatch, tmp_path):
    """A plan pending already holds every slice with log files: `compact` runs it and says so, without first
    saying there is nothing to compact; with --schedule alone it says why no plan was written; with --run and no
    plan it says there was nothing to run, and starts no Spark."""
    from hoodie_stream.compaction import offline
    from hoodie_stream.compaction.plan import pending_plans
    from hoodie_stream.format.timeline.active_timeline import Timeline

    t = Written(Location(str(tmp_path / "t")))
    monkeypatch.setattr(offline, "local_session_builder", _NoSpark)
    _NoSpark.started = 0
    assert cli_json(capsys, "compact", t.location.uri, "--run")["messages"] == ["no pending compaction plan to run"]
    assert _NoSpark.started == 0
    plan = cli_json(capsys, "compact", t.location.uri, "--schedule")["scheduled"]
    assert len(plan) == 1 and _NoSpark.started == 0
    monkeypatch.setattr(
        offline, "run_pending_compactions", lambda spark, storage, *_a, **_k: list(pending_plans(Timeline(storage)))
    )
    again = cli_json(capsys, "compact", t.location.uri, "--schedule")["messages"]
    assert again == [f"no new compaction plan: every file slice with log files is in pending compaction {plan[0]}"]
    code, out, _ = cli(capsys, "compact", t.location.uri, "--no-progress")
    assert code == 0 and out.splitlines() == [f"completed compaction {plan[0]}"] and _NoSpark.started == 1


def test_validate_finds_a_pending_compaction_plan_that_cannot_run(capsys, location):
    from hoodie_stream.compaction.plan import make_operations, schedule_compaction
    from hoodie_stream.format.table.markers import create_marker, marker_dir
    from hoodie_stream.format.timeline.active_timeline import Timeline

    t = Written(location)
    opts = t.args()
    storage = location.storage
    plan = schedule_compaction(storage, Timeline(storage), force=True)
    create_marker(storage, plan, t.base["sf"].path.replace(t.first, plan), "CREATE")  # a marker of its run
    report = cli_json(capsys, "validate", location.uri, **opts)
    assert report["valid"] and report["checked"]["pending_compactions"] == 1, report
    # a log file the plan names is gone: the plan fails whenever it runs, and its file groups wait forever
    data = location.read(t.update.path)
    location.remove(t.update.path)
    report = cli_json(capsys, "validate", location.uri, **opts, expect=1)
    found = problems(report, "pending_compaction")
    assert [(p["path"], p["instant"]) for p in found] == [(t.update.path, plan)], report
    assert "cannot run" in found[0]["message"] and "2 file group(s)" in found[0]["message"]
    assert not make_operations(storage, Timeline(storage)), "no later plan takes the file groups the plan holds"
    code, out, _ = cli(capsys, "validate", location.uri, **opts)
    assert code == 1 and f"[pending_compaction] {t.update.path} (instant {plan})" in out
    location.write(t.update.path, data)
    # an entry of its marker directory that is not a marker name (running the plan fails on it) ...
    junk = f"{marker_dir(plan)}/sf/notes.txt"
    location.write(junk, b"x")
    found = problems(cli_json(capsys, "validate", location.uri, **opts, expect=1), "pending_compaction")
    assert [(p["path"], p["instant"]) for p in found] == [(junk, plan)] and "not a marker name" in found[0]["message"]
    location.remove(junk)
    # ... but not a temporary file the local storage layer left there (listings never show those; an object
    # store's puts are atomic and leave none, so there any such object is an entry like the others)
    if location.kind == "local":
        location.write(f"{marker_dir(plan)}/sf/.x.marker.CREATE.0123456789abcdef.tmp", b"")
        assert cli_json(capsys, "validate", location.uri, **opts)["valid"]
