"""Bad input a new user hit in the first hour: each is a clear error, or behaves as a Hudi or Spark user expects."""

import os
import sys
from types import SimpleNamespace

import pyarrow as pa
import pytest

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.errors import HoodieConfigError, HoodieError, HoodieKeyError, HoodieTableError
from hoodie_stream.format.timeline.instant import parse_instant_time
from hoodie_stream.streaming_sink import sink as sink_module
from oracle import assert_same_rows, rows, rs_read
from stream_model import OPTIONS, SCHEMA_DDL
from test_stream_bad_input import tree
from timed_table import INSTANTS, values

# -- time travel and incremental arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "form",
    [
        "2026-11-23 20:48:20.123",
        "2026-11-23T20:48:20.123",
        "2026-11-23T20:48:20.123Z",
        "2026-11-23T22:48:20.123+02:00",
        "2026-11-23T18:18:20.123456-02:30",
    ],
)
def test_time_travel_forms_read_as_the_instant_time(timed_table, form):
    table = HoodieTable(timed_table)
    exact = table.read(as_of=INSTANTS[1])
    assert values(exact) == ["a2", "b1"]
    assert_same_rows(exact, rs_read(timed_table, as_of=INSTANTS[1]), context="17-digit as of")
    assert rows(table.read(as_of=form)) == rows(exact), form


def test_second_granularity_forms_as_hudi_reads_them(timed_table):
    """`yyyy-MM-dd HH:mm:ss` is the whole second (Hudi: millis 999); a 14-digit time is compared as text, so it
    covers the instants before that second (Hudi and hudi-rs); an ISO time without millis is exact (hudi-rs)."""
    table = HoodieTable(timed_table)
    assert parse_instant_time("2026-11-23 20:48:20", "as_of") == "20261123204820999"
    assert values(table.read(as_of="2026-11-23 20:48:20")) == ["a2", "b1"]
    assert values(table.read(as_of="2026-11-23 20:48:19")) == ["a1"]
    for form in ["20261123204820", "2026-11-23T20:48:20Z", "2026-11-23T22:48:20+02:00"]:
        ours = table.read(as_of=form)
        assert values(ours) == ["a1"], form
        assert_same_rows(ours, rs_read(timed_table, as_of=form), context=form)
    assert values(table.read(as_of="2026-11-23T20:48:20")) == ["a1"]


def test_dates_are_midnight(timed_table):
    table = HoodieTable(timed_table)
    assert table.read(as_of="2026-11-23").num_rows == 0
    assert values(table.read(as_of="2026-11-24")) == ["a2", "b1", "c1"]


def test_incremental_window_forms(timed_table):
    table = HoodieTable(timed_table)
    exact = table.read("incremental", start=INSTANTS[0], end=INSTANTS[1])
    assert values(exact) == ["a2", "b1"]
    assert_same_rows(exact, rs_read(timed_table, "incremental", start=INSTANTS[0], end=INSTANTS[1]))
    for start, end in [
        ("2026-11-23 20:48:19.500", "2026-11-23 20:48:20.123"),
        ("2026-11-23T20:48:19.5Z", "2026-11-23 20:48:20"),
        ("20261123204819500", "2026-11-23T21:48:20.123+01:00"),
    ]:
        assert rows(table.read("incremental", start=start, end=end)) == rows(exact), (start, end)
    assert values(table.read("incremental", start="2026-11-23 20:48:20")) == ["c1"]
    assert values(table.read("incremental", start="20261123204820")) == ["a2", "b1", "c1"]


@pytest.mark.parametrize(
    "bad",
    [
        "not-a-time",
        "yesterday",
        "2026-11-23 20:48",
        "2026-02-30",
        "2026-11-23 24:00:00",
        "202611232048201",
        "2026/11/23",
        "",
        "2026-11-23T20:48:20+25:00",
        3.5,
    ],
)
def test_garbage_instants_are_refused(timed_table, bad):
    table = HoodieTable(timed_table)
    with pytest.raises(HoodieError, match="as_of=.*yyyy-MM-dd HH:mm:ss"):
        table.read(as_of=bad)
    if str(bad).isdigit():  # an incremental read compares digits with the instants as text, as Hudi's does
        return
    with pytest.raises(HoodieError, match="start=.*yyyyMMddHHmmssSSS"):
        table.read("incremental", start=bad)
    with pytest.raises(HoodieError, match="end="):
        table.read("incremental", start=INSTANTS[0], end=bad)


def test_as_of_on_an_incremental_read_is_refused(timed_table):
    with pytest.raises(HoodieError, match="as_of"):
        HoodieTable(timed_table).read("incremental", as_of=INSTANTS[1])


def test_local_timeline_timezone(monkeypatch):
    """Tables with hoodie.table.timeline.timezone=LOCAL: offsets convert to the local time zone."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    import time

    time.tzset()
    try:
        assert parse_instant_time("2026-11-23T20:48:20.123Z", "as_of", "LOCAL") == "20261124021820123"
        assert parse_instant_time("2026-11-23 20:48:20.123", "as_of", "LOCAL") == "20261123204820123"
    finally:
        monkeypatch.undo()
        time.tzset()


# -- the sink -----------------------------------------------------------------------------------------------------


@pytest.fixture
def table(spark, tmp_path):
    base = str(tmp_path / "t")
    sink = HoodieStreamSink(base, OPTIONS)
    sink(spark.createDataFrame([(1, "sf", 1, "a", False), (2, "nyc", 1, "b", False)], SCHEMA_DDL), 0)
    return base


def test_precombine_option_that_differs_from_the_table_is_refused(spark, table):
    before = tree(table)
    df = spark.createDataFrame([(3, "sf", 1, "c", False)], SCHEMA_DDL)
    sink = HoodieStreamSink(table, dict(OPTIONS, **{"hoodie.datasource.write.precombine.field": "v"}))
    with pytest.raises(HoodieConfigError, match="precombine.field.*'v'.*'ts'"):
        sink(df, 1)
    assert tree(table) == before


def test_unset_precombine_option_takes_the_tables(spark, table):
    options = {k: v for k, v in OPTIONS.items() if k != "hoodie.datasource.write.precombine.field"}
    sink = HoodieStreamSink(table, options)
    # in the batch the greater ts wins, and an older ts does not beat the stored version: event-time ordering
    sink(
        spark.createDataFrame(
            [(1, "sf", 5, "a5", False), (1, "sf", 3, "a3", False), (2, "nyc", 0, "b0", False)], SCHEMA_DDL
        ),
        1,
    )
    assert values(HoodieTable(table).read()) == ["a5", "b"]
    with pytest.raises(HoodieConfigError, match="'ts'"):
        sink(spark.createDataFrame([(1, "sf", "x")], "id long, city string, v string"), 2)


def test_table_name_must_be_the_tables(spark, table):
    before = tree(table)
    df = spark.createDataFrame([(3, "sf", 1, "c", False)], SCHEMA_DDL)
    with pytest.raises(HoodieConfigError, match="'orders'.*'stream_model'"):
        HoodieStreamSink(table, dict(OPTIONS, **{"hoodie.table.name": "orders"}))(df, 1)
    assert tree(table) == before
    HoodieStreamSink(table, dict(OPTIONS, **{"hoodie.table.name": "Stream_Model"}))(df, 1)  # Spark's resolver
    assert HoodieTable(table).read().num_rows == 3


def test_columns_are_matched_by_name(spark, table):
    sink = HoodieStreamSink(table, OPTIONS)
    sink(
        spark.createDataFrame(
            [(False, "c", 1, "sf", 3)], "_hoodie_is_deleted boolean, v string, ts long, city string, id long"
        ),
        1,
    )
    sink(
        spark.createDataFrame(
            [(1.5, "d", 4, "nyc", 1, False)],
            "fare double, v string, id long, city string, ts long, _hoodie_is_deleted boolean",
        ),
        2,
    )
    t = HoodieTable(table)
    assert t.arrow_schema(meta_fields=False).names == ["id", "city", "ts", "v", "_hoodie_is_deleted", "fare"]
    got = t.read().sort_by("id")
    assert got["v"].to_pylist() == ["a", "b", "c", "d"] and got["fare"].to_pylist() == [None, None, None, 1.5]
    assert_same_rows(got, rs_read(table), context="reordered batches")


def test_numeric_columns_widen_as_hudi_allows(spark, tmp_path):
    base = str(tmp_path / "w")
    sink = HoodieStreamSink(base, OPTIONS)
    ddl = "id long, city string, ts long, v string, _hoodie_is_deleted boolean, n {}, f {}"
    sink(spark.createDataFrame([(1, "sf", 1, "a", False, 7, 1.5)], ddl.format("int", "float")), 0)
    # int -> long, float -> double: the table schema evolves, the rows written before read in the wider type
    sink(spark.createDataFrame([(2, "sf", 1, "b", False, 2**40, 0.1)], ddl.format("long", "double")), 1)
    t = HoodieTable(base)
    schema = t.arrow_schema(meta_fields=False)
    assert (schema.field("n").type, schema.field("f").type) == (pa.int64(), pa.float64())
    # a narrower batch is written in the table's type (int -> long, float -> double)
    sink(spark.createDataFrame([(3, "sf", 1, "c", False, 9, 2.5)], ddl.format("int", "float")), 2)
    # long -> double widens again
    sink(spark.createDataFrame([(4, "sf", 1, "d", False, 4.25, 3.0)], ddl.format("double", "double")), 3)
    t = HoodieTable(base)
    assert t.arrow_schema(meta_fields=False).field("n").type == pa.float64()
    got = t.read().sort_by("id")
    assert got["n"].to_pylist() == [7.0, float(2**40), 9.0, 4.25]
    assert got["f"].to_pylist() == [1.5, 0.1, 2.5, 3.0]
    assert_same_rows(got, rs_read(base), context="widened columns")
    # narrowing the table is refused, as a type Hudi does not promote
    with pytest.raises(HoodieError, match="'v'.*string"):
        sink(
            spark.createDataFrame(
                [(5, "sf", 1, 5, False, 1.0, 1.0)], ddl.format("double", "double").replace("v string", "v int")
            ),
            4,
        )


def test_decimals_widen_within_their_avro_fixed_size_as_hudi_allows(spark, tmp_path):
    """Hudi 0.15's write check compares an Avro fixed's size, not its precision: decimal(10, 2) (5 bytes) takes
    decimal(11, 2) (5 bytes) and the table evolves, decimal(12, 2) (6 bytes) is refused."""
    from decimal import Decimal

    base = str(tmp_path / "d")
    sink = HoodieStreamSink(base, OPTIONS)
    ddl = "id long, city string, ts long, v string, _hoodie_is_deleted boolean, price decimal({}, 2)"
    sink(spark.createDataFrame([(1, "sf", 1, "a", False, Decimal("12345678.91"))], ddl.format(10)), 0)
    sink(spark.createDataFrame([(2, "sf", 1, "b", False, Decimal("123456789.12"))], ddl.format(11)), 1)
    sink(spark.createDataFrame([(1, "sf", 2, "c", False, Decimal("0.5"))], ddl.format(10)), 2)  # written as (11, 2)
    t = HoodieTable(base)
    assert t.arrow_schema(meta_fields=False).field("price").type == pa.decimal128(11, 2)
    got = t.read().sort_by("id")
    assert got["price"].to_pylist() == [Decimal("0.50"), Decimal("123456789.12")]
    assert_same_rows(got, rs_read(base), context="widened decimal")
    with pytest.raises(HoodieError, match=r"'price' is decimal128\(12, 2\) in the batch.*same Avro fixed size"):
        sink(spark.createDataFrame([(3, "sf", 1, "d", False, Decimal("1.00"))], ddl.format(12)), 3)
    assert HoodieTable(base).read().num_rows == 2
    # fewer digits than the table's, whatever their size: written as the table's decimal(11, 2)
    sink(spark.createDataFrame([(3, "sf", 1, "d", False, Decimal("1.25"))], ddl.format(4)), 3)
    got = HoodieTable(base).read().sort_by("id")
    assert got.schema.field("price").type == pa.decimal128(11, 2) and got["price"][2].as_py() == Decimal("1.25")


def test_non_nullable_new_column_says_how_to_make_it_nullable(spark, table):
    from pyspark.sql import functions as F

    sink = HoodieStreamSink(table, OPTIONS)
    df = spark.createDataFrame([(3, "sf", 1, "c", False)], SCHEMA_DDL).withColumn("extra", F.lit(1))
    assert not df.schema["extra"].nullable
    with pytest.raises(HoodieError, match=r"'extra' must be nullable.*F\.when") as e:
        sink(df, 1)
    assert "df.to(schema)" in str(e.value)
    sink(df.withColumn("extra", F.when(F.col("extra").isNotNull(), F.col("extra"))), 1)  # the advice works
    assert sorted(HoodieTable(table).read()["extra"].to_pylist(), key=str) == [1, None, None]


def test_failed_first_batch_leaves_no_table(spark, tmp_path):
    base = tmp_path / "first"
    sink = HoodieStreamSink(str(base), OPTIONS)
    with pytest.raises(HoodieKeyError, match="'id'"):
        sink(spark.createDataFrame([(1, "sf", 1, "a", False), (None, "sf", 1, "nokey", False)], SCHEMA_DDL), 0)
    assert not os.path.exists(base) or os.listdir(base) == []
    with pytest.raises(HoodieTableError):
        HoodieTable(str(base))
    # a good first batch with another schema creates the table from its own schema
    sink(spark.createDataFrame([(1, "sf", 1, "a", False, 2.5)], SCHEMA_DDL + ", fare double"), 0)
    t = HoodieTable(str(base))
    assert t.arrow_schema(meta_fields=False).names[-1] == "fare"
    assert t.read()["fare"].to_pylist() == [2.5]


# -- the interpreter of Spark's Python workers ----------------------------------------------------------------------


def _fake_python(directory, body):
    directory.mkdir(exist_ok=True)
    exe = directory / "python3"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    return exe


def test_worker_python_that_cannot_import_the_package(tmp_path, monkeypatch):
    _fake_python(tmp_path / "bin", "echo \"ModuleNotFoundError: No module named 'hoodie_stream'\" >&2; exit 1")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setattr(sink_module, "_checked_worker_pythons", set())
    spark = SimpleNamespace(sparkContext=SimpleNamespace(pythonExec="python3", master="local[2]"))
    with pytest.raises(HoodieConfigError) as e:
        sink_module.check_worker_python(spark)
    message = str(e.value)
    for needle in (
        "'python3'",
        "No module named 'hoodie_stream'",
        "PYSPARK_PYTHON",
        "spark.pyspark.python",
        sys.executable,
    ):
        assert needle in message, (needle, message)
    # a cluster's executors run elsewhere: not checked from the driver
    sink_module.check_worker_python(
        SimpleNamespace(sparkContext=SimpleNamespace(pythonExec="python3", master="spark://host:7077"))
    )


def test_worker_python_checks(tmp_path, monkeypatch):
    assert sink_module.worker_python_problem(sys.executable) is None
    good = _fake_python(tmp_path / "good", f'exec "{sys.executable}" "$@"')
    assert sink_module.worker_python_problem(str(good)) is None
    assert "cannot be started" in sink_module.worker_python_problem(str(tmp_path / "missing" / "python3"))
    monkeypatch.setenv("PATH", str(tmp_path / "good"))
    monkeypatch.setattr(sink_module, "_checked_worker_pythons", set())
    spark = SimpleNamespace(sparkContext=SimpleNamespace(pythonExec="python3", master="local[*]"))
    sink_module.check_worker_python(spark)
    assert sink_module._checked_worker_pythons == {"python3"}
