import datetime
import decimal
import zoneinfo

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import v6_table_zips
from hoodie_stream.errors import HoodieConfigError, HoodieKeyError
from hoodie_stream.format.record.keygen import (
    ComplexKeyGenerator,
    NonpartitionedKeyGenerator,
    SimpleKeyGenerator,
    TimestampBasedKeyGenerator,
    java_double_str,
    make_key_generator,
    value_strings,
)
from hoodie_stream.format.util.java_properties import load_bytes
from storage_helpers import at

HIVE_ESCAPES = set(chr(c) for c in range(0x20)) | set("\"#%'*/:=?\\\x7f{[]^")


# ------------------------------------------------------------------ plain per-row model of the Java rules


def escape(value):
    return "".join(f"%{ord(c):02X}" if c in HIVE_ESCAPES else c for c in value)


def model_key(row, fields, complex_=False):
    if len(fields) == 1 and not complex_:
        v = row[fields[0]]
        if v is None or v == "":
            raise HoodieKeyError(fields[0])
        return v
    parts, all_missing = [], True
    for f in fields:
        v = row[f]
        if v is None:
            parts.append(f"{f}:__null__")
        elif v == "":
            parts.append(f"{f}:__empty__")
        else:
            parts.append(f"{f}:{v}")
            all_missing = False
    if all_missing:
        raise HoodieKeyError(fields)
    return ",".join(parts)


def model_partition(row, fields, hive, encode):
    out = []
    for f in fields:
        v = row[f]
        if v is None or v == "":
            out.append((f + "=" if hive else "") + "__HIVE_DEFAULT_PARTITION__")
        else:
            v = escape(v) if encode else v
            out.append(f + "=" + v if hive else v)
    return "/".join(out)


# ------------------------------------------------------------------ fixtures


def table_files(base):
    return [p for p in base.rglob("*.parquet") if ".hoodie" not in p.parts]


@pytest.mark.parametrize("zip_path", v6_table_zips(), ids=lambda p: p.stem)
def test_fixture_keys_and_partitions(zip_path, fixture_table):
    base = fixture_table(zip_path.name)
    props = load_bytes((base / ".hoodie" / "hoodie.properties").read_bytes())
    kg = make_key_generator(props)
    files = table_files(base)
    for path in files:
        t = pq.read_table(path)
        if props.get("hoodie.populate.meta.fields") == "false":
            # no stored keys to compare: the generated partition path must name the file's directory
            rel = path.parent.relative_to(base).as_posix()
            assert set(kg.partition_paths(t).to_pylist()) == {rel}, path
            assert kg.record_keys(t).to_pylist() == [str(v) for v in t[kg.record_key_fields[0]].to_pylist()]
            continue
        assert kg.record_keys(t).equals(t["_hoodie_record_key"].combine_chunks()), path
        assert kg.partition_paths(t).equals(t["_hoodie_partition_path"].combine_chunks()), path
        if t.num_rows and kg.partition_fields and not isinstance(kg, TimestampBasedKeyGenerator):
            assert path.parent.relative_to(base).as_posix() == t["_hoodie_partition_path"][0].as_py()


def test_fixture_parquet_log_blocks(fixture_table):
    from hoodie_stream.format.log_file.data_block import read_parquet_content
    from hoodie_stream.format.log_file.log_block import BlockType
    from hoodie_stream.format.log_file.reader import read_log_file

    checked = 0
    for zip_path in v6_table_zips():
        if "mor-parquet" not in zip_path.name:
            continue
        base = fixture_table(zip_path.name)
        props = load_bytes((base / ".hoodie" / "hoodie.properties").read_bytes())
        if props.get("hoodie.populate.meta.fields") == "false":
            continue
        kg = make_key_generator(props)
        for log in base.rglob(".*.log.*"):
            for block in read_log_file(*at(log)):
                if block.block_type != BlockType.PARQUET_DATA:
                    continue
                t = read_parquet_content(block.content)
                assert kg.record_keys(t).equals(t["_hoodie_record_key"].combine_chunks()), log
                assert kg.partition_paths(t).equals(t["_hoodie_partition_path"].combine_chunks()), log
                checked += t.num_rows
    assert checked > 0


# ------------------------------------------------------------------ property tests against the model

key_text = st.text(alphabet=st.sampled_from(list("ab,:/ =%#?\\'\"é中\U0001f600\x01\x7f{[]^*") + ["x"]), max_size=6)
maybe_text = st.one_of(st.none(), st.just(""), key_text)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(maybe_text, maybe_text, maybe_text), min_size=1, max_size=12), st.booleans(), st.booleans())
def test_complex_matches_model(rows, hive, encode):
    table = pa.table(
        {"k1": [r[0] for r in rows], "k2": [r[1] for r in rows], "p": [r[2] for r in rows]},
        schema=pa.schema([("k1", pa.string()), ("k2", pa.string()), ("p", pa.string())]),
    )
    dicts = table.to_pylist()
    kg = ComplexKeyGenerator(["k1", "k2"], ["p", "k2"], hive_style=hive, url_encode=encode)
    assert kg.partition_paths(table).to_pylist() == [model_partition(r, ["p", "k2"], hive, encode) for r in dicts]
    try:
        expected = [model_key(r, ["k1", "k2"]) for r in dicts]
    except HoodieKeyError:
        bad = next(i for i, r in enumerate(dicts) if r["k1"] in (None, "") and r["k2"] in (None, ""))
        with pytest.raises(HoodieKeyError, match=f"row {bad}"):
            kg.record_keys(table)
        return
    assert kg.record_keys(table).to_pylist() == expected


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(maybe_text, maybe_text), min_size=1, max_size=12), st.booleans(), st.booleans())
def test_simple_matches_model(rows, hive, encode):
    table = pa.table(
        {"k": [r[0] for r in rows], "p": [r[1] for r in rows]},
        schema=pa.schema([("k", pa.string()), ("p", pa.string())]),
    )
    dicts = table.to_pylist()
    kg = SimpleKeyGenerator(["k"], ["p"], hive_style=hive, url_encode=encode)
    assert kg.partition_paths(table).to_pylist() == [model_partition(r, ["p"], hive, encode) for r in dicts]
    bad = [i for i, r in enumerate(dicts) if r["k"] in (None, "")]
    if bad:
        with pytest.raises(HoodieKeyError, match=rf"'k'.*row {bad[0]}\b"):
            kg.record_keys(table)
    else:
        assert kg.record_keys(table).to_pylist() == [r["k"] for r in dicts]
    single = ComplexKeyGenerator(["k"], ["p"])
    if not bad:
        assert single.record_keys(table).to_pylist() == [f"k:{r['k']}" for r in dicts]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=10))
def test_integer_values(values):
    table = pa.table({"id": pa.array(values, pa.int64()), "b": pa.array([None] * len(values), pa.int8())})
    got = value_strings(table, "id").to_pylist()
    assert got == [None if v is None else str(v) for v in values]
    kg = ComplexKeyGenerator(["id", "b"], ["b"])
    if any(v is None for v in values):
        with pytest.raises(HoodieKeyError):
            kg.record_keys(table)
    else:
        assert kg.record_keys(table).to_pylist() == [f"id:{v},b:__null__" for v in values]
    assert kg.partition_paths(table).to_pylist() == ["__HIVE_DEFAULT_PARTITION__"] * len(values)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.decimals(allow_nan=False, allow_infinity=False, places=8, min_value=-(10**9), max_value=10**9),
        min_size=1,
        max_size=8,
    )
)
def test_decimal_values_as_bigdecimal(values):
    arr = pa.array(values, pa.decimal128(18, 8))
    expected = [str(decimal.Decimal(v).quantize(decimal.Decimal("1E-8"))) for v in values]
    assert value_strings(pa.table({"d": arr}), "d").to_pylist() == expected


def test_scalar_rendering():
    t = pa.table(
        {
            "f64": pa.array([1.0, 1e7, 0.001, 1e-4, 123456.789, -0.0, 1.5e300, float("nan")]),
            "f32": pa.array([0.1, 1e10, 3.0, 2.5e-5, 1.0, 1.0, 1.0, 1.0], pa.float32()),
            "b": pa.array([True, False] * 4),
            "d": pa.array([datetime.date(2023, 4, 1)] * 8, pa.date32()),
            "ts": pa.array([datetime.datetime(2023, 4, 1, 12, 1, 0, 123000)] * 8, pa.timestamp("us")),
            "s16": pa.array([-300] * 8, pa.int16()),
        }
    )
    assert value_strings(t, "f64").to_pylist() == [
        "1.0",
        "1.0E7",
        "0.001",
        "1.0E-4",
        "123456.789",
        "-0.0",
        "1.5E300",
        "NaN",
    ]
    assert value_strings(t, "f32").to_pylist()[:4] == ["0.1", "1.0E10", "3.0", "2.5E-5"]
    assert value_strings(t, "b").to_pylist()[:2] == ["true", "false"]
    assert value_strings(t, "d").to_pylist()[0] == "2023-04-01"
    assert value_strings(t, "ts").to_pylist()[0] == "1680350460123000"
    assert value_strings(t, "ts", consistent_logical_timestamp=True).to_pylist()[0] == "2023-04-01 12:01:00.123"
    assert value_strings(t, "s16").to_pylist()[0] == "-300"
    assert java_double_str(100.0) == "100.0" and java_double_str(1e21) == "1.0E21"
    with pytest.raises(HoodieKeyError, match="binary"):
        value_strings(pa.table({"x": pa.array([b"a"])}), "x")


def test_nested_field_and_missing_field():
    t = pa.table({"s": pa.array([{"a": 1}, None, {"a": None}], pa.struct([("a", pa.int32())]))})
    assert value_strings(t, "s.a").to_pylist() == ["1", None, None]
    with pytest.raises(HoodieKeyError, match="'nope'"):
        SimpleKeyGenerator(["nope"], []).record_keys(t)


def test_nonpartitioned():
    t = pa.table({"id": [1, 2], "name": ["a", None]})
    assert NonpartitionedKeyGenerator(["id"]).partition_paths(t).to_pylist() == ["", ""]
    assert NonpartitionedKeyGenerator(["id"]).record_keys(t).to_pylist() == ["1", "2"]
    assert NonpartitionedKeyGenerator(["id", "name"]).record_keys(t).to_pylist() == [
        "id:1,name:a",
        "id:2,name:__null__",
    ]


# ------------------------------------------------------------------ timestamp based


def model_timestamp_partition(epoch_ms, zone, fmt):
    tz = datetime.timezone.utc if zone is None else zoneinfo.ZoneInfo(zone)
    t = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz)
    return t.strftime(fmt)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-2_000_000_000_000, 4_000_000_000_000), min_size=1, max_size=8),
    st.sampled_from([None, "UTC", "Asia/Kolkata", "America/Los_Angeles"]),
)
def test_epoch_millis_partitions(values, zone):
    props = {
        "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
        "hoodie.table.recordkey.fields": "id",
        "hoodie.table.partition.fields": "ts",
        "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
        "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd/HH'h'mm",
    }
    if zone:
        props["hoodie.keygen.timebased.timezone"] = zone
    kg = make_key_generator(props)
    t = pa.table({"id": range(len(values)), "ts": pa.array(values, pa.int64())})
    assert kg.partition_paths(t).to_pylist() == [model_timestamp_partition(v, zone, "%Y/%m/%d/%Hh%M") for v in values]


def test_date_string_partitions():
    base = {
        "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "ts_str",
        "hoodie.keygen.timebased.timestamp.type": "DATE_STRING",
        "hoodie.keygen.timebased.input.dateformat": "yyyy-MM-dd'T'HH:mm:ss.SSSZ,yyyy-MM-dd",
        "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd/HH",
    }
    t = pa.table(
        {"id": [1, 2, 3, 4], "ts_str": ["2023-04-01T23:30:00.123Z", "2023-04-01T23:30:00.123+0530", "2023-04-02", None]}
    )
    kg = make_key_generator(base)
    # no zone configured: output uses the offset parsed from each value; null -> epoch 1 ms
    assert kg.partition_paths(t).to_pylist() == ["2023/04/01/23", "2023/04/01/23", "2023/04/02/00", "1970/01/01/00"]
    kg = make_key_generator(
        {
            **base,
            "hoodie.keygen.timebased.output.timezone": "UTC",
            "hoodie.datasource.write.hive_style_partitioning": "true",
            "hoodie.datasource.write.partitionpath.urlencode": "true",
        }
    )
    assert kg.partition_paths(t).to_pylist()[:2] == ["ts_str=2023%2F04%2F01%2F23", "ts_str=2023%2F04%2F01%2F18"]
    with pytest.raises(HoodieKeyError, match="row 1"):
        kg.partition_paths(pa.table({"id": [1, 2], "ts_str": ["2023-04-02", "garbage"]}))


def test_scalar_and_unix_and_date_column():
    props = {
        "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.TimestampBasedAvroKeyGenerator",
        "hoodie.table.recordkey.fields": "id",
        "hoodie.table.partition.fields": "t",
        "hoodie.keygen.timebased.timestamp.type": "SCALAR",
        "hoodie.keygen.timebased.timestamp.scalar.time.unit": "days",
        "hoodie.keygen.timebased.output.dateformat": "yyyyMMdd",
    }
    t = pa.table({"id": [1, 2], "t": pa.array([datetime.date(2023, 4, 1), None], pa.date32())})
    assert make_key_generator(props).partition_paths(t).to_pylist() == ["20230401", "19700102"]
    props.update({"hoodie.keygen.timebased.timestamp.type": "UNIX_TIMESTAMP"})
    t = pa.table({"id": [1], "t": pa.array([1680350460.9])})
    assert make_key_generator(props).partition_paths(t).to_pylist() == ["20230401"]


def test_make_key_generator_variants():
    kg = make_key_generator(
        {"hoodie.datasource.write.recordkey.field": "a,b", "hoodie.datasource.write.partitionpath.field": "p"}
    )
    assert isinstance(kg, ComplexKeyGenerator)
    kg = make_key_generator({"hoodie.datasource.write.recordkey.field": "a"})
    assert isinstance(kg, NonpartitionedKeyGenerator)
    kg = make_key_generator({"hoodie.table.recordkey.fields": "a", "hoodie.table.partition.fields": "p"})
    assert isinstance(kg, SimpleKeyGenerator)
    with pytest.raises(HoodieConfigError):
        make_key_generator(
            {
                "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.CustomKeyGenerator",
                "hoodie.table.recordkey.fields": "a",
            }
        )
    with pytest.raises(HoodieConfigError):
        make_key_generator(
            {
                "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator",
                "hoodie.table.recordkey.fields": "a,b",
                "hoodie.table.partition.fields": "p",
            }
        )
    kg = make_key_generator(
        {
            "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.ComplexKeyGenerator",
            "hoodie.table.recordkey.fields": "a",
            "hoodie.write.complex.keygen.new.encoding": "true",
        }
    )
    assert kg.record_keys(pa.table({"a": ["x"]})).to_pylist() == ["x"]


def test_compact_date_string_and_month_names():
    props = {
        "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
        "hoodie.table.recordkey.fields": "id",
        "hoodie.table.partition.fields": "d",
        "hoodie.keygen.timebased.timestamp.type": "DATE_STRING",
        "hoodie.keygen.timebased.input.dateformat": "yyyyMMddHH|dd MMM yyyy",
        "hoodie.keygen.timebased.input.dateformat.list.delimiter.regex": "\\|",
        "hoodie.keygen.timebased.output.dateformat": "yyyy-MM-dd'T'HH MMM",
        "hoodie.keygen.timebased.input.timezone": "Asia/Kolkata",
        "hoodie.keygen.timebased.output.timezone": "GMT+01:00",
    }
    t = pa.table({"id": [1, 2], "d": ["2023040112", "05 Jan 2024"]})
    assert make_key_generator(props).partition_paths(t).to_pylist() == ["2023-04-01T07 Apr", "2024-01-04T19 Jan"]


@pytest.mark.parametrize(
    ("class_name", "kind"),
    [
        ("org.apache.hudi.keygen.SimpleKeyGenerator", "SIMPLE"),
        ("org.apache.hudi.keygen.SimpleAvroKeyGenerator", "SIMPLE_AVRO"),
        ("org.apache.hudi.keygen.ComplexKeyGenerator", "COMPLEX"),
        ("org.apache.hudi.keygen.NonpartitionedKeyGenerator", "NON_PARTITION"),
        ("org.apache.hudi.keygen.TimestampBasedAvroKeyGenerator", "TIMESTAMP_AVRO"),
        ("org.apache.hudi.keygen.CustomKeyGenerator", "CUSTOM"),
        ("org.apache.hudi.keygen.GlobalDeleteKeyGenerator", "GLOBAL_DELETE"),
        ("com.example.MyKeyGenerator", "USER_PROVIDED"),
    ],
)
def test_key_generator_type_as_hudi_1x_records_it(class_name, kind):
    from hoodie_stream.format.record.keygen import key_generator_type

    assert key_generator_type(class_name) == kind
