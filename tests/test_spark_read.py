"""spark.read.format("hoodie") (hoodie_stream.spark) returns what HoodieTable.read returns, and what hudi-rs (the
independent oracle, tests/oracle.py) returns: every query type on the real v6 fixtures and on a table the sink wrote
(delta commits and compactions), on local disk and on the S3 test server; with filters on the partition column and on
other columns, with Spark's Python filter pushdown on and off; pushed partition filters prune the input partitions;
large base files are split by row groups; unknown options are refused by name."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import readable_table_zips, v6_table_zips
from hoodie_stream import HoodieTable
from hoodie_stream.errors import HoodieConfigError
from hoodie_stream.format.file_group.fs_view import FileSystemView
from hoodie_stream.spark import HoodieDataSource, register
from hoodie_stream.spark.file_splits import FileSplit
from locations import Location
from oracle import assert_same_rows, rows, rs_read
from s3_server import REGION
from stream_model import OPTIONS, events_df, generate_batches

ZIPS = [p.stem for p in readable_table_zips()]
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
    """The DataFrame holds exactly the rows of `expected` (HoodieTable.read's), with its columns in its order;
    returns the rows read (Arrow)."""
    assert df.columns == expected.column_names, context
    got = df.toArrow()
    assert_same_rows(got, expected, context=context)
    return got


def hudi_rs_comparable(table):
    """Whether hudi-rs can be the oracle of the table: not while a compaction is pending. hudi-rs 0.5 leaves out the
    log files written to a file group under a pending compaction plan (the plan's new slice, whose base file does not
    exist yet), which HoodieTable and Hudi merge with the slice before: a known limitation of the oracle, not a
    difference to report. (hudi-rs does not list nested partitions either - tests/test_partition_paths.py - and no
    table read here has them.)"""
    return not table.timeline.pending(["compaction"])


def assert_same_as_hudi_rs(got, base, kwargs, context, storage_options=None):
    """Spark's rows `got` are hudi-rs's for the same query: HoodieTable.read's arguments `kwargs` (query_type, as_of,
    start, end) are oracle.rs_read's. hudi-rs 0.5 takes every query type read here: snapshot, read-optimized (its
    hoodie.read.use.read_optimized.mode), time travel (as-of timestamp, also with read-optimized) and incremental
    (start and end timestamps; an open start is the table's beginning, as Spark's begin instant "000")."""
    theirs = rs_read(str(base), storage_options=storage_options, **kwargs)
    assert_same_rows(got, theirs, context=f"{context}: spark.read vs hudi-rs")


def queries(table, every_window=True):
    """(Spark options, HoodieTable.read arguments) of every query type: latest, read-optimized, time travel to the
    first commit (and, with every_window, to each compaction and read-optimized to the first commit), incremental
    windows (between consecutive commits, or one from the first commit on)."""
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
        compactions = [i.timestamp for i in table.timeline.commits_timeline() if i.action == "commit"]  # (MOR)
        out += [({"as.of.instant": ts}, {"as_of": ts}) for ts in compactions]
        for start, end in zip([None] + instants, instants):
            spark_options = {QUERY_TYPE: "incremental", BEGIN: start or "000", END: end}
            out.append((spark_options, {"query_type": "incremental", "start": start, "end": end}))
    else:
        out.append(({QUERY_TYPE: "incremental", BEGIN: first}, {"query_type": "incremental", "start": first}))
    return out


@pytest.mark.parametrize("name", ZIPS)
def test_fixture_every_query_type_matches_hoodie_table_and_hudi_rs(hoodie_spark, fixture_table, name):
    base = fixture_table(name)
    table = HoodieTable(base)
    rs_too = hudi_rs_comparable(table)  # every v6 fixture: none has a pending compaction
    for options, kwargs in queries(table, every_window=False):
        if kwargs.get("query_type") == "incremental" and not table.meta_fields:
            # no commit time per record: refused, as Apache Hudi refuses it
            with pytest.raises(Exception, match="without meta fields"):
                spark_read(hoodie_spark, base, **options).toArrow()
            continue
        got = assert_same(spark_read(hoodie_spark, base, **options), table.read(**kwargs), f"{name} {options}")
        if rs_too:
            assert_same_as_hudi_rs(got, base, kwargs, f"{name} {options}")


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


def test_sink_table_every_query_type_matches_hoodie_table_and_hudi_rs(hoodie_spark, sink_table):
    table = HoodieTable(sink_table)
    assert hudi_rs_comparable(table)  # inline compaction: no plan stays pending
    for options, kwargs in queries(table):
        got = assert_same(
            spark_read(hoodie_spark, sink_table, **options), table.read(**kwargs), f"sink table {options}"
        )
        assert_same_as_hudi_rs(got, sink_table, kwargs, f"sink table {options}")


# -- a table the sink wrote on the S3 test server (tests/s3_server.py) ----------------------------------------------
@pytest.fixture(scope="module")
def s3_sink_table(hoodie_spark, s3_server):
    """A Location on the S3 test server: 3 delta commits, an inline compaction after the second."""
    loc = Location(s3_server.new_table_uri("spark_read"), s3_server.options(), "s3")
    sink = loc.sink(
        dict(
            OPTIONS,
            **{
                "compaction.schedule.enabled": "true",
                "compaction.delta_commits": "2",
                "compaction.async.enabled": "false",
            },
        )
    )
    for i, events in enumerate(generate_batches(3, seed=6, monotonic=True)):
        sink(events_df(hoodie_spark, events), i)
    sink.close()
    actions = [i.action for i in loc.table().timeline.commits_timeline()]
    assert actions == ["deltacommit", "deltacommit", "commit", "deltacommit"], actions
    return loc


def test_s3_table_read_and_stream_with_storage_options_match_hoodie_table_and_hudi_rs(
    hoodie_spark, s3_sink_table, tmp_path
):
    """spark.read and spark.readStream of an s3:// table with its storage options given as reader options: the rows
    HoodieTable.read and hudi-rs read from the same endpoint."""
    loc = s3_sink_table
    table = loc.table()
    assert hudi_rs_comparable(table)
    for options, kwargs in queries(table, every_window=False):
        df = spark_read(hoodie_spark, loc.uri, **loc.options, **options)
        got = assert_same(df, table.read(**kwargs), f"s3 {options}")
        assert_same_as_hudi_rs(got, loc.uri, kwargs, f"s3 {options}", storage_options=loc.options)
    # readStream, availableNow: one micro-batch, the incremental query over every writer commit
    seen = []
    query = (
        hoodie_spark.readStream.format("hoodie")
        .options(**loc.options)
        .load(loc.uri)
        .writeStream.foreachBatch(lambda df, epoch: seen.append(df.toArrow()))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    streamed = pa.concat_tables(seen)
    expected = table.read("incremental")
    assert expected.num_rows > 0
    assert_same_rows(streamed, expected, context="s3 readStream vs HoodieTable")
    assert_same_rows(streamed, loc.rs_read("incremental"), context="s3 readStream vs hudi-rs")


# The child: a session configured with spark.hadoop.fs.s3a.* (no storage option given to the reads) reads the table
# and writes what it read to `out`; then reads that fail print their error: a misspelt option, a table whose base
# files are not Parquet (batch and stream).
S3A_CHILD = """
import json, sys
import pyarrow.parquet as pq
from hoodie_stream.local_spark import local_session_builder
from hoodie_stream.spark import register

conf, uri, broken, options, out = json.loads(sys.argv[1])
spark = local_session_builder("local[1]", "s3a-read", conf).getOrCreate()
register(spark)
pq.write_table(spark.read.format("hoodie").load(uri).toArrow(), out)


def read(uri, **options):
    return spark.read.format("hoodie").options(**options).load(uri).toArrow()


def stream(uri, **options):
    query = (
        spark.readStream.format("hoodie").options(**options).load(uri)
        .writeStream.format("noop").option("checkpointLocation", out + ".chk").trigger(availableNow=True).start()
    )
    query.awaitTermination(120)


cases = [
    ("bad option", lambda: read(uri, **options, **{"as.of.instants": "20240101000000000"})),
    ("broken table", lambda: read(broken, **options)),
    ("broken table, readStream", lambda: stream(broken, **options)),
]
for what, run in cases:
    try:
        run()
        print("READ", what, flush=True)
    except Exception as e:
        print("FAILED", what, "|", type(e).__name__, str(e).replace(chr(10), " / "), flush=True)
spark.stop()
"""


def test_s3_session_settings_and_no_secret_in_failed_reads(s3_sink_table, s3_server, tmp_path):
    """A session's spark.hadoop.fs.s3a.* settings stand in for storage options not given (as for the sink); reads
    that fail (a misspelt option; base files that are not Parquet, in the tasks, batch and stream) show the error
    and never the secret key: not in the error, not in anything the driver, Spark or the Python workers log."""
    import json
    import os
    import pathlib
    import subprocess
    import sys

    loc = s3_sink_table
    broken = loc.copy_to(Location(s3_server.new_table_uri("broken"), loc.options, "s3"))
    damaged = [path for path in broken.data_files() if path.endswith(".parquet")]
    assert damaged
    for path in damaged:
        broken.write(path, b"not a parquet file")
    conf = {
        "spark.hadoop.fs.s3a.access.key": s3_server.access_key,
        "spark.hadoop.fs.s3a.secret.key": s3_server.secret_key,
        "spark.hadoop.fs.s3a.endpoint": s3_server.endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": REGION,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.driver.memory": "1g",
    }
    out = tmp_path / "read.parquet"
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # the session's settings, nothing else
    env["PYTHONPATH"] = str(root)
    args = json.dumps([conf, loc.uri, broken.uri, loc.options, str(out)])
    done = subprocess.run(
        [sys.executable, "-c", S3A_CHILD, args], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_rows(pq.read_table(out), loc.table().read(), context="session s3a settings")
    lines = [line.partition(" | ") for line in done.stdout.splitlines() if line.startswith(("FAILED", "READ"))]
    failed = {what: error for what, _, error in lines}
    assert list(failed) == [
        "FAILED bad option",
        "FAILED broken table",
        "FAILED broken table, readStream",
    ], done.stdout[-3000:]
    assert "unknown option 'as.of.instants'" in failed["FAILED bad option"]
    for what in list(failed)[1:]:
        assert "not a readable Parquet base file" in failed[what], failed[what][:3000]
        assert "Parquet magic bytes not found" in failed[what], failed[what][:3000]
        assert any(f"{broken.uri}/{path}" in failed[what] for path in damaged), failed[what][:3000]  # names the file
    assert "Exception in task" in done.stderr  # Spark logged the failed tasks, with their Python traceback
    for text in (done.stdout, done.stderr):
        assert s3_server.secret_key not in text


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


def test_no_pruning_by_floating_point_partition_values():
    """Spark's `x = 0.0` holds for -0.0 too, whose partition path differs (`x=-0.0`): a floating-point partition
    column decides nothing, an integer one does."""
    from pyspark.sql.datasource import EqualTo, In

    from hoodie_stream.format.record.keygen import SimpleKeyGenerator
    from hoodie_stream.spark.partition_pruning import PartitionPruner

    schema = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("n", pa.int32())])
    floats = PartitionPruner(SimpleKeyGenerator(["id"], ["x"], hive_style=True), schema, [EqualTo(("x",), 0.0)])
    assert floats.keep("x=-0.0") and floats.keep("x=0.0") and floats.keep("x=1.5")
    floats = PartitionPruner(SimpleKeyGenerator(["id"], ["x"], hive_style=True), schema, [In(("x",), (0.0, 2.0))])
    assert floats.keep("x=-0.0")
    ints = PartitionPruner(SimpleKeyGenerator(["id"], ["n"], hive_style=True), schema, [EqualTo(("n",), 0)])
    assert ints.keep("n=0") and not ints.keep("n=1")
