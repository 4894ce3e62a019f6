"""Tables we must refuse, and the errors that say why."""

import os

import pytest

from hoodie_stream.errors import HoodieTableError
from hoodie_stream.format.hoodie_table import HoodieTable
from hoodie_stream.format.write.writer import HoodieWriter
from oracle import assert_same_rows, rs_read


def test_not_a_table(tmp_path):
    with pytest.raises(HoodieTableError) as e:
        HoodieTable(tmp_path)
    assert str(tmp_path) in str(e.value) and "hoodie.properties" in str(e.value)


def test_corrupt_properties(fixture_table):
    base = fixture_table("trips-mor-avro-v6_trips_8i1u")
    path = base / ".hoodie" / "hoodie.properties"
    path.write_text(path.read_text().replace("hoodie.table.checksum=", "hoodie.table.checksum=9"))
    with pytest.raises(HoodieTableError, match="checksum") as e:
        HoodieTable(base)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("name", ["sample-mor-parquet-v6_nonpartitioned"])
def test_version_other_than_6(fixture_table, name):
    base = fixture_table(name)
    path = base / ".hoodie" / "hoodie.properties"
    path.write_text(path.read_text().replace("hoodie.table.version=6", "hoodie.table.version=7"))
    with pytest.raises(HoodieTableError, match="version 7") as e:
        HoodieTable(base)
    assert str(base) in str(e.value)


def test_metadata_table_present_refuses_writes_but_reads(fixture_table):
    base = fixture_table("trips-mor-avro-v6_trips_8i1u")
    before = HoodieTable(base).read()
    os.makedirs(base / ".hoodie" / "metadata" / ".hoodie")
    with pytest.raises(HoodieTableError, match="metadata") as e:
        HoodieWriter(base)
    assert str(base) in str(e.value)
    assert_same_rows(HoodieTable(base).read(), before, context="read by file listing")
    assert_same_rows(HoodieTable(base).read(), rs_read(base), context="hudi-rs")
