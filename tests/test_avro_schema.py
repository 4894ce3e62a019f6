import json
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import LOG_FILES, unzip_table, v6_table_zips
from hoodie_stream.errors import HoodieFormatError
from hoodie_stream.format.avro.schema import (
    META_FIELDS,
    arrow_to_avro_schema,
    avro_to_arrow_schema,
    decimal_size,
    parse_avro_schema,
    with_meta_fields,
)


def _compact(schema):
    return json.dumps(schema, separators=(",", ":"))


def _props(path):
    props = {}
    for line in Path(path).read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            props[key] = value.replace("\\:", ":").replace("\\=", "=")
    return props


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """(base path, create schema, [commit schemas]) of every v6 fixture table."""
    out = []
    for zip_path in v6_table_zips():
        base = unzip_table(zip_path, tmp_path_factory.mktemp(zip_path.stem))
        create = _props(base / ".hoodie" / "hoodie.properties").get("hoodie.table.create.schema")
        commits = []
        for f in sorted((base / ".hoodie").glob("*commit")):
            text = f.read_text()
            if text.strip():
                schema = json.loads(text).get("extraMetadata", {}).get("schema")
                if schema:
                    commits.append(schema)
        out.append((base, create, commits))
    return out


def _log_header_schema():
    path = next((LOG_FILES / "valid_log_avro_data").glob(".*"))
    data = path.read_bytes()
    pos = 6 + 8 + 8
    (count,) = struct.unpack(">i", data[pos : pos + 4])
    pos += 4
    for _ in range(count):
        key, length = struct.unpack(">ii", data[pos : pos + 8])
        pos += 8
        if key == 2:
            return data[pos : pos + length].decode()
        pos += length
    raise AssertionError("no SCHEMA header")


def test_every_fixture_schema_converts(tables):
    seen = 0
    for _, create, commits in tables:
        for schema in ([create] if create else []) + commits:
            arrow = avro_to_arrow_schema(schema)
            assert arrow.names == [f["name"] for f in json.loads(schema)["fields"]]
            seen += 1
    assert seen > 10
    assert avro_to_arrow_schema(_log_header_schema()).names[:5] == META_FIELDS


def test_commit_schema_round_trips_exactly(tables):
    checked = 0
    for _, _, commits in tables:
        for text in commits:
            schema = json.loads(text)
            back = arrow_to_avro_schema(avro_to_arrow_schema(schema), schema["name"], schema["namespace"])
            assert _compact(back) == text
            checked += 1
    assert checked >= 8


def test_create_schema_matches_commit_schema_in_arrow(tables):
    for _, create, commits in tables:
        if create and commits:
            assert avro_to_arrow_schema(create).equals(avro_to_arrow_schema(commits[-1]))


def test_with_meta_fields_matches_real_log_header():
    header = _log_header_schema()
    data = json.loads(header)
    data["fields"] = [f for f in data["fields"] if f["name"] not in META_FIELDS]
    assert _compact(with_meta_fields(data)) == header
    assert _compact(with_meta_fields(header)) == header  # idempotent
    assert _compact(with_meta_fields(_compact(data))) == header


def _same_type(a, b):
    """Type equality modulo names of list items / map entries (Arrow vs parquet naming)."""
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        return a.num_fields == b.num_fields and all(
            x.name == y.name and _same_type(x.type, y.type) for x, y in zip(a, b)
        )
    if pa.types.is_list(a) and pa.types.is_list(b):
        return _same_type(a.value_type, b.value_type)
    if pa.types.is_map(a) and pa.types.is_map(b):
        return _same_type(a.key_type, b.key_type) and _same_type(a.item_type, b.item_type)
    return a.equals(b)


def test_parquet_base_files_read_as_avro_to_arrow(tables):
    """pyarrow's reading of Spark-written base files has the types avro_to_arrow_schema gives."""
    checked = 0
    for base, _, commits in tables:
        if not commits:
            continue
        expected = avro_to_arrow_schema(with_meta_fields(commits[-1]))
        for path in sorted(base.rglob("*.parquet")):
            if ".hoodie" in path.parts:
                continue
            actual = pq.read_schema(path)
            names = [n for n in expected.names if n in actual.names]
            for name in names:
                assert _same_type(expected.field(name).type, actual.field(name).type), (path, name)
            checked += 1
    assert checked > 5


def test_arrow_round_trip_types():
    schema = pa.schema(
        [
            ("b", pa.bool_()),
            ("i", pa.int32()),
            ("l", pa.int64()),
            ("f", pa.float32()),
            ("d", pa.float64()),
            ("s", pa.string()),
            ("bin", pa.binary()),
            ("dec", pa.decimal128(20, 4)),
            ("date", pa.date32()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("fx", pa.binary(7)),
            ("arr", pa.list_(pa.field("element", pa.struct([("x", pa.string())])))),
            ("m", pa.map_(pa.string(), pa.struct([("v", pa.float64())]))),
            ("st", pa.struct([("a", pa.int32()), ("c", pa.struct([("z", pa.decimal128(5, 1))]))])),
        ]
    )
    avro = arrow_to_avro_schema(schema, "t_record", "hoodie.t")
    back = avro_to_arrow_schema(avro)
    for field in schema:
        assert _same_type(field.type, back.field(field.name).type), field.name
    parse_avro_schema(avro)  # names unique and resolvable
    import fastavro

    fastavro.parse_schema(avro)
    st = avro["fields"][-1]["type"][1]
    assert st["namespace"] == "hoodie.t.t_record"
    z = st["fields"][1]["type"][1]["fields"][0]["type"][1]
    assert z["name"] == "fixed" and z["namespace"] == "hoodie.t.t_record.st.c.z" and z["size"] == 3


def test_narrow_and_other_types_map_like_spark():
    schema = pa.schema([("a", pa.int8()), ("b", pa.int16()), ("t", pa.timestamp("ns")), ("d", pa.date64())])
    avro = arrow_to_avro_schema(schema, "r", "ns")
    assert [f["type"][1] for f in avro["fields"]] == [
        "int",
        "int",
        {"type": "long", "logicalType": "timestamp-micros"},
        {"type": "int", "logicalType": "date"},
    ]


def test_decimal_sizes_match_spark():
    assert [decimal_size(p) for p in (1, 2, 3, 9, 10, 18, 19, 38)] == [1, 1, 2, 4, 5, 8, 9, 16]


def test_avro_to_arrow_accepts_other_shapes():
    avro = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "req", "type": "long"},
            {"name": "rev", "type": ["string", "null"]},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
            {"name": "e2", "type": ["null", "E"]},
            {"name": "bd", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}},
            {"name": "tm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "lt", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
            {"name": "p", "type": {"type": "int"}},
        ],
    }
    arrow = avro_to_arrow_schema(json.dumps(avro))
    assert not arrow.field("req").nullable and arrow.field("rev").nullable
    assert arrow.field("e").type == pa.string() and arrow.field("e2").type == pa.string()
    assert arrow.field("bd").type == pa.decimal256(40, 2)
    assert arrow.field("tm").type == pa.timestamp("ms", tz="UTC")
    assert arrow.field("lt").type == pa.timestamp("us")
    assert arrow.field("p").type == pa.int32()


def test_unsupported_shapes_raise():
    with pytest.raises(HoodieFormatError):
        avro_to_arrow_schema({"type": "record", "name": "r", "fields": [{"name": "u", "type": ["int", "string"]}]})
    with pytest.raises(HoodieFormatError):
        arrow_to_avro_schema(pa.schema([("m", pa.map_(pa.int32(), pa.int32()))]), "r", "n")
