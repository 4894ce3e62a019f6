"""Connect and Debezium field types decoded a column at a time, against a plain-Python model (base64 and
big-endian two's-complement integers by the standard library, dates and times by datetime) on random values and on
every typed field of the real Debezium messages in tests/data/debezium."""

import base64
import datetime
import decimal
import json
import pathlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debezium_model import decode_value
from hoodie_stream.debezium import types
from hoodie_stream.errors import HoodieFormatError

DATA = pathlib.Path(__file__).parent / "data" / "debezium"
EPOCH = datetime.datetime(1970, 1, 1)
EXACT = decimal.Context(prec=100)  # the default context rounds to 28 digits


def java_bytes(n):
    """BigInteger.toByteArray(): the shortest big-endian two's complement of n."""
    length = max(1, (n + (n < 0)).bit_length() // 8 + 1)
    return n.to_bytes(length, "big", signed=True)


def b64(data):
    return None if data is None else base64.b64encode(data).decode("ascii")


def decimal_field(scale, precision=None, name="amount"):
    parameters = {"scale": str(scale)}
    if precision is not None:
        parameters["connect.decimal.precision"] = str(precision)
    return {"type": "bytes", "name": types.CONNECT_DECIMAL, "parameters": parameters, "field": name}


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 20), st.lists(st.one_of(st.none(), st.integers(-(10**30), 10**30)), max_size=30))
def test_connect_decimals_decode_to_the_model(scale, unscaled):
    field = decimal_field(scale, 38)
    values = pa.array([b64(None if u is None else java_bytes(u)) for u in unscaled], pa.string())
    out = types.decode(values, field)
    assert out.type == pa.decimal128(38, scale)
    assert out.to_pylist() == [None if u is None else decimal.Decimal(u).scaleb(-scale, EXACT) for u in unscaled]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=30), st.integers(0, 3))
def test_bytes_decode_from_base64_also_on_a_slice(blobs, lo):
    values = pa.array([None, "AAAA"] + [b64(b) for b in blobs], pa.string()).slice(2)
    out = types.decode(values, {"type": "bytes", "field": "blob"})
    assert out.to_pylist() == blobs
    start = min(lo, len(blobs))
    assert types.decode(values.slice(start), {"type": "bytes", "field": "blob"}).to_pylist() == blobs[start:]


def test_the_documented_examples():
    # DEBEZIUM-NOTES: 1234.50 at scale 2 is "AeI6"; 3.14159 as VariableScaleDecimal; MySQL price "CcM="
    assert types.decode(pa.array(["AeI6"]), decimal_field(2, 10)).to_pylist() == [decimal.Decimal("1234.50")]
    assert types.decode(pa.array(["CcM=", "B88="]), decimal_field(2, 10)).to_pylist() == [
        decimal.Decimal("24.99"),
        decimal.Decimal("19.99"),
    ]
    variable = pa.array([{"scale": 5, "value": "BMsv"}, None, {"scale": 0, "value": "AQ=="}])
    field = {"type": "struct", "name": types.VARIABLE_SCALE_DECIMAL, "field": "n"}
    assert types.decode(variable, field).to_pylist() == [decimal.Decimal("3.14159"), None, decimal.Decimal("1")]
    assert types.decode(variable, field, "string").to_pylist() == ["3.14159", None, "1"]
    micro = {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "updated_at"}
    assert types.decode(pa.array([1709633730123456]), micro).to_pylist() == [
        datetime.datetime(2024, 3, 5, 10, 15, 30, 123456)
    ]
    date = {"type": "int32", "name": "io.debezium.time.Date", "field": "order_date"}
    assert types.decode(pa.array([19783]), date).to_pylist() == [datetime.date(2024, 3, 1)]


def test_infinities_and_zoned_timestamps():
    micro = {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "t"}
    out = types.decode(pa.array([types.PG_INFINITY, types.PG_NEGATIVE_INFINITY, None, 0]), micro)
    assert out.to_pylist() == [
        datetime.datetime(9999, 12, 31, 23, 59, 59, 999999),
        datetime.datetime(1, 1, 1),
        None,
        EPOCH,
    ]
    milli = {"type": "int64", "name": "io.debezium.time.Timestamp", "field": "t"}
    assert types.decode(pa.array([types.PG_INFINITY]), milli).to_pylist() == [
        datetime.datetime(9999, 12, 31, 23, 59, 59, 999000)
    ]
    zoned = {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "field": "z"}
    out = types.decode(pa.array(["2024-03-05T10:15:30.123456Z", "2024-03-05T12:15:30+02:00", "infinity", None]), zoned)
    utc = datetime.timezone.utc
    assert out.to_pylist() == [
        datetime.datetime(2024, 3, 5, 10, 15, 30, 123456, tzinfo=utc),
        datetime.datetime(2024, 3, 5, 10, 15, 30, tzinfo=utc),
        datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
        None,
    ]


def test_bad_values_are_named():
    with pytest.raises(HoodieFormatError, match="field 'amount': value 1 is not base64"):
        types.decode(pa.array(["AeI6", "A?I6"]), decimal_field(2))
    with pytest.raises(HoodieFormatError, match="value 0 is not base64 \\(length 3"):
        types.decode(pa.array(["AeI"]), decimal_field(2))
    with pytest.raises(HoodieFormatError, match="does not fit in precision of decimal128\\(3, 0\\)"):
        types.decode(pa.array([b64(java_bytes(12345))]), decimal_field(0, 3))
    big = {"type": "struct", "name": types.VARIABLE_SCALE_DECIMAL, "field": "n"}
    with pytest.raises(HoodieFormatError, match="field 'n': a value of scale 0 does not fit"):
        types.decode(pa.array([{"scale": 0, "value": b64(java_bytes(10**30))}]), big, (10, 2))
    # 2**100 has 31 integer digits: it fits decimal128(38, 0) but not (38, 10), which Arrow's cast does not check
    with pytest.raises(HoodieFormatError, match="a value of scale 0 does not fit decimal128\\(38, 10\\)"):
        types.decode(pa.array([{"scale": 0, "value": b64(java_bytes(2**100))}]), big)
    assert types.decode(pa.array([{"scale": 0, "value": b64(java_bytes(2**100))}]), big, "string").to_pylist() == [
        str(2**100)
    ]
    with pytest.raises(HoodieFormatError, match="expected base64 or ISO-8601 text"):
        types.decode(pa.array([True]), decimal_field(2))
    # decimal.format=NUMERIC: JSON numbers, checked against the precision before they are cast
    assert types.decode(pa.array([1, -250]), decimal_field(2, 5)).to_pylist() == [
        decimal.Decimal("1.00"),
        decimal.Decimal("-250.00"),
    ]
    with pytest.raises(HoodieFormatError, match="a value of 1000 does not fit decimal128\\(5, 2\\)"):
        types.decode(pa.array([1000]), decimal_field(2, 5))


# -- the real messages ---------------------------------------------------------------------------------------
def typed_fields():
    """(file, field schema, [raw JSON values]) of every named or bytes field in the row structs of every message
    set that carries its schema."""
    out = {}
    for path in sorted(DATA.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["value"] is None:
                continue
            value = json.loads(record["value"], parse_float=decimal.Decimal)  # JSON numbers kept exact
            if not isinstance(value, dict) or "schema" not in value:
                continue
            for envelope_field in value["schema"].get("fields", []):
                if envelope_field.get("field") not in ("before", "after"):
                    continue
                row = value["payload"].get(envelope_field["field"])
                if row is None:
                    continue
                for f in envelope_field.get("fields", []):
                    if f.get("name") in types.MAPPED or (f["type"] == "bytes" and not f.get("name")):
                        key = (path.name, f["field"], json.dumps(f, sort_keys=True))
                        out.setdefault(key, (f, []))[1].append(row.get(f["field"]))
    return [(name, f, values) for (name, _, _), (f, values) in out.items()]


def model(field, value):
    """The model's value, with times of day as datetime.time (the table keeps them as microseconds)."""
    name = field.get("name")
    if value is not None and name in ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time"):
        return (EPOCH + datetime.timedelta(milliseconds=value)).time()
    if value is not None and name == "io.debezium.time.MicroTime":
        return (EPOCH + datetime.timedelta(microseconds=value)).time()
    return decode_value(field, value)


def raw_array(field, values):
    if field.get("name") == types.VARIABLE_SCALE_DECIMAL:
        return pa.array(values, pa.struct([("scale", pa.int32()), ("value", pa.string())]))
    if field.get("name") == types.CONNECT_DECIMAL and any(isinstance(v, (int, decimal.Decimal)) for v in values):
        return pa.array([None if v is None else decimal.Decimal(v) for v in values], pa.decimal128(38, 10))
    if field["type"] in ("bytes", "string"):
        return pa.array(values, pa.string())
    return pa.array(values, pa.int64())


REAL = typed_fields()


def test_the_real_messages_hold_typed_fields():
    names = {f.get("name") for _, f, _ in REAL}
    assert {types.CONNECT_DECIMAL, "io.debezium.time.Date", "io.debezium.time.MicroTimestamp"} <= names
    assert len(REAL) >= 20


@pytest.mark.parametrize(("name", "field", "values"), REAL, ids=[f"{n}:{f['field']}" for n, f, _ in REAL])
def test_every_typed_field_of_the_real_messages(name, field, values):
    expected = [model(field, v) for v in values]
    if field.get("name") == types.VARIABLE_SCALE_DECIMAL:  # as exact text: PostgreSQL numerics exceed 38 digits
        out = types.decode(raw_array(field, values), field, "string")
        assert [None if v is None else decimal.Decimal(v) for v in out.to_pylist()] == expected, name
        return
    out = types.decode(raw_array(field, values), field)
    assert out.type == types.arrow_type(field)
    assert out.to_pylist() == expected, name
