"""The vectorized walk over an AVRO_DATA block's record length prefixes finds the records (and raises the errors) a
plain record-by-record walk finds."""

import io
import json
import struct

import fastavro
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hoodie_stream.errors import HoodieFormatError
from hoodie_stream.format.avro.decoder import decode_records
from hoodie_stream.format.avro.encoder import encode_records
from hoodie_stream.format.log_file import data_block
from hoodie_stream.format.log_file.data_block import avro_data_content, avro_record_bounds, split_avro_data_content
from hoodie_stream.format.log_file.log_block import BlockType, HeaderKey, LogBlock
from hoodie_stream.format.log_file.reader import read_log_file
from hoodie_stream.format.log_file.scanner import block_versions
from hoodie_stream.format.log_file.writer import write_log_file
from storage_helpers import at


def reference_bounds(content):
    """The plain walk: each record's int32 length prefix read in turn (the errors are the format's)."""
    if len(content) < 8:
        raise HoodieFormatError(f"avro data block content of {len(content)} bytes is too short")
    version, n = struct.unpack_from(">ii", content, 0)
    if version != 3:
        raise HoodieFormatError(f"avro data block content version {version} is not supported (only 3)")
    if n < 0:
        raise HoodieFormatError(f"avro data block has a negative record count {n}")
    pos, size, starts, ends = 8, len(content), [], []
    for i in range(n):
        if pos + 4 > size:
            raise HoodieFormatError(f"avro data block: record length prefix at {pos} runs past the content end")
        (length,) = struct.unpack_from(">i", content, pos)
        pos += 4
        starts.append(pos)
        pos += length
        ends.append(pos)
        if length < 0 or pos > size:
            raise HoodieFormatError(f"avro data block record {i}: length {length} runs past the content end")
    if pos != size:
        raise HoodieFormatError(f"avro data block: {size - pos} trailing bytes after {n} records")
    return starts, ends


def outcome(walk, content):
    try:
        starts, ends = walk(content)
    except HoodieFormatError as e:
        return "error", str(e)
    return "records", [content[a:b] for a, b in zip(starts, ends)]


def content_of(records):
    return struct.pack(">ii", 3, len(records)) + b"".join(struct.pack(">i", len(r)) + r for r in records)


def random_bytes(seed, size):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def assert_same_walk(content):
    expected = outcome(reference_bounds, content)
    assert outcome(avro_record_bounds, content) == expected
    return expected


raw_records = st.one_of(
    st.binary(max_size=60),
    st.just(b""),
    st.builds(lambda k: b"\0" * k, st.integers(0, 40)),  # zeros look like length prefixes
    st.builds(lambda k: struct.pack(">i", k), st.integers(0, 200)),  # records that hold a "prefix"
    st.builds(random_bytes, st.integers(0, 2**32 - 1), st.integers(65_536, 70_000)),  # lengths past 64 KiB
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(raw_records, max_size=40))
def test_walk_finds_the_records_of_random_blocks(records):
    content = content_of(records)
    assert assert_same_walk(content) == ("records", records)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(raw_records, max_size=25), st.data())
def test_broken_blocks_raise_what_the_plain_walk_raises(records, data):
    content = content_of(records)
    how = data.draw(st.sampled_from(["truncate", "extend", "overwrite", "count", "negative"]))
    if how == "truncate":
        content = content[: data.draw(st.integers(0, len(content)))]
    elif how == "extend":
        content += data.draw(st.binary(min_size=1, max_size=12))
    elif how == "overwrite" and len(content) > 8:
        at_ = data.draw(st.integers(8, len(content) - 1))
        content = content[:at_] + data.draw(st.binary(min_size=1, max_size=4)) + content[at_ + 4 :]
    elif how == "count":
        content = struct.pack(">ii", 3, max(0, len(records) + data.draw(st.integers(-3, 3)))) + content[8:]
    elif how == "negative" and records:
        k = data.draw(st.integers(0, len(records) - 1))
        at_ = 8 + sum(4 + len(r) for r in records[:k])
        content = content[:at_] + struct.pack(">i", -data.draw(st.integers(1, 5))) + content[at_ + 4 :]
    assert_same_walk(content)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(raw_records, max_size=40), st.sampled_from([12, 13, 64, 1000]), st.data())
def test_the_walk_across_segments(records, segment, data):
    """The content taken a few bytes at a time: the walk goes on from segment to segment, breaks where it breaks."""
    content = content_of(records)
    if data.draw(st.booleans()) and len(content) > 8:
        content = content[: data.draw(st.integers(8, len(content) - 1))]
    saved = data_block._SEGMENT
    data_block._SEGMENT = segment
    try:
        assert_same_walk(content)
    finally:
        data_block._SEGMENT = saved


def test_header_errors():
    for content in (b"", b"\0\0\0\3", struct.pack(">ii", 2, 0), struct.pack(">ii", 3, -1)):
        assert_same_walk(content)
        with pytest.raises(HoodieFormatError):
            avro_record_bounds(content)


def test_a_block_past_16_mib():
    """Lengths of a content past 2^24 bytes can have a non-zero first byte."""
    rng = np.random.default_rng(5)
    records = [rng.integers(0, 256, int(k), dtype=np.uint8).tobytes() for k in (9_000_000, 0, 8_000_000, 70_000, 3)]
    content = content_of(records)
    assert len(content) > 1 << 24
    assert assert_same_walk(content) == ("records", records)
    assert_same_walk(content[:-1])


# ---------------------------------------------------------------------------------------- Avro records, decoded

SCHEMA = {
    "type": "record",
    "name": "rec",
    "namespace": "hoodie.t",
    "fields": [
        {"name": "_hoodie_commit_time", "type": ["null", "string"], "default": None},
        {"name": "_hoodie_record_key", "type": ["null", "string"], "default": None},
        {"name": "id", "type": ["null", "long"], "default": None},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "fare", "type": ["null", "double"], "default": None},
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}], "default": None},
    ],
}
ARROW = pa.schema(
    [
        ("_hoodie_commit_time", pa.string()),
        ("_hoodie_record_key", pa.string()),
        ("id", pa.int64()),
        ("name", pa.string()),
        ("fare", pa.float64()),
        ("tags", pa.list_(pa.string())),
    ]
)
texts = st.one_of(st.none(), st.text(max_size=20), st.text(min_size=500, max_size=3000), st.just(""))
rows = st.fixed_dictionaries(
    {
        "_hoodie_commit_time": st.one_of(st.none(), st.just("20250618054711154")),
        "_hoodie_record_key": texts,
        "id": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.just(0)),
        "name": texts,
        "fare": st.one_of(st.none(), st.floats(allow_nan=False), st.just(0.0)),
        "tags": st.one_of(st.none(), st.lists(st.text(max_size=5), max_size=4)),
    }
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(rows, max_size=60))
def test_avro_records_with_nulls_unicode_and_long_strings(records):
    table = pa.Table.from_pylist(records, schema=ARROW)
    buffer, offsets = encode_records(table, SCHEMA)
    content = avro_data_content(buffer, offsets)
    parts = [bytes(buffer[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
    assert assert_same_walk(content) == ("records", parts)
    starts, ends = avro_record_bounds(content)
    decoded = decode_records(content, starts, SCHEMA, ends=ends)
    assert decoded.equals(decode_records(*split_avro_data_content(content), SCHEMA))
    assert decoded.to_pylist() == records
    parsed = fastavro.parse_schema(SCHEMA)
    assert [fastavro.schemaless_reader(io.BytesIO(p), parsed) for p in parts] == records


def test_log_scan_reads_the_records_and_raises_the_broken_record_s_error(tmp_path):
    table = pa.Table.from_pylist(
        [{"_hoodie_record_key": f"k{i}", "id": i, "name": "é" * (i % 7) or None} for i in range(1000)], schema=ARROW
    )
    buffer, offsets = encode_records(table, SCHEMA)
    header = {HeaderKey.INSTANT_TIME: "20250101000000000", HeaderKey.SCHEMA: json.dumps(SCHEMA)}
    good = LogBlock(BlockType.AVRO_DATA, header, avro_data_content(buffer, offsets), {})
    path = tmp_path / ".f1-0_20250101000000000.log.1_0-1-2"
    write_log_file(*at(path), [good])
    (version,) = block_versions(read_log_file(*at(path)))
    assert version.table.to_pylist() == table.to_pylist()
    content = bytearray(good.content)
    content[8 + 4 + offsets[1]] = 0x7F  # record 1's length now runs past the content end
    broken = LogBlock(BlockType.AVRO_DATA, header, bytes(content), {})
    write_log_file(*at(tmp_path / ".f1-0_20250101000000000.log.2_0-1-2"), [broken])
    with pytest.raises(HoodieFormatError, match="avro data block record 1: length"):
        block_versions(read_log_file(*at(tmp_path / ".f1-0_20250101000000000.log.2_0-1-2")))


def test_a_record_count_past_what_the_content_holds():
    content = content_of([b"abc", b""])
    for count in (3, 1000, 2**31 - 1):
        huge = struct.pack(">ii", 3, count) + content[8:]
        assert_same_walk(huge)
        with pytest.raises(HoodieFormatError, match="record length prefix at 19 runs past the content end"):
            avro_record_bounds(huge)


def test_records_of_a_schema_decoded_record_by_record():
    """Unions of several branches go through fastavro one record at a time: the bounds serve it too."""
    schema = {
        "type": "record",
        "name": "u",
        "fields": [{"name": "v", "type": ["null", "long", "double"], "default": None}],
    }
    records = [{"v": None}, {"v": 7}, {"v": 1.5}, {"v": 0.0}]
    parsed = fastavro.parse_schema(schema)
    parts = []
    for r in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, r)
        parts.append(out.getvalue())
    content = content_of(parts)
    starts, ends = avro_record_bounds(content)
    got = decode_records(content, starts, schema, arrow_schema=pa.schema([("v", pa.float64())]), ends=ends)
    assert got["v"].to_pylist() == [None, 7.0, 1.5, 0.0]
