"""Tables Apache Hudi 1.2 writes at table version 8 (Hudi 1.0's) and 9 (its own), read by HoodieTable, spark.read of
the `hoodie` data source's rules and hudi-rs, against a plain-Python model and Hudi 1.2's own answers: every query
type (snapshot, read-optimized, time travel to every commit, incremental windows by completion time), on merge-on-read
tables with upserts, deletes, a late update that must lose and an inline compaction, whose logs after it join the
compacted slice by their completion time. The sinks refuse to write such tables (they write version 6).

Hudi 1.x reads an incremental window [begin, end] by completion time, both ends included; hudi-rs 0.5 excludes
`begin`. The windows here start at a commit's instant time, after the commit before it completed (the commits run
one after another), so both read the same commits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import java_hudi as jh
import test_java_hudi_writes as writes
from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.errors import HoodieError
from hoodie_stream.format.timeline.instant import instant_to_datetime
from hoodie_stream.format.write.writer import HoodieWriter
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


def test_every_query_type_reads_as_hudi_and_the_model(hudi_table, java_hudi):
    path, model, _version = hudi_table
    hudi = java_hudi("1.2.0")
    table = HoodieTable(path)
    ours = table.read()
    assert table_rows(ours) == model.expected()
    queries = [({}, jh.snapshot()), ({"query_type": "read_optimized"}, jh.read_optimized())]
    for inst in table.timeline.commits_timeline():
        queries.append(({"as_of": inst.timestamp}, jh.snapshot(inst.timestamp)))
        queries.append(({"query_type": "read_optimized", "as_of": inst.timestamp}, jh.read_optimized(inst.timestamp)))
        window = {"query_type": "incremental", "start": inst.timestamp, "end": inst.completion_time}
        queries.append((window, jh.incremental(inst.timestamp, inst.completion_time)))
    first = table.timeline.commits_timeline()[0].timestamp
    queries.append(({"query_type": "incremental", "start": first}, jh.incremental(first)))
    for kwargs, options in queries:
        ours = table.read(**kwargs)
        ok, why = jh.same_rows(ours, hudi.read(path, options), COLUMNS)
        assert ok, f"{kwargs}: Hudi 1.2 vs HoodieTable.read: {why}"
        rs_kwargs = dict(kwargs)
        if kwargs.get("query_type") == "incremental":
            rs_kwargs.setdefault("end", None)
        assert_same_rows(ours, rs_read(path, **rs_kwargs), COLUMNS, context=f"{kwargs} vs hudi-rs")


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


def test_the_writers_refuse_a_version_they_do_not_write(hudi_table, spark):
    """The writers refuse the table before touching anything: no lease taken, Hudi's properties backup (its
    protocol's file while it changes them) left alone, the rows as they were."""
    path, model, version = hudi_table
    hoodie = Path(path) / ".hoodie"
    backup = hoodie / "hoodie.properties.backup"
    shutil.copy(hoodie / "hoodie.properties", backup)
    before = sorted(str(p.relative_to(path)) for p in Path(path).rglob("*"))
    with pytest.raises(HoodieError, match=f"table version {version} .* read, not written"):
        HoodieWriter(path)
    sink = HoodieStreamSink(path, {"hoodie.datasource.write.recordkey.field": "id"})
    with pytest.raises(HoodieError, match=f"table version {version}"):
        sink(spark.createDataFrame([(1, 50, "sf", "x")], "id long, ts long, city string, v string"), 0)
    sink.close()
    assert sorted(str(p.relative_to(path)) for p in Path(path).rglob("*")) == before
    backup.unlink()
    assert table_rows(HoodieTable(path).read()) == model.expected()


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
