import datetime
import decimal
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hoodie_stream.format.base_file.parquet import (
    META_FIELDS,
    key_range,
    read_base_file,
    read_bloom_filter,
    read_footer,
    write_base_file,
)
from oracle import assert_same_rows, rs_read
from storage_helpers import at
from test_bloom_filter import model_serialize

NAME = "6d3d1d6e-2298-4080-a0c1-494877d6f40a-0_0-13-60_20250618054711154.parquet"


def sample_table(n=5):
    keys = [f"key-{i:03d}" for i in reversed(range(n))]
    ts = [datetime.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=datetime.timezone.utc)] * n
    data = {
        "id": pa.array(range(n), pa.int32()),
        "name": pa.array([f"n{i}" if i % 2 else None for i in range(n)]),
        "amount": pa.array([decimal.Decimal("12.34500")] * n, pa.decimal128(10, 5)),
        "ts": pa.array(ts, pa.timestamp("ns", tz="UTC")),
        "day": pa.array([datetime.date(2024, 1, 2)] * n, pa.date32()),
        "tags": pa.array([["a", "b"]] * n, pa.list_(pa.string())),
        "attrs": pa.array([[("k", 1.5)]] * n, pa.map_(pa.string(), pa.float64())),
        "nested": pa.array([{"x": 1, "y": "z"}] * n, pa.struct([("x", pa.int32()), ("y", pa.string())])),
    }
    meta = {
        "_hoodie_commit_time": ["20250618054711154"] * n,
        "_hoodie_commit_seqno": [f"20250618054711154_0_{i}" for i in range(n)],
        "_hoodie_record_key": keys,
        "_hoodie_partition_path": ["city=x"] * n,
        "_hoodie_file_name": [NAME] * n,
    }
    # data columns first on purpose: the writer must move meta columns to the front
    return pa.table({**data, **{k: pa.array(v, pa.string()) for k, v in meta.items()}})


def test_write_read_round_trip_and_footers(tmp_path):
    table = sample_table()
    path = tmp_path / NAME
    schema_json = json.dumps({"type": "record", "name": "r", "fields": []})
    size = write_base_file(*at(path), table, avro_schema_json=schema_json)
    assert size == os.path.getsize(path)
    assert os.listdir(tmp_path) == [NAME]

    back = read_base_file(*at(path))
    assert back.column_names[:5] == META_FIELDS
    assert back.column_names[5:] == ["id", "name", "amount", "ts", "day", "tags", "attrs", "nested"]
    assert back.select(META_FIELDS).equals(table.select(META_FIELDS))
    assert back["ts"].type == pa.timestamp("us", tz="UTC")
    assert back["ts"].to_pylist() == table["ts"].cast(pa.timestamp("us", tz="UTC")).to_pylist()
    for col in ("id", "name", "amount", "day", "tags", "attrs", "nested"):
        assert back[col].to_pylist() == table[col].to_pylist(), col

    footer = read_footer(*at(path))
    keys = table["_hoodie_record_key"].to_pylist()
    assert footer["org.apache.hudi.bloomfilter"] == model_serialize(keys)
    assert footer["hoodie_bloom_filter_type_code"] == "DYNAMIC_V0"
    assert footer["hoodie_min_record_key"] == min(keys)
    assert footer["hoodie_max_record_key"] == max(keys)
    assert footer["parquet.avro.schema"] == schema_json
    assert footer["writer.model.name"] == "avro"
    bf = read_bloom_filter(*at(path))
    assert all(bf.might_contain(k) for k in keys)

    pf = pq.ParquetFile(path)
    rg = pf.metadata.row_group(0)
    assert rg.column(0).compression == "GZIP"
    physical = {pf.schema.column(i).name: pf.schema.column(i).physical_type for i in range(len(pf.schema))}
    assert physical["ts"] == "INT64"
    assert physical["amount"] == "INT64"
    assert "element" in pf.schema.to_arrow_schema().field("tags").type.value_field.name


def test_compression_option_and_filters(tmp_path):
    path = tmp_path / NAME
    write_base_file(*at(path), sample_table(20), compression="snappy")
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "SNAPPY"
    got = read_base_file(*at(path), columns=["_hoodie_record_key", "id"], filters=[("id", "<", 3)])
    assert got.column_names == ["_hoodie_record_key", "id"]
    assert sorted(got["id"].to_pylist()) == [0, 1, 2]


def test_no_meta_fields_skips_key_footers(tmp_path):
    table = sample_table(3)
    nulls = pa.array([None] * 3, pa.string())
    for name in META_FIELDS[:4]:
        table = table.set_column(table.column_names.index(name), name, nulls)
    path = tmp_path / NAME
    write_base_file(*at(path), table)
    footer = read_footer(*at(path))
    assert "org.apache.hudi.bloomfilter" not in footer and "hoodie_min_record_key" not in footer
    assert "parquet.avro.schema" not in footer


def test_missing_meta_columns_rejected(tmp_path):
    with pytest.raises(Exception, match="meta columns"):
        write_base_file(*at(tmp_path / NAME), pa.table({"id": [1]}))
    assert os.listdir(tmp_path) == []


def test_java_string_order_for_key_range(tmp_path):
    keys = ["\U0001f600", "\ufffd", "a"]
    table = sample_table(3).set_column(
        sample_table(3).column_names.index("_hoodie_record_key"), "_hoodie_record_key", pa.array(keys)
    )
    write_base_file(*at(tmp_path / NAME), table)
    footer = read_footer(*at(tmp_path / NAME))
    # Java compares UTF-16 code units: the surrogate pair (0xD83D...) sorts before U+FFFD
    assert footer["hoodie_min_record_key"] == "a"
    assert footer["hoodie_max_record_key"] == "\ufffd"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=20), st.integers(0, 5), st.integers(1, 20))
def test_key_range_in_java_order_on_sliced_keys(keys, lo, n):
    """min/max record key as Java orders strings (UTF-16 code units), on slices of a larger array whose other keys
    hold characters past the Basic Multilingual Plane or not."""
    array = pa.array(["\U0001f600"] + keys + ["\U0001f600"]).slice(1 + min(lo, len(keys) - 1))
    array = array.slice(0, min(n, len(keys) - min(lo, len(keys) - 1)))
    values = array.to_pylist()
    ordered = sorted(values, key=lambda k: k.encode("utf-16-be"))
    assert key_range(array) == (ordered[0], ordered[-1])


def test_hudi_rs_reads_rewritten_fixture_table(fixture_table):
    base = fixture_table("sample-cow-v6_simplekeygen_nonhivestyle")
    before = rs_read(base)
    files = [p for p in base.rglob("*.parquet") if ".hoodie" not in p.parts]
    for path in files:
        original = read_footer(*at(path))
        write_base_file(*at(path), read_base_file(*at(path)), avro_schema_json=original.get("parquet.avro.schema"))
        rewritten = read_footer(*at(path))
        for key in (
            "org.apache.hudi.bloomfilter",
            "hoodie_min_record_key",
            "hoodie_max_record_key",
            "hoodie_bloom_filter_type_code",
            "parquet.avro.schema",
            "writer.model.name",
        ):
            assert rewritten[key] == original[key], (path, key)
    after = rs_read(base)
    assert_same_rows(after, before, context="rewritten base files")
