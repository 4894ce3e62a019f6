"""Apache Hudi 0.15.0 and 1.2.0 load the archived timeline this project writes (`CALL show_archived_commits`: the
same completed commits and delta commits, with their write stats), and read an archived table as `HoodieTable.read`
does: snapshot, read_optimized, and time travel to an instant that is archived now."""

from __future__ import annotations

import pytest

import java_hudi as jh
from hoodie_stream import HoodieTable
from hoodie_stream.compaction.archiver import archive
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.options import parse_compaction_options
from test_archiver import build_table

pytestmark = [pytest.mark.java_hudi, pytest.mark.spark]


@pytest.fixture(scope="module")
def archived_table(tmp_path_factory):
    """33 commits (a compaction among them), cleaned (25 commits retained), archived with Hudi's defaults (20/30, the cleaner retaining
    10 commits): 13 instants move to `.hoodie/archived/`."""
    path = build_table(str(tmp_path_factory.mktemp("java_archive") / "t"), commits=32, compact_at=5, clean_retain=25)
    opts = parse_compaction_options(
        {"clean.retain_commits": "10", "hoodie.keep.min.commits": "20", "hoodie.keep.max.commits": "30"}
    )
    moved = archive(path, Timeline(path), opts)
    assert len(moved) == 13
    return path, moved


@pytest.mark.parametrize("version", ["0.15.0", "1.2.0"])
def test_hudi_loads_the_archived_timeline_and_reads_the_table(java_hudi, archived_table, version):
    path, moved = archived_table
    hudi = java_hudi(version)
    name = f"archived_{version.replace('.', '_')}"
    hudi.sql(f"CREATE TABLE IF NOT EXISTS {name} USING hudi LOCATION '{path}'")
    rows = hudi.sql(
        f"CALL show_archived_commits(table => '{name}', limit => 100, start_ts => '0', end_ts => '99999999999999999')"
    )
    table = HoodieTable(path)
    archived = table.archived_timeline()
    expected = {i.timestamp for i in archived.completed(["commit", "deltacommit"])}
    assert expected == {i.timestamp for i in moved}
    assert {r["commit_time"] for r in rows} == expected
    for row in rows:
        meta = archived.commit_metadata(row["commit_time"])
        assert int(row["total_records_written"]) == sum(s.num_writes for s in meta.all_write_stats())
    for options, ours in (
        (jh.snapshot(), table.read()),
        (jh.read_optimized(), table.read("read_optimized")),
        (jh.snapshot(moved[-1].timestamp), table.read(as_of=moved[-1].timestamp)),
    ):
        same, why = jh.same_rows(ours, hudi.read(path, options))
        assert same, f"Hudi {version} {options}: {why}"
