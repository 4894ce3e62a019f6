"""Every real fixture table, of table version 6 (Hudi 0.14/0.15) and 8 (Hudi 1.0: timeline layout 2, log files
sliced by completion time, incremental windows by completion time), reads through HoodieTable.read exactly as
hudi 0.5.0 reads it."""

import pytest

from conftest import readable_table_zips
from hoodie_stream.errors import HoodieError
from hoodie_stream.format.hoodie_table import HoodieTable
from oracle import assert_same_rows, rs_completed_instants, rs_read

ZIPS = [p.stem for p in readable_table_zips()]


def test_both_versions_are_read():
    assert [n for n in ZIPS if "-v6_" in n] and len([n for n in ZIPS if "-v8_" in n]) == 6, ZIPS


@pytest.mark.parametrize("name", ZIPS)
def test_snapshot_at_every_instant(fixture_table, name):
    base = fixture_table(name)
    table = HoodieTable(base)
    instants = rs_completed_instants(base)
    assert [i.timestamp for i in table.timeline.commits_timeline()] == instants
    assert_same_rows(table.read(), rs_read(base), context=f"{name} latest")
    for ts in instants:
        assert_same_rows(table.read(as_of=ts), rs_read(base, as_of=ts), context=f"{name} as of {ts}")


@pytest.mark.parametrize("name", ZIPS)
def test_read_optimized(fixture_table, name):
    base = fixture_table(name)
    table = HoodieTable(base)
    assert_same_rows(table.read("read_optimized"), rs_read(base, "read_optimized"), context=f"{name} RO")
    for ts in rs_completed_instants(base):
        ours = table.read("read_optimized", as_of=ts)
        assert_same_rows(ours, rs_read(base, "read_optimized", as_of=ts), context=f"{name} RO as of {ts}")


@pytest.mark.parametrize("name", ZIPS)
def test_incremental_between_consecutive_instants(fixture_table, name):
    base = fixture_table(name)
    table = HoodieTable(base)
    instants = rs_completed_instants(base)
    bounds = [None] + instants
    if not table.meta_fields:  # no commit time per record: refused, as Apache Hudi refuses it
        with pytest.raises(HoodieError, match="without meta fields"):
            table.read("incremental", start=None, end=instants[-1])
        return
    if table.config.version >= 8:
        # by completion time: each commit alone, from its instant time (after the previous commit completed: the
        # fixtures' commits ran one after another) to its completion time; and the whole timeline
        assert_same_rows(table.read("incremental"), rs_read(base, "incremental", start="0"), context=f"{name} all")
        for inst in table.timeline.commits_timeline():
            start, end = inst.timestamp, inst.completion_time
            ours = table.read("incremental", start=start, end=end)
            assert_same_rows(ours, rs_read(base, "incremental", start=start, end=end), context=f"{name} {inst}")
            assert set(ours["_hoodie_commit_time"].to_pylist()) <= {start}, inst
        return
    for start, end in zip(bounds, instants):
        ours = table.read("incremental", start=start, end=end)
        theirs = rs_read(base, "incremental", start=start or "0", end=end)
        assert_same_rows(ours, theirs, context=f"{name} incremental ({start}, {end}]")


def test_fixture_row_counts_match_readme(fixture_table):
    expected = {
        "trips-mor-avro-v6_trips_8i1u": 8,
        "trips-mor-avro-v6_trips_8i3d": 5,
        "sample-mor-parquet-v6_nonpartitioned": 4,
        "sample-mor-parquet-v6_nonpartitioned_rollback": 3,
        "sample-mor-parquet-v6_simplekeygen_nonhivestyle_overwritetable": 1,
        "sample-mor-parquet-v6_empty": 0,
    }
    for name, count in expected.items():
        assert HoodieTable(fixture_table(name)).read().num_rows == count, name


def test_columns_and_filters(fixture_table):
    base = fixture_table("trips-mor-avro-v6_trips_8i1u")
    table = HoodieTable(base)
    full = table.read()
    picked = table.read(columns=["uuid", "fare"], filters=[("city", "=", "san_francisco")])
    assert picked.column_names == ["uuid", "fare"]
    expected = [r for r in full.to_pylist() if r["city"] == "san_francisco"]
    assert sorted(r["uuid"] for r in picked.to_pylist()) == sorted(r["uuid"] for r in expected)
    assert 0 < picked.num_rows < full.num_rows


V8_TRIPS = "trips-mor-avro-v8_trips_8i3u1d"
COMPACTION = "20251220210129235"  # requested after delta commit 20251220210128625 completed (at ...129197)


def _slices(table):
    from hoodie_stream.format.file_group.fs_view import FileSystemView

    view = FileSystemView(table.storage, table.timeline)
    return {s.partition: (s.base_instant, [lf.name for lf in s.log_files]) for s in view.latest_slices()}


def test_v8_a_log_joins_the_slice_its_commit_completed_in(fixture_table):
    """A delta commit requested before the compaction but completed after it (its completed file renamed to a later
    completion time): its log file joins the compaction's slice, as Hudi 1.x and hudi-rs slice by completion time."""
    base = fixture_table(V8_TRIPS)
    timeline = base / ".hoodie" / "timeline"
    before = _slices(HoodieTable(base))
    assert before["city=chennai"] == (COMPACTION, [])
    (timeline / "20251220210128625_20251220210129197.deltacommit").rename(
        timeline / "20251220210128625_20251220210129500.deltacommit"
    )
    table = HoodieTable(base)
    after = _slices(table)
    assert after["city=chennai"][0] == COMPACTION
    assert [n.split("_")[1].split(".")[0] for n in after["city=chennai"][1]] == ["20251220210128625"]
    assert_same_rows(table.read(), rs_read(base), context="log completed after the compaction was requested")


def test_v8_logs_under_a_pending_compaction_are_read_with_the_slice_before(fixture_table):
    """The compaction made pending again (its completed file removed): its base files are not read; the slice
    before it, with every log file, is, as Hudi 1.x reads a slice under a pending compaction."""
    base = fixture_table(V8_TRIPS)
    expected = HoodieTable(base).read()
    (base / ".hoodie" / "timeline" / f"{COMPACTION}_20251220210129883.commit").unlink()
    table = HoodieTable(base)
    assert [i.timestamp for i in table.timeline.pending(["compaction"])] == [COMPACTION]
    slices = _slices(table)
    assert all(instant != COMPACTION for instant, _logs in slices.values()), slices
    assert len(slices["city=sao_paulo"][1]) == 2  # the log before the compaction and the one after
    ours = table.read()
    assert_same_rows(ours, rs_read(base), context="pending compaction")
    keep = [c for c in ours.column_names if c not in ("_hoodie_file_name",)]
    assert_same_rows(ours.select(keep), expected.select(keep), context="pending compaction vs completed")


def test_v8_on_the_s3_server_reads_as_hudi_rs(fixture_table, s3_server):
    """The version 8 fixture on the S3 test server, read through the process-wide timeline and listing caches (on for
    object stores: the timeline listed from `.hoodie/timeline/`): snapshot, read-optimized and time travel equal to
    hudi-rs."""
    from locations import Location

    local = Location(str(fixture_table(V8_TRIPS)))
    s3 = local.copy_to(Location(s3_server.new_table_uri("v8"), s3_server.options(), "s3"))
    table = HoodieTable(s3.uri, s3.options)
    assert table.timeline.layout == 2 and len(table.timeline.commits_timeline()) == 7
    for kwargs in ({}, {"query_type": "read_optimized"}, {"as_of": "20251220210125441"}):
        ours = table.read(**kwargs)
        assert_same_rows(ours, rs_read(s3.uri, storage_options=s3.options, **kwargs), context=f"s3 {kwargs}")
    assert_same_rows(table.read(), rs_read(str(local.uri)), context="s3 vs local")


def test_v8_a_pending_clustering_older_than_every_commit_keeps_its_files_uncommitted(fixture_table):
    """Version 8's clustering action: pending, it starts the active timeline (Hudi's archiver stops at it), so its
    new base file is not read as an archived, committed one."""
    import shutil

    base = fixture_table(V8_TRIPS)
    expected = HoodieTable(base).read()
    old = next((base / "city=chennai").glob("*_20251220210108078.parquet"))
    shutil.copy(old, old.with_name(old.name.replace("20251220210108078", "20251220210100000")))
    (base / ".hoodie" / "timeline" / "20251220210100000.clustering.requested").write_bytes(b"")
    table = HoodieTable(base)
    assert table.timeline.timeline_start() == "20251220210100000"
    assert [(i.action, i.state) for i in table.timeline.pending()] == [("clustering", "requested")]
    assert_same_rows(table.read(), expected, context="pending clustering")
    assert_same_rows(table.read(), rs_read(base), context="pending clustering vs hudi-rs")


def test_v8_a_log_of_an_archived_delta_commit_stays_in_its_own_slice(fixture_table):
    """A log file named by a delta commit older than the active timeline (archived: committed, its completion time
    in the history) counts as completed at its own instant: it does not join the latest slice."""
    import shutil

    base = fixture_table(V8_TRIPS)
    log = next((base / "city=chennai").glob(".*_20251220210127080.log.1_*"))
    shutil.copy(log, log.with_name(log.name.replace("20251220210127080", "20251220210100000")))
    slices = _slices(HoodieTable(base))
    assert slices["city=chennai"] == (COMPACTION, []), slices
