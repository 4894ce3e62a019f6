"""Cleaning keeps exactly the slices its policy retains, with Hudi's clean plan and metadata, and time travel to
every retained instant still reads as the model says; on local disk and on the S3 test server."""

import pytest

from hoodie_stream import HoodieStreamSink
from hoodie_stream.cli.validate import validate
from hoodie_stream.compaction import clean as cleaning
from hoodie_stream.compaction.plan import pending_plans, schedule_compaction
from hoodie_stream.compaction.service import recover
from hoodie_stream.format.avro.models import read_container
from hoodie_stream.format.file_group.fs_view import FileSystemView
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.instant import Instant, instant_to_datetime
from hoodie_stream.options import parse_compaction_options
from locations import Location
from stream_model import OPTIONS, TableModel, events_df, generate_batches, table_rows


@pytest.fixture(scope="module")
def history_table(spark, tmp_path_factory):
    """A table with inline compaction every 2 delta commits; model rows after every commit-like instant."""
    base = str(tmp_path_factory.mktemp("clean") / "t")
    sink = HoodieStreamSink(
        base,
        dict(
            OPTIONS,
            **{
                "compaction.schedule.enabled": "true",
                "compaction.delta_commits": "2",
                "compaction.async.enabled": "false",
                "clean.retain_commits": "1000",
            },
        ),
    )
    model, snapshots = TableModel(), {}
    for i, events in enumerate(generate_batches(9, seed=31, monotonic=True)):
        sink(events_df(spark, events), i)
        model.apply_batch(events)
        for inst in Timeline(base).commits_timeline():
            snapshots.setdefault(inst.timestamp, model.rows())
    return base, snapshots


def copy_of(history_table, location):
    """A copy of the history table at `location` (local disk or the S3 test server): (location, snapshots)."""
    base, snapshots = history_table
    return Location(base).copy_to(location), snapshots


def slice_files(fs):
    names = ([fs.base_file] if fs.base_file else []) + fs.log_file_names()
    return {f"{fs.partition}/{n}" if fs.partition else n for n in names}


def expected_kept(loc, keep):
    """Files of the slices `keep(slices)` retains per file group (slices oldest first)."""
    view = FileSystemView(loc.storage)
    kept = set()
    for group in view.file_groups():
        for fs in keep(view.slices(group)):
            kept |= slice_files(fs)
    return kept


def check_time_travel(loc, snapshots, retained):
    for ts in retained:
        assert table_rows(loc.table().read(as_of=ts)) == snapshots[ts], f"ours as of {ts}"
        assert table_rows(loc.rs_read(as_of=ts)) == snapshots[ts], f"hudi-rs as of {ts}"


def check_clean_instant(loc, policy, deleted):
    tl = Timeline(loc.storage)
    (done,) = tl.completed(["clean"])
    plan = read_container(tl.read_bytes(Instant(done.timestamp, "clean", "requested")))
    meta = read_container(tl.read_bytes(done))
    assert plan["policy"] == policy and plan["version"] == 2
    planned = {
        i["filePath"].rsplit("/", 1)[-1] for infos in plan["filePathsToBeDeletedPerPartition"].values() for i in infos
    }
    assert planned == {d.rsplit("/", 1)[-1] for d in deleted}
    assert meta["totalFilesDeleted"] == len(deleted)


def test_keep_latest_file_versions(history_table, location):
    loc, snapshots = copy_of(history_table, location)
    base = loc.storage
    before = loc.data_files()
    kept = expected_kept(loc, lambda slices: slices[-2:])
    opts = parse_compaction_options({"clean.policy": "KEEP_LATEST_FILE_VERSIONS", "clean.retain_file_versions": "2"})
    cleaning.clean(base, Timeline(base), opts)
    after = loc.data_files()
    assert after == kept and after < before
    check_clean_instant(loc, "KEEP_LATEST_FILE_VERSIONS", before - after)
    assert table_rows(loc.rs_read()) == snapshots[Timeline(base).commits_timeline()[-1].timestamp]


@pytest.mark.parametrize("policy", ["KEEP_LATEST_COMMITS", "KEEP_LATEST_BY_HOURS"])
def test_keep_latest_commits_and_by_hours(history_table, location, policy):
    loc, snapshots = copy_of(history_table, location)
    base = loc.storage
    commits = Timeline(base).commits_timeline()
    earliest = commits[-4].timestamp
    before = loc.data_files()

    def keep(slices):
        at_or_before = [i for i, s in enumerate(slices) if s.base_instant <= earliest]
        return slices[at_or_before[-1] :] if at_or_before else slices

    kept = expected_kept(loc, keep)
    opts = parse_compaction_options({"clean.policy": policy, "clean.retain_commits": "4", "clean.retain_hours": "1"})
    now = instant_to_datetime(earliest).timestamp() + 3600  # the last hour starts exactly at `earliest`
    cleaning.clean(base, Timeline(base), opts, now=now)
    after = loc.data_files()
    assert after == kept and after < before
    check_clean_instant(loc, policy, before - after)
    check_time_travel(loc, snapshots, [c.timestamp for c in commits if c.timestamp >= earliest])


def test_clean_keeps_slices_a_pending_compaction_needs(history_table, location):
    loc, snapshots = copy_of(history_table, location)
    base = loc.storage
    tl = Timeline(base)
    instant = schedule_compaction(base, tl, parse_compaction_options(), force=True)
    planned = {(op["partitionPath"], op["fileId"]): op for op in pending_plans(tl)[instant]["operations"]}
    opts = parse_compaction_options({"clean.policy": "KEEP_LATEST_FILE_VERSIONS", "clean.retain_file_versions": "1"})
    cleaning.clean(base, Timeline(base), opts)
    for (partition, _fid), op in planned.items():
        for name in op["deltaFilePaths"] + ([op["dataFilePath"]] if op["dataFilePath"] else []):
            assert loc.exists(f"{partition}/{name}" if partition else name), name
    latest = Timeline(base).commits_timeline()[-1].timestamp
    assert table_rows(loc.table().read()) == snapshots[latest]


def test_interrupted_clean_is_finished_on_restart(history_table, location):
    loc, snapshots = copy_of(history_table, location)
    base = loc.storage
    opts = parse_compaction_options({"clean.policy": "KEEP_LATEST_FILE_VERSIONS", "clean.retain_file_versions": "1"})
    tl = Timeline(base)
    instant = cleaning.schedule_clean(base, tl, opts)
    plan = read_container(tl.read_bytes(Instant(instant, "clean", "requested")))
    tl.transition_to_inflight(instant, "clean", b"")
    doomed = [
        base.relative(i["filePath"]) for infos in plan["filePathsToBeDeletedPerPartition"].values() for i in infos
    ]
    assert doomed and all(loc.exists(p) for p in doomed)
    for path in doomed[: len(doomed) // 2]:  # the process died half way
        loc.remove(path)
    latest = Timeline(base).commits_timeline()[-1].timestamp
    assert table_rows(loc.rs_read()) == snapshots[latest]
    # the files the pending clean deleted are not missing: its plan deletes them, and the next writer finishes it
    report = validate(loc.table())
    assert report.valid, [str(p) for p in report.problems]
    recover(base)  # what a restarted sink does first
    tl = Timeline(base)
    assert tl.get(instant).is_completed
    assert not any(loc.exists(p) for p in doomed)
    assert table_rows(loc.rs_read()) == snapshots[latest]
    assert table_rows(loc.table().read()) == snapshots[latest]
    assert validate(loc.table()).valid
