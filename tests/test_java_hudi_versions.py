"""Tables Apache Hudi 1.2 writes at table version 8 (Hudi 1.0's) and 9 (its own), read by HoodieTable, spark.read of
the `hoodie` data source's rules and hudi-rs, against a plain-Python model and Hudi 1.2's own answers: every query
type (snapshot, read-optimized, time travel to every commit, incremental windows by completion time), on merge-on-read
tables with upserts, deletes, a late update that must lose and an inline compaction, whose logs after it join the
compacted slice by their completion time. The sink continues such tables at their version, and writes them when
`hoodie.write.table.version` asks; Hudi 1.2 reads and continues what it wrote.

Hudi 1.x reads an incremental window [begin, end] by completion time, both ends included; hudi-rs 0.5 excludes
`begin`. The windows here start at a commit's instant time, after the commit before it completed (the commits run
one after another), so both read the same commits."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import java_hudi as jh
import test_java_hudi_writes as writes
import test_sink_versions as sink_versions
from hoodie_stream import HoodieTable
from hoodie_stream.format.read.time_travel import earliest_retained
from hoodie_stream.format.timeline.instant import instant_to_datetime
from oracle import META, assert_same_rows, rs_read
from test_java_hudi_writes import Model, table_rows

pytestmark = [pytest.mark.java_hudi]

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.string())])
CITIES = ["sf", "nyc", "sao_paulo"]
COLUMNS = sorted(META + ["id", "ts", "city", "v"])


def hudi_options(name: str, version: str) -> dict[str, str]:
    """Hudi 1.2's writer options of test_java_hudi_writes (Hudi's index), at table version `version`, with an
    inline compaction every 2 delta commits."""
    return writes.hudi_options(
        "1.2.0",
        name,
        global_index=False,
        **{
            "hoodie.write.table.version": version,
            "hoodie.compact.inline": "true",
            "hoodie.compact.inline.max.delta.commits": "2",
        },
    )


def batch(rows, deletes=()):
    """Rows for Hudi's writer; `deletes` (id, city) as rows with `_hoodie_is_deleted` true."""
    data = [dict(zip(SCHEMA.names, r), _hoodie_is_deleted=False) for r in rows]
    data += [dict(id=i, ts=10**6, city=c, v="", _hoodie_is_deleted=True) for i, c in deletes]
    return pa.Table.from_pylist(data, SCHEMA.append(pa.field("_hoodie_is_deleted", pa.bool_())))


BATCHES = [
    ([(i, 10, CITIES[i % 3], f"a{i}") for i in range(9)], []),
    ([(1, 20, "nyc", "b1"), (2, 20, "sao_paulo", "b2"), (9, 20, "sf", "n9"), (4, 5, "nyc", "late4")], []),
    ([(3, 30, "sf", "c3")], [(5, "sao_paulo"), (6, "sf")]),  # the third delta commit: after the inline compaction
    ([(1, 40, "nyc", "d1"), (10, 40, "nyc", "n10")], [(9, "sf")]),
]


@pytest.fixture(scope="module", params=["8", "9"])
def hudi_table(request, java_hudi, tmp_path_factory):
    """(path, model, version): a table Hudi 1.2 wrote at table version 8 or 9."""
    version = request.param
    hudi = java_hudi("1.2.0")
    path = str(tmp_path_factory.mktemp(f"hudi_v{version}") / "t")
    model = Model()
    for rows, deletes in BATCHES:
        hudi.write(path, batch(rows, deletes), hudi_options(f"v{version}_table", version))
        model.upsert(rows)
        model.delete(i for i, _ in deletes)
    return path, model, version


def test_hudi_wrote_the_version_asked_for(hudi_table):
    path, _model, version = hudi_table
    table = HoodieTable(path)
    assert table.config.version == int(version) and table.timeline.layout == 2
    actions = [i.action for i in table.timeline.commits_timeline()]
    assert actions.count("commit") >= 1 and actions.count("deltacommit") == len(BATCHES), actions
    assert all(i.completion_time > i.timestamp for i in table.timeline.commits_timeline())


def assert_every_query(path, model, hudi):
    """HoodieTable reads the model; Hudi 1.2 and hudi-rs read what HoodieTable reads for every query type: snapshot,
    read-optimized, time travel to each commit, each commit's incremental window by completion time, and the window
    from the first commit on (commits whose files the cleaner removed left out)."""
    table = HoodieTable(path)
    ours = table.read()
    assert table_rows(ours) == model.expected()
    queries = [({}, jh.snapshot()), ({"query_type": "read_optimized"}, jh.read_optimized())]
    retained = earliest_retained(table.timeline) or ""
    commits = [i for i in table.timeline.commits_timeline() if i.timestamp >= retained]
    for inst in commits:
        queries.append(({"as_of": inst.timestamp}, jh.snapshot(inst.timestamp)))
        queries.append(({"query_type": "read_optimized", "as_of": inst.timestamp}, jh.read_optimized(inst.timestamp)))
        window = {"query_type": "incremental", "start": inst.timestamp, "end": inst.completion_time}
        queries.append((window, jh.incremental(inst.timestamp, inst.completion_time)))
    queries.append(({"query_type": "incremental", "start": commits[0].timestamp}, jh.incremental(commits[0].timestamp)))
    for kwargs, options in queries:
        ours = table.read(**kwargs)
        ok, why = jh.same_rows(ours, hudi.read(path, options), COLUMNS)
        assert ok, f"{kwargs}: Hudi 1.2 vs HoodieTable.read: {why}"
        rs_kwargs = dict(kwargs)
        if kwargs.get("query_type") == "incremental":
            rs_kwargs.setdefault("end", None)
        assert_same_rows(ours, rs_read(path, **rs_kwargs), COLUMNS, context=f"{kwargs} vs hudi-rs")


def test_every_query_type_reads_as_hudi_and_the_model(hudi_table, java_hudi):
    path, model, _version = hudi_table
    assert_every_query(path, model, java_hudi("1.2.0"))


def test_spark_reads_as_hoodie_table(hudi_table, spark):
    from hoodie_stream.spark import register

    path, model, _version = hudi_table
    register(spark)
    table = HoodieTable(path)
    last = table.timeline.commits_timeline()[-1]
    for options, kwargs in [
        ({}, {}),
        ({"hoodie.datasource.query.type": "read_optimized"}, {"query_type": "read_optimized"}),
        (
            {
                "hoodie.datasource.query.type": "incremental",
                "hoodie.datasource.read.begin.instanttime": last.timestamp,
                "hoodie.datasource.read.end.instanttime": last.completion_time,
            },
            {"query_type": "incremental", "start": last.timestamp, "end": last.completion_time},
        ),
    ]:
        got = spark.read.format("hoodie").options(**options).load(path).toArrow()
        assert_same_rows(got, table.read(**kwargs), context=f"spark.read {options}")
    assert table_rows(spark.read.format("hoodie").load(path).toArrow()) == model.expected()


def test_the_sink_continues_a_table_hudi_wrote_and_hudi_reads_and_continues_it(hudi_table, java_hudi, spark, tmp_path):
    """The sink continues a copy of the table at its own version (its metadata table removed first, as for any table):
    upserts, a late update, deletes, a key deleted and inserted again, with its
    compaction every 2 delta commits and cleaning. Hudi 1.2, hudi-rs and HoodieTable read the model for every query
    type; then Hudi 1.2 writes into it again (an upsert, a delete, its inline compaction) and all read the model."""
    source, model, version = hudi_table
    hudi = java_hudi("1.2.0")
    path = str(tmp_path / "t")
    shutil.copytree(source, path)
    model = copy.deepcopy(model)
    model.snapshots = []
    batches = [
        ([(2, 50, "sao_paulo", "s2"), (11, 50, "sao_paulo", "n11"), (3, 1, "sf", "late3")], [(7, "nyc")]),
        ([(7, 10**7, "nyc", "again7"), (0, 60, "sf", "s0")], [(8, "sao_paulo")]),
        ([(12, 70, "nyc", "n12")], [(11, "sao_paulo")]),
    ]
    sink_versions.write(spark, path, batches, model, start_id=0)
    table = sink_versions.check_layout(path, int(version))
    assert table.config.props["hoodie.table.initial.version"] == version
    assert not (Path(path) / ".hoodie" / "metadata").exists()
    assert_every_query(path, model, hudi)
    options = {**hudi_options(f"v{version}_table", version), "hoodie.compact.inline.max.delta.commits": "1"}
    hudi.write(path, batch([(13, 80, "sf", "h13"), (1, 80, "nyc", "h1")], [(0, "sf")]), options)
    model.upsert([(13, 80, "sf", "h13"), (1, 80, "nyc", "h1")])
    model.delete([0])
    assert HoodieTable(path).config.version == int(version)
    assert table_rows(HoodieTable(path).read()) == model.expected()
    assert table_rows(hudi.read(path, jh.snapshot())) == model.expected()
    assert table_rows(rs_read(path)) == model.expected()


@pytest.mark.parametrize("version", [8, 9])
def test_hudi_reads_and_continues_a_table_the_sink_wrote(java_hudi, spark, tmp_path, version):
    """The sink writes a table at version 8 or 9 (test_sink_versions: inserts, updates, a late update, a partition
    move, deletes, a key deleted and inserted again, a restart, compaction every 2 delta commits, cleaning): Hudi 1.2
    and hudi-rs read the model, every query type; Hudi 1.2 writes into it (an upsert, a delete) and all read the model;
    the sink goes on after Hudi and all read the model again."""
    hudi = java_hudi("1.2.0")
    path = str(tmp_path / "t")
    model = sink_versions.History()
    sink_versions.write(
        spark, path, sink_versions.BATCHES, model, restart_every=4, **{"hoodie.write.table.version": str(version)}
    )
    sink_versions.check_layout(path, version)
    assert_every_query(path, model, hudi)
    options = {**hudi_options(HoodieTable(path).config.table_name, str(version)), "hoodie.compact.inline": "false"}
    hudi.write(path, batch([(20, 90, "sf", "h20"), (1, 90, "nyc", "h1")], [(9, "sf")]), options)
    model.upsert([(20, 90, "sf", "h20"), (1, 90, "nyc", "h1")])
    model.delete([9])
    for reader in (lambda: HoodieTable(path).read(), lambda: hudi.read(path, jh.snapshot()), lambda: rs_read(path)):
        assert table_rows(reader()) == model.expected()
    sink_versions.write(spark, path, [([(21, 95, "nyc", "s21")], [(20, "sf")])], model, start_id=len(model.snapshots))
    assert table_rows(HoodieTable(path).read()) == model.expected()
    assert table_rows(hudi.read(path, jh.snapshot())) == model.expected()


def test_the_command_lines_views_of_the_table(hudi_table, capsys):
    """`commits` shows each commit's completion time from its file name; `validate` finds nothing wrong."""
    from hoodie_stream.__main__ import main

    path, _model, _version = hudi_table
    table = HoodieTable(path)
    capsys.readouterr()
    assert main(["commits", path, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    done = {i.timestamp: i.completion_time for i in table.timeline.commits_timeline()}
    assert [r["instant"] for r in rows] == list(done)
    assert [r["completed_time"] for r in rows] == [instant_to_datetime(done[r["instant"]]).isoformat() for r in rows]
    assert main(["validate", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"]


# -- a table the sink wrote, upgraded (`hoodie-stream upgrade`) ---------------------------------------------------------
@pytest.mark.parametrize("to", [8, 9])
def test_hudi_reads_and_continues_a_sink_table_the_command_upgraded(java_hudi, spark, tmp_path, capsys, to):
    """The sink writes a version 6 table (bulk insert, upserts, deletes, a partition move into log files); the
    command line refuses to upgrade it while logs are in its latest slices, compacts it, upgrades it to `to`; Hudi
    1.2 reads it as the model and as HoodieTable, every query type; then Hudi 1.2 writes into it (an upsert and a
    delete at that version) and both read the model again."""
    from hoodie_stream.__main__ import main
    from hoodie_stream.compaction.offline import compact_table
    from test_java_hudi_writes import CITIES as W_CITIES
    from test_java_hudi_writes import initial, sink_write

    hudi = java_hudi("1.2.0")
    path = str(tmp_path / "t")
    model = Model()
    batches = [
        (initial(9), []),
        ([(1, 20, "sf", "b1"), (4, 20, "nyc", "b4"), (9, 20, "sf", "n9")], [(2, W_CITIES[2])]),
        ([(3, 30, W_CITIES[0], "c3"), (5, 1, W_CITIES[2], "late5")], [(6, W_CITIES[0])]),
    ]
    sink_write(spark, path, batches, model)
    capsys.readouterr()
    assert main(["upgrade", path, "--to", str(to)]) == 2
    assert "log files in their latest slice" in capsys.readouterr().err
    list(compact_table(path, spark=spark))  # `hoodie-stream compact PATH`, in this test session's Spark
    assert main(["upgrade", path, "--to", str(to)]) == 0
    table = HoodieTable(path)
    assert table.config.version == to
    assert table_rows(table.read()) == model.expected()
    queries = [({}, jh.snapshot()), ({"query_type": "read_optimized"}, jh.read_optimized())]
    for inst in table.timeline.commits_timeline():
        queries.append(({"as_of": inst.timestamp}, jh.snapshot(inst.timestamp)))
    first = table.timeline.commits_timeline()[0]
    queries.append(({"query_type": "incremental", "start": first.timestamp}, jh.incremental(first.timestamp)))
    for kwargs, options in queries:
        ok, why = jh.same_rows(table.read(**kwargs), hudi.read(path, options), COLUMNS)
        assert ok, f"{kwargs}: Hudi 1.2 vs HoodieTable.read of the upgraded table: {why}"
    options = {**hudi_options(HoodieTable(path).config.table_name, str(to)), "hoodie.compact.inline": "false"}
    hudi.write(path, batch([(7, 50, W_CITIES[1], "h7"), (20, 50, W_CITIES[2], "h20")], [(8, W_CITIES[2])]), options)
    model.upsert([(7, 50, W_CITIES[1], "h7"), (20, 50, W_CITIES[2], "h20")])
    model.delete([8])
    table = HoodieTable(path)
    assert table.config.version == to
    assert table_rows(table.read()) == model.expected()
    assert table_rows(hudi.read(path, jh.snapshot())) == model.expected()
    ok, why = jh.same_rows(table.read(), hudi.read(path, jh.snapshot()), COLUMNS)
    assert ok, why
