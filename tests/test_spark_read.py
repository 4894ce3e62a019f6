"""spark.read.format("hoodie") (hoodie_stream.spark) returns what HoodieTable.read returns: every query type on the
real v6 fixtures and on a table the sink wrote (delta commits and compactions), with filters on the partition column
and on other columns, with Spark's Python filter pushdown on and off; pushed partition filters prune the input
partitions; large base files are split by row groups; unknown options are refused by name."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import v6_table_zips
from hoodie_stream import HoodieTable
from hoodie_stream.errors import HoodieConfigError
from hoodie_stream.format.fs_view import FileSystemView
from hoodie_stream.spark import HoodieDataSource, register
from hoodie_stream.spark.file_splits import FileSplit
from oracle import assert_same_rows, rows
from stream_model import OPTIONS, events_df, generate_batches

ZIPS = [p.stem for p in v6_table_zips()]
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
QUERY_TYPE = "hoodie.datasource.query.type"
BEGIN = "hoodie.datasource.read.begin.instanttime"
END = "hoodie.datasource.read.end.instanttime"


@pytest.fixture(scope="module")
def hoodie_spark(spark):
    register(spark)
    yield spark
    spark.conf.unset(PUSHDOWN)


def spark_read(spark, path, **options):
    return spark.read.format("hoodie").options(**options).load(str(path))


def assert_same(df, expected, context):
    """The DataFrame holds exactly the rows of `expected` (HoodieTable.read's), with its columns in its order."""
    assert df.columns == expected.column_names, context
    assert_same_rows(df.toArrow(), expected, context=context)


def queries(table, every_window=True):
    """(Spark options, HoodieTable.read arguments) of every query type: latest, read-optimized, time travel to the
    first commit, incremental windows (between consecutive commits, or one from the first commit on)."""
    instants = [i.timestamp for i in table.timeline.commits_timeline()]
    out = [({}, {}), ({QUERY_TYPE: "read_optimized"}, {"query_type": "read_optimized"})]
    if not instants:
        return out
    first = instants[0]
    out.append(({"as.of.instant": first}, {"as_of": first}))
    if every_window:
        out.append(
            ({QUERY_TYPE: "read_optimized", "as.of.instant": first}, {"query_type": "read_optimized", "as_of": first})
        )
        for start, end in zip([None] + instants, instants):
            spark_options = {QUERY_TYPE: "incremental", BEGIN: start or "000", END: end}
            out.append((spark_options, {"query_type": "incremental", "start": start, "end": end}))
    else:
        out.append(({QUERY_TYPE: "incremental", BEGIN: first}, {"query_type": "incremental", "start": first}))
    return out


@pytest.mark.parametrize("name", ZIPS)
def test_fixture_every_query_type_matches_hoodie_table(hoodie_spark, fixture_table, name):
    base = fixture_table(name)
    table = HoodieTable(base)
    for options, kwargs in queries(table, every_window=False):
        assert_same(spark_read(hoodie_spark, base, **options), table.read(**kwargs), f"{name} {options}")


# -- a table the sink wrote --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sink_table(hoodie_spark, tmp_path_factory):
    """Delta commits with inserts, updates, deletes, partition moves; an inline compaction every 2 delta commits."""
    from hoodie_stream import HoodieStreamSink

    base = tmp_path_factory.mktemp("spark_read") / "t"
    options = dict(
        OPTIONS,
        **{"compaction.schedule.enabled": "true", "compaction.delta_commits": "2", "compaction.async.enabled": "false"},
    )
    sink = HoodieStreamSink(str(base), options)
    for i, events in enumerate(generate_batches(5, seed=5, monotonic=True)):
        sink(events_df(hoodie_spark, events), i)
    sink.close()
    table = HoodieTable(base)
    assert {i.action for i in table.timeline.commits_timeline()} == {"deltacommit", "commit"}
    return base


def test_sink_table_every_query_type_matches_hoodie_table(hoodie_spark, sink_table):
    table = HoodieTable(sink_table)
    for options, kwargs in queries(table):
        assert_same(spark_read(hoodie_spark, sink_table, **options), table.read(**kwargs), f"sink table {options}")


def latest_slices(base, partitions=None):
    """The latest file slices of the table (of `partitions` only), as the file-system view lists them."""
    view = FileSystemView(str(base))
    return [fs for p in view.partitions() if partitions is None or p in partitions for fs in view.latest_slices(p)]


# (Spark filter, the same as a Python predicate on a row, the partitions (city=...) that may hold its rows)
CITY_FILTERS = [
    ("city = 'chennai'", lambda r: r["city"] == "chennai", {"chennai"}),
    ("city IN ('sao_paulo', 'são luís')", lambda r: r["city"] in ("sao_paulo", "são luís"), {"sao_paulo", "são luís"}),
    ("city > 'san_francisco'", lambda r: r["city"] > "san_francisco", {"sao_paulo", "são luís"}),
    ("city LIKE 'sa%'", lambda r: r["city"].startswith("sa"), {"san_francisco", "sao_paulo"}),
]
OTHER_FILTERS = [
    ("ts >= 300", lambda r: r["ts"] >= 300),
    ("v LIKE 'b2%' OR id < 20", lambda r: r["v"].startswith("b2") or r["id"] < 20),
]


@pytest.mark.parametrize("pushdown", [True, False], ids=["pushdown", "no-pushdown"])
def test_filters_and_partition_pruning(hoodie_spark, sink_table, pushdown):
    hoodie_spark.conf.set(PUSHDOWN, str(pushdown).lower())
    table = HoodieTable(sink_table)
    full = table.read()
    every_slice = latest_slices(sink_table)
    # with pushdown every kind of partition filter the pruner decides; without, Spark alone filters (one of each)
    cases = [
        ({}, {}, CITY_FILTERS if pushdown else CITY_FILTERS[:1], OTHER_FILTERS if pushdown else OTHER_FILTERS[:1]),
        ({QUERY_TYPE: "read_optimized"}, {"query_type": "read_optimized"}, CITY_FILTERS[:1], OTHER_FILTERS[:1]),
    ]
    for options, kwargs, city_filters, other_filters in cases:
        expected_all = table.read(**kwargs)
        for sql, keep, cities in city_filters:
            df = spark_read(hoodie_spark, sink_table, **options).where(sql)
            expected = expected_all.filter(pa.array([keep(r) for r in expected_all.to_pylist()], pa.bool_()))
            assert 0 < expected.num_rows < full.num_rows, sql  # the filter means something on this table
            assert_same(df, expected, f"{options} where {sql}")
            if not options:  # snapshot: one input partition per latest slice of the partitions read
                read = latest_slices(sink_table, {f"city={c}" for c in cities}) if pushdown else every_slice
                assert df.rdd.getNumPartitions() == len(read), f"{sql}: partitions read"
                assert len(read) < len(every_slice) or not pushdown
        for sql, keep in other_filters:
            df = spark_read(hoodie_spark, sink_table, **options).where(sql)
            expected = expected_all.filter(pa.array([keep(r) for r in expected_all.to_pylist()], pa.bool_()))
            assert 0 < expected.num_rows < full.num_rows, sql
            assert_same(df, expected, f"{options} where {sql}")
            assert df.rdd.getNumPartitions() == len(every_slice) or options, f"{sql}: no pruning on data columns"
    # a partition filter and a data filter together, on an incremental query: the same rows as HoodieTable's filters
    instants = [i.timestamp for i in table.timeline.commits_timeline()]
    incremental = {QUERY_TYPE: "incremental", BEGIN: instants[1], END: instants[-2]}
    df = spark_read(hoodie_spark, sink_table, **incremental).where("city = 'chennai' AND ts >= 200")
    expected = table.read(
        "incremental", start=instants[1], end=instants[-2], filters=[("city", "=", "chennai"), ("ts", ">=", 200)]
    )
    assert expected.num_rows > 0
    assert_same(df, expected, "incremental with filters")


def test_pruning_by_the_reader_itself(sink_table):
    """The reader's plan without Spark: pushed partition filters keep the slices of the matching partitions only,
    and hand every filter back to Spark."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, In

    source = HoodieDataSource({"path": str(sink_table)})
    filters = [EqualTo(("city",), "chennai"), GreaterThan(("ts",), 10)]
    reader = source.reader(source.schema())
    assert list(reader.pushFilters(filters)) == filters
    splits = reader.partitions()
    assert all(isinstance(s, FileSplit) for s in splits)
    assert {(s.file_slice.partition, s.file_slice.file_id) for s in splits} == {
        (fs.partition, fs.file_id) for fs in latest_slices(sink_table, {"city=chennai"})
    }
    reader = source.reader(source.schema())
    reader.pushFilters([In(("city",), ("chennai", "nowhere"))])
    assert len(reader.partitions()) == len(latest_slices(sink_table, {"city=chennai"}))
    reader.pushFilters([EqualTo(("city",), "nowhere")])
    assert reader.partitions() == []


def test_large_base_file_is_split_by_row_groups(hoodie_spark, sink_table, tmp_path):
    """A base-only slice larger than hoodie.datasource.read.max.split.bytes becomes one input partition per run
    of row groups; the rows are the same."""
    import shutil

    base = tmp_path / "t"
    shutil.copytree(sink_table, base)
    table = HoodieTable(base)
    expected = table.read("read_optimized")
    slices = list(FileSystemView(str(base)).latest_base_files())
    # rewrite every base file with the same rows in row groups of 3 rows
    groups = 0
    for fs in slices:
        path = base / fs.base_file_path
        rows_ = pq.read_table(path)
        pq.write_table(rows_, path, row_group_size=3)
        groups += pq.ParquetFile(path).metadata.num_row_groups
    assert groups > len(slices)
    df = spark_read(hoodie_spark, base, **{QUERY_TYPE: "read_optimized", "hoodie.datasource.read.max.split.bytes": "1"})
    assert df.rdd.getNumPartitions() == groups
    assert_same(df, expected, "row-group splits")
    df = spark_read(hoodie_spark, base, **{QUERY_TYPE: "read_optimized"})
    assert df.rdd.getNumPartitions() == len(slices)
    assert_same(df, expected, "whole slices")


def test_unknown_and_misplaced_options_are_refused(hoodie_spark, sink_table):
    with pytest.raises(Exception, match="unknown option 'as.of.instants'"):
        spark_read(hoodie_spark, sink_table, **{"as.of.instants": "20240101000000000"})
    with pytest.raises(HoodieConfigError, match="unknown option 'hoodie.datasource.query.typ'"):
        HoodieDataSource({"path": str(sink_table), "hoodie.datasource.query.typ": "snapshot"}).schema()
    with pytest.raises(HoodieConfigError, match="must be one of"):
        HoodieDataSource({"path": str(sink_table), QUERY_TYPE: "changelog"}).schema()
    with pytest.raises(HoodieConfigError, match="applies to streaming reads"):
        source = HoodieDataSource({"path": str(sink_table), "hoodie.datasource.streaming.startOffset": "earliest"})
        source.reader(source.schema())
    # storage options pass (the storage layer's own names)
    df = spark_read(hoodie_spark, sink_table, **{"timeout": "30s"})
    assert sorted(rows(df.toArrow())) == sorted(rows(HoodieTable(sink_table).read()))


def test_spark_discovers_the_data_source_without_register(tmp_path):
    """A new session finds format("hoodie") through Spark's scan of `pyspark_*` modules (pyspark_hoodie.py, on the
    path as an installed package puts it), with no register call."""
    import os
    import pathlib
    import subprocess
    import sys

    from conftest import unzip_table

    root = pathlib.Path(__file__).resolve().parents[1]
    path = unzip_table(v6_table_zips()[0], tmp_path / "t")
    child = (
        "import sys\n"
        "from hoodie_stream.local_spark import local_session_builder\n"
        "spark = local_session_builder('local[1]', 'discovery', {}).getOrCreate()\n"
        "print('rows', spark.read.format('hoodie').load(sys.argv[1]).count())\n"
        "spark.stop()\n"
    )
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run(
        [sys.executable, "-c", child, str(path)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"rows {HoodieTable(str(path)).read().num_rows}" in done.stdout.splitlines()
