"""Bad input is refused with an error naming the record, field or option, and the table is left unchanged."""

import os

import pytest

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.errors import HoodieConfigError, HoodieError, HoodieKeyError, HoodieTableError
from storage_helpers import tree
from stream_model import OPTIONS, SCHEMA_DDL


@pytest.fixture
def table(spark, tmp_path):
    base = str(tmp_path / "t")
    sink = HoodieStreamSink(base, OPTIONS)
    rows = [(1, "sf", 1, "a", False), (2, "nyc", 1, "b", False)]
    sink(spark.createDataFrame(rows, SCHEMA_DDL), 0)
    return base, sink


def assert_refused(spark, base, sink, rows, ddl, error, *needles, batch_id=1):
    before = tree(base)
    with pytest.raises(error) as e:
        sink(spark.createDataFrame(rows, ddl), batch_id)
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))
    assert tree(base) == before, "the table changed"
    assert HoodieTable(base).read().num_rows == 2


def test_null_record_key(spark, table):
    base, sink = table
    assert_refused(
        spark,
        base,
        sink,
        [(3, "sf", 1, "c", False), (None, "sf", 1, "nokey", False)],
        SCHEMA_DDL,
        HoodieKeyError,
        "'id'",
        "nokey",
    )


def test_null_ordering_value(spark, table):
    base, sink = table
    assert_refused(
        spark,
        base,
        sink,
        [(3, "sf", 1, "c", False), (4, "sf", None, "d", False)],
        SCHEMA_DDL,
        HoodieKeyError,
        "'ts'",
        "'4'",
    )


def test_missing_ordering_field(spark, table):
    base, sink = table
    assert_refused(spark, base, sink, [(3, "sf", "c")], "id long, city string, v string", HoodieConfigError, "'ts'")


def test_missing_partition_field(spark, table):
    base, sink = table
    assert_refused(
        spark,
        base,
        sink,
        [(3, 1, "c", False)],
        "id long, ts long, v string, _hoodie_is_deleted boolean",
        HoodieConfigError,
        "'city'",
    )


def test_incompatible_schema_changes(spark, table):
    base, sink = table
    assert_refused(
        spark,
        base,
        sink,
        [(3, "sf", 1, 7, False)],
        "id long, city string, ts long, v int, _hoodie_is_deleted boolean",
        HoodieError,
        "'v'",
    )
    assert_refused(
        spark,
        base,
        sink,
        [(3, "sf", 1, False)],
        "id long, city string, ts long, _hoodie_is_deleted boolean",
        HoodieError,
        "'v'",
    )
    assert_refused(
        spark,
        base,
        sink,
        [(3, "sf", 1, False, True)],
        "id long, city string, ts long, _hoodie_is_deleted boolean, v boolean",
        HoodieError,
        "'v'",
    )


def test_new_nullable_column_at_the_end_evolves_the_table(spark, table):
    base, sink = table
    sink(spark.createDataFrame([(3, "sf", 2, "c", False, 1.5)], SCHEMA_DDL + ", fare double"), 1)
    t = HoodieTable(base).read().sort_by("id")
    assert t["fare"].to_pylist() == [None, None, 1.5]
    sink(spark.createDataFrame([(1, "sf", 3, "a3", False, 2.5)], SCHEMA_DDL + ", fare double"), 2)
    assert HoodieTable(base).read().sort_by("id")["fare"].to_pylist() == [2.5, None, 1.5]


def test_unknown_and_invalid_options():
    with pytest.raises(HoodieConfigError, match="hoodie.datasource.write.recordkey.feild"):
        HoodieStreamSink("/tmp/x", dict(OPTIONS, **{"hoodie.datasource.write.recordkey.feild": "id"}))
    with pytest.raises(HoodieConfigError, match="write.batch.size"):
        HoodieStreamSink("/tmp/x", dict(OPTIONS, **{"write.batch.size": "lots"}))
    with pytest.raises(HoodieConfigError, match="hoodie.datasource.write.operation"):
        HoodieStreamSink("/tmp/x", dict(OPTIONS, **{"hoodie.datasource.write.operation": "merge"}))
    with pytest.raises(HoodieConfigError, match="MERGE_ON_READ"):
        HoodieStreamSink("/tmp/x", dict(OPTIONS, **{"hoodie.datasource.write.table.type": "COPY_ON_WRITE"}))
    with pytest.raises(HoodieConfigError, match="recordkey"):
        HoodieStreamSink("/tmp/x", {"hoodie.table.name": "x"})
    with pytest.raises(HoodieConfigError, match="hoodie.stream.compaction.nice"):
        HoodieStreamSink("/tmp/x", dict(OPTIONS, **{"hoodie.stream.compaction.nice": "25"}))
    assert (
        HoodieStreamSink("/tmp/x", dict(OPTIONS, **{"hoodie.stream.compaction.nice": "0"})).options.compaction.nice == 0
    )
    with pytest.raises(HoodieConfigError, match="hoodie.stream.worker.memory.release"):
        HoodieStreamSink("/tmp/x", dict(OPTIONS, **{"hoodie.stream.worker.memory.release": "sometimes"}))


def test_target_directory_that_is_not_a_hudi_table(spark, tmp_path):
    base = tmp_path / "not-hudi"
    base.mkdir()
    (base / "data.csv").write_text("id\n1\n")
    sink = HoodieStreamSink(str(base), OPTIONS)
    with pytest.raises(HoodieTableError, match="not a Hudi table") as e:
        sink(spark.createDataFrame([(1, "sf", 1, "a", False)], SCHEMA_DDL), 0)
    assert str(base) in str(e.value)
    assert sorted(os.listdir(base)) == ["data.csv"]


def test_options_that_disagree_with_the_table(spark, table):
    base, _ = table
    sink = HoodieStreamSink(base, dict(OPTIONS, **{"hoodie.datasource.write.recordkey.field": "v"}))
    before = tree(base)
    with pytest.raises(HoodieConfigError, match="record key"):
        sink(spark.createDataFrame([(3, "sf", 1, "c", False)], SCHEMA_DDL), 1)
    assert tree(base) == before
