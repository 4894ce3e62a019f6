"""The sink writing tables of version 8 (Hudi 1.0's) and 9 (Hudi 1.1's and 1.2's) when `hoodie.write.table.version`
asks for them: Hudi 1.x's timeline (layout 2: `.hoodie/timeline/`, completion times in the names, Avro commit
metadata), one log file per delta commit named by it, compaction and cleaning by completion time; read by
HoodieTable and hudi-rs equal to a plain-Python model for every query type. A version 6 table is upgraded when the
option asks for a higher version, after a compaction of every file group with log files; never downgraded. Hudi 1.2
reading and continuing these tables is in test_java_hudi_versions.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.errors import HoodieConfigError
from hoodie_stream.format.file_group.file_names import parse_log_file_name
from hoodie_stream.format.read.time_travel import earliest_retained
from oracle import META, assert_same_rows, rs_read
from test_java_hudi_writes import SINK, Model, table_rows

COLUMNS = sorted(META + ["id", "ts", "city", "v"])
DDL = "id long, ts long, city string, v string, _hoodie_is_deleted boolean"
COMPACT_EVERY_2 = {
    "compaction.schedule.enabled": "true",
    "compaction.async.enabled": "false",
    "compaction.delta_commits": "2",
    "clean.async.enabled": "true",
    "clean.retain_commits": "2",
}
# (upserts (id, ts, city, v), deletes (id, city)): inserts, updates, a late update that loses, a partition move,
# deletes, a key deleted then inserted again (with an ordering value above the delete's, 10**6)
BATCHES = [
    ([(i, 10, ("sf", "nyc", "sao_paulo")[i % 3], f"a{i}") for i in range(12)], []),
    ([(1, 20, "nyc", "b1"), (2, 20, "sao_paulo", "b2"), (12, 20, "sf", "n12"), (4, 5, "nyc", "late4")], []),
    ([(3, 30, "nyc", "moved3")], [(5, "sao_paulo"), (6, "sf")]),
    ([(1, 40, "nyc", "d1"), (13, 40, "nyc", "n13")], [(12, "sf")]),
    ([(6, 10**7, "sf", "again6"), (7, 50, "nyc", "e7")], []),
    ([(8, 60, "sao_paulo", "f8")], [(13, "nyc")]),
]


def write(spark, path, batches, model, start_id=0, restart_every=None, **options):
    """Micro-batches through the sink (a new sink, as after a restart, every `restart_every` batches)."""
    sink = None
    try:
        for n, (rows, deletes) in enumerate(batches):
            if sink is None or (restart_every and n % restart_every == 0):
                if sink is not None:
                    sink.close()
                sink = HoodieStreamSink(path, {**SINK, **COMPACT_EVERY_2, **options})
            data = [(*r, False) for r in rows] + [(i, 10**6, city, "", True) for i, city in deletes]
            sink(spark.createDataFrame(data, DDL), start_id + n)
            model.upsert(rows)
            model.delete(i for i, _ in deletes)
            model.snapshots.append(model.expected())
    finally:
        if sink is not None:
            sink.close()


class History(Model):
    def __init__(self):
        super().__init__()
        self.snapshots: list[list[tuple]] = []


def check_layout(path, version):
    """Hudi 1.x's layout: the properties, the timeline directory, a log file per delta commit named by it."""
    table = HoodieTable(path)
    assert table.config.version == version and table.timeline.layout == 2
    assert table.config.props["hoodie.table.initial.version"] in ("6", str(version))
    assert not [n for n in os.listdir(Path(path) / ".hoodie") if n.endswith(("commit", ".requested", ".inflight"))]
    completed = {i.timestamp: i for i in table.timeline.commits_timeline()}
    # (an upgraded instant completes at its old file's modification time, as Hudi takes it, never before the instant)
    assert all(i.completion_time >= i.timestamp for i in completed.values())
    deltas = {t for t, i in completed.items() if i.action == "deltacommit"}
    logs = [parse_log_file_name(p.name) for p in Path(path).rglob(".*.log.*")]
    assert logs and all(log.base_instant in deltas for log in logs), "a log file not named by its delta commit"
    return table


def check_reads(path, model):
    """HoodieTable and hudi-rs read the model: snapshot, read-optimized (hudi-rs), time travel to each commit, and
    incremental windows of each commit by completion time."""
    table = HoodieTable(path)
    assert table_rows(table.read()) == model.expected()
    assert table_rows(rs_read(path)) == model.expected()
    assert_same_rows(table.read(query_type="read_optimized"), rs_read(path, "read_optimized"), COLUMNS)
    deltas = [i for i in table.timeline.commits_timeline() if i.action == "deltacommit"]
    assert len(deltas) == len(model.snapshots)
    retained = earliest_retained(table.timeline) or ""
    travelled = 0
    for inst, expected in zip(deltas, model.snapshots):
        if inst.timestamp < retained:  # the cleaner removed the files of the table as of then
            continue
        travelled += 1
        assert table_rows(table.read(as_of=inst.timestamp)) == expected, inst
        assert_same_rows(table.read(as_of=inst.timestamp), rs_read(path, as_of=inst.timestamp), COLUMNS)
    assert travelled >= 2
    for inst in table.timeline.commits_timeline():
        if inst.timestamp < retained:
            continue
        window = table.read(query_type="incremental", start=inst.timestamp, end=inst.completion_time)
        assert_same_rows(
            window,
            rs_read(path, "incremental", start=inst.timestamp, end=inst.completion_time),
            COLUMNS,
            context=f"incremental {inst}",
        )


@pytest.mark.parametrize("version", [8, 9])
def test_the_sink_writes_the_version_asked_for(spark, tmp_path, version):
    path = str(tmp_path / "t")
    model = History()
    write(spark, path, BATCHES, model, restart_every=4, **{"hoodie.write.table.version": str(version)})
    table = check_layout(path, version)
    actions = [i.action for i in table.timeline.commits_timeline()]
    assert "commit" in actions and table.timeline.completed(["clean"]), actions
    check_reads(path, model)


def test_a_version_6_table_is_upgraded_when_asked_never_downgraded(spark, tmp_path):
    path = str(tmp_path / "t")
    model = History()
    write(spark, path, BATCHES[:3], model, **{"compaction.schedule.enabled": "false"})
    assert HoodieTable(path).config.version == 6
    write(spark, path, BATCHES[3:], model, start_id=3, **{"hoodie.write.table.version": "9"})
    table = check_layout(path, 9)
    assert table.config.props["hoodie.table.initial.version"] == "6"
    assert table_rows(table.read()) == model.expected() == table_rows(rs_read(path))
    # unset: written at its version; lower: refused, nothing written
    write(spark, path, [([(9, 70, "sf", "g9")], [])], model, start_id=6)
    assert HoodieTable(path).config.version == 9
    before = sorted(p.name for p in Path(path).rglob("*"))
    with pytest.raises(HoodieConfigError, match="version 9; tables are not downgraded"):
        write(spark, path, [([(10, 80, "sf", "x")], [])], History(), start_id=7, **{"hoodie.write.table.version": "8"})
    assert sorted(p.name for p in Path(path).rglob("*")) == before
    assert table_rows(HoodieTable(path).read()) == model.expected()
