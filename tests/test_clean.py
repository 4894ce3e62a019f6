"""Cleaning keeps exactly the slices its policy retains, with Hudi's clean plan and metadata, and time travel to
every retained instant still reads as the model says."""

import os
import shutil

import pytest

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.compaction import clean as cleaning
from hoodie_stream.compaction.plan import pending_plans, schedule_compaction
from hoodie_stream.compaction.service import recover
from hoodie_stream.format.avro_models import read_container
from hoodie_stream.format.fs_view import FileSystemView
from hoodie_stream.format.instant import Instant, instant_to_datetime
from hoodie_stream.format.timeline import Timeline
from hoodie_stream.options import parse_compaction_options
from oracle import rs_read
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


def copy_of(history_table, tmp_path):
    base, snapshots = history_table
    dest = str(tmp_path / "copy")
    shutil.copytree(base, dest)
    return dest, snapshots


def files_on_disk(base):
    out = set()
    for root, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        out |= {os.path.relpath(os.path.join(root, f), base) for f in files if not f.startswith(".hoodie_partition")}
    return out


def slice_files(base, fs):
    names = ([fs.base_file] if fs.base_file else []) + fs.log_file_names()
    return {os.path.join(fs.partition, n) if fs.partition else n for n in names}


def expected_kept(base, keep):
    """Files of the slices `keep(slices)` retains per file group (slices oldest first)."""
    view = FileSystemView(base)
    kept = set()
    for group in view.file_groups():
        for fs in keep(view.slices(group)):
            kept |= slice_files(base, fs)
    return kept


def check_time_travel(base, snapshots, retained):
    for ts in retained:
        assert table_rows(HoodieTable(base).read(as_of=ts)) == snapshots[ts], f"ours as of {ts}"
        assert table_rows(rs_read(base, as_of=ts)) == snapshots[ts], f"hudi-rs as of {ts}"


def check_clean_instant(base, policy, deleted):
    tl = Timeline(base)
    (done,) = tl.completed(["clean"])
    plan = read_container(tl.read_bytes(Instant(done.timestamp, "clean", "requested")))
    meta = read_container(tl.read_bytes(done))
    assert plan["policy"] == policy and plan["version"] == 2
    planned = {
        i["filePath"].rsplit("/", 1)[-1] for infos in plan["filePathsToBeDeletedPerPartition"].values() for i in infos
    }
    assert planned == {d.rsplit("/", 1)[-1] for d in deleted}
    assert meta["totalFilesDeleted"] == len(deleted)


def test_keep_latest_file_versions(history_table, tmp_path):
    base, snapshots = copy_of(history_table, tmp_path)
    before = files_on_disk(base)
    kept = expected_kept(base, lambda slices: slices[-2:])
    opts = parse_compaction_options({"clean.policy": "KEEP_LATEST_FILE_VERSIONS", "clean.retain_file_versions": "2"})
    cleaning.clean(base, Timeline(base), opts)
    after = files_on_disk(base)
    assert after == kept and after < before
    check_clean_instant(base, "KEEP_LATEST_FILE_VERSIONS", before - after)
    assert table_rows(rs_read(base)) == snapshots[Timeline(base).commits_timeline()[-1].timestamp]


@pytest.mark.parametrize("policy", ["KEEP_LATEST_COMMITS", "KEEP_LATEST_BY_HOURS"])
def test_keep_latest_commits_and_by_hours(history_table, tmp_path, policy):
    base, snapshots = copy_of(history_table, tmp_path)
    commits = Timeline(base).commits_timeline()
    earliest = commits[-4].timestamp
    before = files_on_disk(base)

    def keep(slices):
        at_or_before = [i for i, s in enumerate(slices) if s.base_instant <= earliest]
        return slices[at_or_before[-1] :] if at_or_before else slices

    kept = expected_kept(base, keep)
    opts = parse_compaction_options({"clean.policy": policy, "clean.retain_commits": "4", "clean.retain_hours": "1"})
    now = instant_to_datetime(earliest).timestamp() + 3600  # the last hour starts exactly at `earliest`
    cleaning.clean(base, Timeline(base), opts, now=now)
    after = files_on_disk(base)
    assert after == kept and after < before
    check_clean_instant(base, policy, before - after)
    check_time_travel(base, snapshots, [c.timestamp for c in commits if c.timestamp >= earliest])


def test_clean_keeps_slices_a_pending_compaction_needs(history_table, tmp_path):
    base, snapshots = copy_of(history_table, tmp_path)
    tl = Timeline(base)
    instant = schedule_compaction(base, tl, parse_compaction_options(), force=True)
    planned = {(op["partitionPath"], op["fileId"]): op for op in pending_plans(tl)[instant]["operations"]}
    opts = parse_compaction_options({"clean.policy": "KEEP_LATEST_FILE_VERSIONS", "clean.retain_file_versions": "1"})
    cleaning.clean(base, Timeline(base), opts)
    for (partition, _fid), op in planned.items():
        for name in op["deltaFilePaths"] + ([op["dataFilePath"]] if op["dataFilePath"] else []):
            assert os.path.exists(os.path.join(base, partition, name)), name
    latest = Timeline(base).commits_timeline()[-1].timestamp
    assert table_rows(HoodieTable(base).read()) == snapshots[latest]


def test_interrupted_clean_is_finished_on_restart(history_table, tmp_path):
    base, snapshots = copy_of(history_table, tmp_path)
    opts = parse_compaction_options({"clean.policy": "KEEP_LATEST_FILE_VERSIONS", "clean.retain_file_versions": "1"})
    tl = Timeline(base)
    instant = cleaning.schedule_clean(base, tl, opts)
    plan = read_container(tl.read_bytes(Instant(instant, "clean", "requested")))
    tl.transition_to_inflight(instant, "clean", b"")
    doomed = [
        i["filePath"][len("file:") :] for infos in plan["filePathsToBeDeletedPerPartition"].values() for i in infos
    ]
    for path in doomed[: len(doomed) // 2]:  # the process died half way
        os.remove(path)
    latest = Timeline(base).commits_timeline()[-1].timestamp
    assert table_rows(rs_read(base)) == snapshots[latest]
    recover(base)  # what a restarted sink does first
    tl = Timeline(base)
    assert tl.get(instant).is_completed
    assert not any(os.path.exists(p) for p in doomed)
    assert table_rows(rs_read(base)) == snapshots[latest]
    assert table_rows(HoodieTable(base).read()) == snapshots[latest]
