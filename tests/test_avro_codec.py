import datetime
import decimal
import io
import json
import math
import struct

import fastavro
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import LOG_FILES
from hoodie_stream.errors import HoodieFormatError
from hoodie_stream.format.avro.conform import conform_table
from hoodie_stream.format.avro.decoder import decode_field, decode_records
from hoodie_stream.format.avro.encoder import encode_records
from hoodie_stream.format.avro.schema import arrow_to_avro_schema, avro_to_arrow_schema, with_meta_fields

# ---------------------------------------------------------------- helpers


def fastavro_bytes(table, schema):
    """Per-row fastavro.schemaless_writer output for a table (timestamps given as epoch micros)."""
    parsed = fastavro.parse_schema(schema)
    fields = {f["name"]: f for f in schema["fields"]}
    cols = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_timestamp(col.type):
            raw = col.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
            scale = {"s": -1_000_000, "ms": -1000, "us": 1, "ns": 1000}[col.type.unit]
            micros = raw * -scale if scale < 0 else np.floor_divide(raw.astype(np.int64), scale)
            nulls = col.is_null().to_numpy(zero_copy_only=False)
            cols[name] = [None if null else int(m) for null, m in zip(nulls, micros)]
        else:
            cols[name] = [_py(v, fields[name]["type"]) for v in col.to_pylist()]
    out = []
    for i in range(table.num_rows):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {k: v[i] for k, v in cols.items()})
        out.append(buf.getvalue())
    return out


def _py(v, s):
    if v is None:
        return None
    if isinstance(s, list):
        return _py(v, [b for b in s if b != "null"][0])
    if isinstance(s, dict) and s["type"] == "map":
        return {k: _py(x, s["values"]) for k, x in v}
    if isinstance(s, dict) and s["type"] == "array":
        return [_py(x, s["items"]) for x in v]
    if isinstance(s, dict) and s["type"] == "record":
        return {f["name"]: _py(v.get(f["name"]), f["type"]) for f in s["fields"]}
    return v


def as_micros(table):
    """Top-level timestamps floored to microseconds, as the encoder writes them."""
    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type) and field.type.unit == "ns":
            raw = table.column(i).cast(pa.int64())
            micros = pa.array(
                np.floor_divide(raw.fill_null(0).to_numpy(zero_copy_only=False), 1000),
                mask=raw.is_null().to_numpy(zero_copy_only=False),
            )
            table = table.set_column(i, field.name, micros.cast(pa.timestamp("us", field.type.tz)))
    return table


def fastavro_decode(buffer, offsets, schema, arrow_schema):
    parsed = fastavro.parse_schema(schema)
    rows = [fastavro.schemaless_reader(io.BytesIO(buffer[a:b]), parsed) for a, b in zip(offsets[:-1], offsets[1:])]
    return pa.Table.from_pylist(rows, schema=arrow_schema)


def normal(value):
    """Python values with NaN made comparable."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normal(v) for v in value]
    return value


def check_table(table):
    schema = arrow_to_avro_schema(table.schema, "t_record", "hoodie.t")
    buffer, offsets = encode_records(table, schema)
    assert isinstance(buffer, bytes) and offsets.dtype == np.int64 and len(offsets) == table.num_rows + 1
    expected = fastavro_bytes(table, schema)
    for i, want in enumerate(expected):
        assert buffer[offsets[i] : offsets[i + 1]] == want, f"row {i}"
    assert offsets[-1] == len(buffer)
    arrow_schema = avro_to_arrow_schema(schema)
    decoded = decode_records(buffer, offsets, schema)
    assert decoded.schema.equals(arrow_schema)
    assert normal(decoded.to_pylist()) == normal(conform_table(as_micros(table), arrow_schema).to_pylist())
    assert normal(decoded.to_pylist()) == normal(fastavro_decode(buffer, offsets, schema, arrow_schema).to_pylist())
    again, again_offsets = encode_records(decoded, schema)
    assert again == buffer and np.array_equal(again_offsets, offsets)
    return buffer, offsets


# ---------------------------------------------------------------- strategies

INT_RANGES = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
    pa.uint8(): (0, 2**8 - 1),
    pa.uint32(): (0, 2**32 - 1),
}


def _decimal_type():
    return st.integers(1, 38).flatmap(lambda p: st.integers(0, p).map(lambda s: pa.decimal128(p, s)))


def _values(t):
    """Strategy of Python values (non-null) for Arrow type t."""
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.one_of(
            st.sampled_from([lo, hi, 0, -1, 1, 63, 64, -65]).filter(lambda v: lo <= v <= hi), st.integers(lo, hi)
        )
    if t == pa.bool_():
        return st.booleans()
    if t == pa.float32():
        return st.floats(width=32)
    if t == pa.float64():
        return st.floats()
    if t == pa.string():
        return st.text(max_size=20)
    if t == pa.binary():
        return st.binary(max_size=20)
    if pa.types.is_decimal(t):
        bound = 10**t.precision - 1
        context = decimal.Context(prec=80)
        return st.integers(-bound, bound).map(lambda i: decimal.Decimal(i).scaleb(-t.scale, context))
    if t == pa.date32():
        return st.dates()
    if pa.types.is_timestamp(t):
        bound = min(60_000_000_000 * {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[t.unit], 2**63 - 1)
        return st.integers(-bound, bound)
    if pa.types.is_struct(t):
        return st.fixed_dictionaries({f.name: _nullable(f.type) for f in t})
    if pa.types.is_map(t):
        return st.dictionaries(st.text(max_size=5), _nullable(t.item_type), max_size=4).map(lambda d: list(d.items()))
    if pa.types.is_list(t):
        return st.lists(_nullable(t.value_type), max_size=4)
    raise AssertionError(t)


def _nullable(t):
    return st.one_of(st.none(), _values(t))


LEAF_TYPES = [
    *INT_RANGES,
    pa.bool_(),
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.binary(),
    pa.date32(),
    pa.decimal128(10, 5),
    pa.decimal128(38, 0),
    pa.decimal128(1, 1),
]
NESTED_TYPES = [
    pa.struct(
        [
            ("field1", pa.string()),
            ("field2", pa.int32()),
            ("child", pa.struct([("c1", pa.float64()), ("c2", pa.bool_())])),
        ]
    ),
    pa.list_(pa.field("element", pa.struct([("f1", pa.string()), ("f2", pa.int32())]))),
    pa.list_(pa.field("element", pa.int64())),
    pa.list_(pa.field("element", pa.list_(pa.field("element", pa.string())))),
    pa.map_(pa.string(), pa.struct([("v1", pa.float64()), ("v2", pa.bool_())])),
    pa.map_(pa.string(), pa.decimal128(12, 3)),
    pa.struct([("l", pa.list_(pa.field("element", pa.decimal128(7, 2)))), ("b", pa.binary())]),
]
TIMESTAMP_TYPES = [pa.timestamp(u, tz) for u in ("s", "ms", "us", "ns") for tz in (None, "UTC")]


@st.composite
def tables(draw):
    n_cols = draw(st.integers(1, 6))
    types = draw(
        st.lists(
            st.one_of(st.sampled_from(LEAF_TYPES + NESTED_TYPES + TIMESTAMP_TYPES), _decimal_type()),
            min_size=n_cols,
            max_size=n_cols,
        )
    )
    n_rows = draw(st.integers(0, 12))
    columns = {}
    for i, t in enumerate(types):
        values = draw(st.lists(_nullable(t), min_size=n_rows, max_size=n_rows))
        columns[f"c{i}"] = pa.array(values, t)
    return pa.table(columns)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_random_tables_match_fastavro_and_round_trip(table):
    check_table(table)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.data())
def test_one_field_decodes_as_the_whole_record_decodes_it(table, data):
    """decode_field (the record keys of a log block) reads the fields up to one and returns that column as
    decode_records does; the records lie with a gap between them, as in AVRO_DATA content."""
    schema = arrow_to_avro_schema(table.schema, "t_record", "hoodie.t")
    buffer, offsets = encode_records(table, schema)
    gapped = b"".join(b"\xff\xff" + buffer[offsets[i] : offsets[i + 1]] for i in range(table.num_rows)) + b"\xff"
    starts = offsets[:-1] + 2 * np.arange(1, table.num_rows + 1)
    ends = offsets[1:] + 2 * np.arange(1, table.num_rows + 1)
    whole = decode_records(gapped, starts, schema, ends=ends)
    name = data.draw(st.sampled_from(table.column_names))
    got, want = decode_field(gapped, starts, ends, schema, name), whole[name].combine_chunks()
    assert got.type == want.type and _nan_as_text(got.to_pylist()) == _nan_as_text(want.to_pylist())


def _nan_as_text(value):
    """Values with every NaN as the text "NaN" (NaN equals nothing, itself included, and Arrow's equals agrees)."""
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, list):
        return [_nan_as_text(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_nan_as_text(v) for v in value)
    if isinstance(value, dict):
        return {k: _nan_as_text(v) for k, v in value.items()}
    return value


def test_one_field_of_a_real_log_block_and_a_missing_field():
    schema, buffer, offsets = _avro_block()
    keys = decode_field(buffer, offsets[:-1], offsets[1:], schema, "_hoodie_record_key")
    assert keys.equals(decode_records(buffer, offsets, schema)["_hoodie_record_key"].combine_chunks())
    with pytest.raises(HoodieFormatError, match="no field 'nope'"):
        decode_field(buffer, offsets[:-1], offsets[1:], schema, "nope")


def test_one_field_behind_a_multi_branch_union_is_read_by_fastavro():
    schema = {
        "type": "record",
        "name": "r",
        "fields": [{"name": "u", "type": ["null", "long", "string"]}, {"name": "k", "type": "string"}],
    }
    records = [{"u": 5, "k": "a"}, {"u": "x", "k": "b"}, {"u": None, "k": "c"}]
    parts = []
    for r in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(schema), r)
        parts.append(out.getvalue())
    offsets = np.cumsum([0] + [len(p) for p in parts])
    assert decode_field(b"".join(parts), offsets[:-1], offsets[1:], schema, "k").to_pylist() == ["a", "b", "c"]


@settings(max_examples=50, deadline=None)
@given(tables(), st.integers(0, 5), st.integers(0, 5))
def test_sliced_and_chunked_input(table, lo, k):
    sliced = table.slice(min(lo, table.num_rows), k)
    chunked = pa.concat_tables([sliced, sliced.slice(0, 1)])
    check_table(chunked)


# ---------------------------------------------------------------- specific cases


def test_extremes_and_special_values():
    table = pa.table(
        {
            "l": pa.array([-(2**63), 2**63 - 1, 0, None, -1], pa.int64()),
            "f": pa.array([float("nan"), float("inf"), -float("inf"), -0.0, None], pa.float32()),
            "d": pa.array([float("nan"), 1e308, -5e-324, None, 0.1], pa.float64()),
            "s": pa.array(["", "日本語", "a" * 300, None, "\x00"]),
            "dec": pa.array(
                [
                    decimal.Decimal("-128"),
                    decimal.Decimal("127"),
                    decimal.Decimal("-1"),
                    decimal.Decimal("-99999999999999999999999999999999999999"),
                    None,
                ],
                pa.decimal128(38, 0),
            ),
        }
    )
    check_table(table)


def test_bytes_decimal_and_enum_and_non_nullable():
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "k", "type": "string"},
            {"name": "bd", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 2}]},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
            {"name": "rev", "type": ["string", "null"]},
            {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 3}},
            {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        ],
    }
    values = ["0", "-1.28", "1.27", "-1.29", "123456789012345678.99", "-0.01", None]
    table = pa.table(
        {
            "k": ["a", "b", "c", "d", "e", "f", "g"],
            "bd": pa.array([None if v is None else decimal.Decimal(v) for v in values], pa.decimal128(20, 2)),
            "e": ["A", "C", "B", "A", "A", "C", "B"],
            "rev": ["x", None, "y", None, "", "z", None],
            "fx": pa.array([b"abc", b"def", b"\x00\x01\x02", b"xyz", b"123", b"456", b"789"], pa.binary(3)),
            "ts": pa.array([0, 1_700_000_000_123, None, -1, 5, 6, 7], pa.timestamp("ms", "UTC")),
        }
    )
    buffer, offsets = encode_records(table, schema)
    parsed = fastavro.parse_schema(schema)
    for i, rec in enumerate(table.to_pylist()):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, rec)
        assert buffer[offsets[i] : offsets[i + 1]] == out.getvalue(), i
    decoded = decode_records(buffer, offsets, schema)
    assert decoded.to_pylist() == conform_table(table, decoded.schema).to_pylist()
    with pytest.raises(HoodieFormatError, match="k"):
        encode_records(table.set_column(0, "k", pa.array(["a", None, "c", "d", "e", "f", "g"])), schema)
    with pytest.raises(HoodieFormatError, match="enum"):
        encode_records(table.set_column(2, "e", pa.array(["A", "Z", "B", "A", "A", "C", "B"])), schema)


def test_column_order_extra_and_missing_nullable_columns():
    schema = arrow_to_avro_schema(pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())]), "r", "n")
    table = pa.table({"x": [9, 9], "b": ["p", "q"], "a": [1, 2]})
    buffer, offsets = encode_records(table, schema)
    decoded = decode_records(buffer, offsets, schema)
    assert decoded.to_pylist() == [{"a": 1, "b": "p", "c": None}, {"a": 2, "b": "q", "c": None}]


def test_meta_fields_schema_and_empty_table():
    schema = with_meta_fields(arrow_to_avro_schema(pa.schema([("ts", pa.int64())]), "r", "n"))
    buffer, offsets = encode_records(pa.table({"ts": pa.array([], pa.int64())}), schema)
    assert buffer == b"" and offsets.tolist() == [0]
    assert decode_records(buffer, offsets, schema).num_rows == 0


def test_schema_evolution_reader_schema():
    writer = arrow_to_avro_schema(
        pa.schema(
            [("id", pa.int32()), ("gone", pa.string()), ("st", pa.struct([("a", pa.int32()), ("old", pa.string())]))]
        ),
        "r",
        "n",
    )
    reader = arrow_to_avro_schema(
        pa.schema(
            [("id", pa.int64()), ("st", pa.struct([("a", pa.int64()), ("new", pa.float64())])), ("added", pa.string())]
        ),
        "r",
        "n",
    )
    table = pa.table(
        {
            "id": pa.array([1, None], pa.int32()),
            "gone": ["x", "y"],
            "st": pa.array([{"a": 5, "old": "o"}, None], pa.struct([("a", pa.int32()), ("old", pa.string())])),
        }
    )
    buffer, offsets = encode_records(table, writer)
    decoded = decode_records(buffer, offsets, writer, reader_schema=reader)
    assert decoded.schema.equals(avro_to_arrow_schema(reader))
    assert decoded.to_pylist() == [
        {"id": 1, "st": {"a": 5, "new": None}, "added": None},
        {"id": None, "st": None, "added": None},
    ]
    target = pa.schema([("st", pa.struct([("old", pa.string())])), ("id", pa.int64())])
    assert decode_records(buffer, offsets, writer, arrow_schema=target).to_pylist() == [
        {"st": {"old": "o"}, "id": 1},
        {"st": None, "id": None},
    ]


def test_multi_branch_union_falls_back_to_fastavro():
    schema = {"type": "record", "name": "r", "fields": [{"name": "u", "type": ["null", "long", "string"]}]}
    table = pa.table({"u": ["a", None, "bc"]})
    buffer, offsets = encode_records(table, schema)
    assert buffer == b"\x04\x02a\x00\x04\x04bc"
    decoded = decode_records(buffer, offsets, schema, arrow_schema=pa.schema([("u", pa.string())]))
    assert decoded.column("u").to_pylist() == ["a", None, "bc"]


def test_corrupt_buffer_is_reported():
    schema = arrow_to_avro_schema(pa.schema([("s", pa.string())]), "r", "n")
    buffer, offsets = encode_records(pa.table({"s": ["hello", "x"]}), schema)
    with pytest.raises(HoodieFormatError):
        decode_records(buffer, np.array([0, 3, len(buffer)]), schema)
    with pytest.raises(HoodieFormatError):
        decode_records(b"\x02\x7e", np.array([0, 2]), schema)


@pytest.mark.parametrize("kind", ["string", "bytes"])
def test_a_negative_length_is_refused_not_read_out_of_bounds(kind):
    """Corrupt content whose string or bytes length is negative (zigzag 0x05 = -3) ends before it starts."""
    schema = {"type": "record", "name": "r", "fields": [{"name": "s", "type": ["null", kind]}]}
    good, _ = encode_records(pa.table({"s": pa.array([b"abc"] if kind == "bytes" else ["abc"])}), schema)
    assert good == b"\x02\x06abc"
    bad = b"\x02\x05abc" * 3
    with pytest.raises(HoodieFormatError, match="negative"):
        decode_records(bad, np.array([0, 5, 10, 15]), schema)


def test_multi_block_and_negative_count_arrays_decode():
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "a", "type": {"type": "array", "items": "long"}},
            {"name": "m", "type": {"type": "map", "values": "int"}},
        ],
    }
    # a = [1, 2, 3] as blocks [1, 2] and (-1 items, 1 byte) [3]; m = {"k": 7}
    rec = bytes([4, 2, 4, 1, 2, 6, 0, 2, 2]) + b"k" + bytes([14, 0])
    decoded = decode_records(rec + rec, np.array([0, len(rec), 2 * len(rec)]), schema)
    assert decoded.column("a").to_pylist() == [[1, 2, 3]] * 2
    assert decoded.column("m").to_pylist() == [[("k", 7)]] * 2


# ---------------------------------------------------------------- real log block


def _avro_block():
    path = next((LOG_FILES / "valid_log_avro_data").glob(".*"))
    data = path.read_bytes()
    assert data[:6] == b"#HUDI#"
    pos = 6 + 8
    _version, block_type = struct.unpack(">ii", data[pos : pos + 8])
    assert block_type == 3
    pos += 8
    (count,) = struct.unpack(">i", data[pos : pos + 4])
    pos += 4
    header = {}
    for _ in range(count):
        key, length = struct.unpack(">ii", data[pos : pos + 8])
        header[key] = data[pos + 8 : pos + 8 + length].decode()
        pos += 8 + length
    (content_len,) = struct.unpack(">q", data[pos : pos + 8])
    content = data[pos + 8 : pos + 8 + content_len]
    version, n = struct.unpack(">ii", content[:8])
    assert version == 3
    records, offsets, at = [], [0], 8
    for _ in range(n):
        (length,) = struct.unpack(">i", content[at : at + 4])
        records.append(content[at + 4 : at + 4 + length])
        offsets.append(offsets[-1] + length)
        at += 4 + length
    return json.loads(header[2]), b"".join(records), np.array(offsets, np.int64)


def test_real_log_block_records_decode_like_fastavro():
    schema, buffer, offsets = _avro_block()
    decoded = decode_records(buffer, offsets, schema)
    expected = fastavro_decode(buffer, offsets, schema, avro_to_arrow_schema(schema))
    assert decoded.equals(expected)
    assert decoded.num_rows >= 1 and decoded.column("_hoodie_record_key").null_count == 0
    again, again_offsets = encode_records(decoded, schema)
    assert again == buffer and np.array_equal(again_offsets, offsets)


def test_real_log_block_read_with_evolved_reader_schema():
    schema, buffer, offsets = _avro_block()
    reader = dict(
        schema,
        fields=[f for f in schema["fields"] if f["name"] != "rider"]
        + [{"name": "tip", "type": ["null", "double"], "default": None}],
    )
    decoded = decode_records(buffer, offsets, schema, reader_schema=reader)
    assert "rider" not in decoded.column_names
    assert decoded.column("tip").null_count == decoded.num_rows
    assert decoded.column("uuid").equals(decode_records(buffer, offsets, schema).column("uuid"))


def test_dates_and_timestamps_match_fastavro_values():
    table = pa.table(
        {
            "d": pa.array([datetime.date(1, 1, 1), datetime.date(9999, 12, 31), None], pa.date32()),
            "t": pa.array([-1, 1, None], pa.timestamp("ns")),
        }
    )
    buffer, offsets = check_table(table)
    decoded = decode_records(buffer, offsets, arrow_to_avro_schema(table.schema, "r", "n"))
    assert decoded.column("t").type == pa.timestamp("us", tz="UTC")
    assert decoded.column("t").cast(pa.int64()).to_pylist() == [-1, 0, None]


def test_null_parents_backed_by_child_values():
    """Struct nulls over valid child values and null lists over non-empty ranges write nothing inside."""
    child = pa.array([1, 2, 3], pa.int32())
    struct_arr = pa.StructArray.from_arrays([child], names=["x"], mask=pa.array([False, True, False]))
    lists = pa.ListArray.from_arrays(
        pa.array([0, 2, 4, 5], pa.int32()), pa.array([1, 2, 3, 4, 5], pa.int64()), mask=pa.array([False, True, False])
    )
    check_table(pa.table({"s": struct_arr, "l": lists}))
    check_table(pa.table({"s": struct_arr, "l": lists}).slice(1))


def test_varints_read_a_slice_of_rows_at_a_time_decode_alike(monkeypatch):
    """Varints of more than one byte are read VARINT_ROWS rows at a time (bounding the windows' memory); with a
    slice of 3 rows, numbers of every width, string lengths and a varint at the buffer's very end decode as
    fastavro decodes them."""
    from hoodie_stream.format.avro import decoder as avro_decoder

    monkeypatch.setattr(avro_decoder, "VARINT_ROWS", 3)
    rng = np.random.default_rng(5)
    n = 40
    widths = rng.integers(0, 63, n)
    table = pa.table(
        {
            "s": pa.array(["x" * int(w) * 3 for w in widths]),
            "l": pa.array([int(v) for v in (rng.integers(-(2**62), 2**62, n) >> widths)], pa.int64()),
            "i": pa.array([None if w % 5 == 0 else int(w) * 1000 - 20000 for w in widths], pa.int32()),
            "last": pa.array([-(2**63) if w % 2 else 2**63 - 1 for w in widths], pa.int64()),
        }
    )
    check_table(table)
