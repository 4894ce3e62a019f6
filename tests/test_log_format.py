import io
import json
import struct
from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import LOG_FILES, v6_table_zips
from hoodie_stream.errors import HoodieFormatError
from hoodie_stream.format.file_group.file_names import log_sort_key, parse_log_file_name
from hoodie_stream.format.log_file.data_block import (
    avro_data_content,
    parquet_data_content,
    read_parquet_content,
    split_avro_data_content,
)
from hoodie_stream.format.log_file.delete_block import delete_content, parse_delete_content
from hoodie_stream.format.log_file.log_block import (
    MAGIC,
    BlockType,
    HeaderKey,
    LogBlock,
    decode_block_at,
    encode_block,
    rollback_command_block,
)
from hoodie_stream.format.log_file.reader import read_log_blocks, read_log_file
from hoodie_stream.format.log_file.writer import encode_log_file, write_log_file
from storage_helpers import at

hudi = pytest.importorskip("hudi")

FIXTURE_LOGS = sorted(p for p in LOG_FILES.glob("*/.*") if parse_log_file_name(p.name))


def fastavro_count(block):
    """Records in an AVRO_DATA block, decoded one by one with fastavro under the header SCHEMA."""
    schema = fastavro.parse_schema(json.loads(block.header[HeaderKey.SCHEMA]))
    version, count = struct.unpack_from(">ii", block.content, 0)
    assert version == 3
    pos = 8
    for _ in range(count):
        (length,) = struct.unpack_from(">i", block.content, pos)
        stream = io.BytesIO(block.content[pos + 4 : pos + 4 + length])
        fastavro.schemaless_reader(stream, schema, None)
        assert stream.tell() == length
        pos += 4 + length
    assert pos == len(block.content)
    return count


def check_round_trip(path):
    data = Path(path).read_bytes()
    blocks = read_log_file(*at(path))
    assert blocks
    assert encode_log_file(blocks) == data
    for block in blocks:
        assert block.block_type != BlockType.CORRUPT
        assert encode_block(block) == data[block.offset : block.offset + block.size]
        if block.block_type == BlockType.AVRO_DATA:
            buffer, offsets = split_avro_data_content(block.content)
            assert len(offsets) - 1 == fastavro_count(block)
            assert avro_data_content(buffer, offsets) == block.content
        elif block.block_type == BlockType.DELETE:
            entries = parse_delete_content(block.content, with_wrapper=True)
            keys, parts, vals = zip(*entries)
            assert delete_content(list(keys), list(parts), list(vals)) == block.content
        elif block.block_type == BlockType.PARQUET_DATA:
            read_parquet_content(block.content)
    return blocks


def block_records(block):
    if block.block_type == BlockType.AVRO_DATA:
        return len(split_avro_data_content(block.content)[1]) - 1
    if block.block_type == BlockType.PARQUET_DATA:
        return read_parquet_content(block.content).num_rows
    if block.block_type == BlockType.DELETE:
        return len(parse_delete_content(block.content))
    return 0


@pytest.mark.parametrize("path", FIXTURE_LOGS, ids=lambda p: p.parent.name)
def test_fixture_log_files_round_trip(path):
    blocks = check_round_trip(path)
    expected = {
        "valid_log_avro_data": [(BlockType.AVRO_DATA, 1)],
        "valid_log_delete": [(BlockType.DELETE, 3)],
        "valid_log_parquet_data": [(BlockType.PARQUET_DATA, 1)],
        "valid_log_rollback": [(BlockType.COMMAND, 0)],
    }[path.parent.name]
    assert [(b.block_type, block_records(b)) for b in blocks] == expected


def test_fixture_delete_and_rollback_contents():
    delete = read_log_file(*at(next(p for p in FIXTURE_LOGS if p.parent.name == "valid_log_delete")))[0]
    entries = parse_delete_content(delete.content, with_wrapper=True)
    assert all(part == "city=san_francisco" and val == ("IntWrapper", 0) for _k, part, val in entries)
    assert delete_content([e[0] for e in entries], [e[1] for e in entries], [0] * 3, wrapper="int") == delete.content
    rollback_path = next(p for p in FIXTURE_LOGS if p.parent.name == "valid_log_rollback")
    block = read_log_file(*at(rollback_path))[0]
    made = rollback_command_block(block.header[HeaderKey.INSTANT_TIME], block.header[HeaderKey.TARGET_INSTANT_TIME])
    assert encode_block(made) == rollback_path.read_bytes()


def _completed(base, instant):
    hoodie = Path(base) / ".hoodie"
    return any((hoodie / f"{instant}.{a}").exists() for a in ("deltacommit", "commit", "replacecommit"))


@pytest.mark.parametrize("zip_path", [z for z in v6_table_zips() if "-mor-" in z.name], ids=lambda z: z.stem)
def test_fixture_table_logs_against_hudi(zip_path, fixture_table):
    base = fixture_table(zip_path.name)
    logs = sorted(p for p in base.rglob(".*.log.*") if parse_log_file_name(p.name))
    for path in logs:
        check_round_trip(path)
    table = hudi.HudiTable(str(base))
    reader = table.create_file_group_reader_with_options()
    checked = 0
    for file_slice in table.get_file_slices():
        rel_logs = file_slice.log_files_relative_paths()
        assert rel_logs == sorted(rel_logs, key=lambda r: log_sort_key(r.rsplit("/", 1)[-1]))
        base_file = file_slice.base_file_relative_path()
        previous = reader.read_file_slice_from_paths(base_file, [])
        rolled_back = set()
        for k, rel in enumerate(rel_logs):
            blocks = read_log_file(*at(base / rel))
            current = reader.read_file_slice_from_paths(base_file, rel_logs[: k + 1])
            counted = [
                b
                for b in blocks
                if b.block_type != BlockType.COMMAND
                and _completed(base, b.instant_time)
                and b.instant_time not in rolled_back
            ]
            for b in blocks:
                if b.block_type == BlockType.COMMAND:
                    rolled_back.add(b.header[HeaderKey.TARGET_INSTANT_TIME])
            assert len(counted) <= 1
            if counted and counted[0].block_type == BlockType.DELETE:
                assert previous.num_rows - current.num_rows == block_records(counted[0])
            else:
                instants = pc.value_counts(current.column("_hoodie_commit_time")).to_pylist()
                by_instant = {d["values"]: d["counts"] for d in instants}
                for b in blocks:
                    expected = block_records(b) if b in counted else 0
                    if b.block_type != BlockType.COMMAND and b.instant_time != file_slice.creation_instant_time:
                        assert by_instant.get(b.instant_time, 0) == expected, rel
            previous = current
            checked += 1
    # logs of replaced file groups are in no slice: only the fastavro/pyarrow checks above apply to them
    assert checked or "overwrite" in zip_path.name or not logs


# ------------------------------------------------------------------------------------- blocks written here

SCHEMA = {
    "type": "record",
    "name": "rec",
    "namespace": "hoodie.t",
    "fields": [
        {"name": "_hoodie_record_key", "type": ["null", "string"], "default": None},
        {"name": "v", "type": ["null", "long"], "default": None},
        {"name": "s", "type": ["null", "string"], "default": None},
    ],
}


def encode_with_fastavro(records):
    parsed = fastavro.parse_schema(SCHEMA)
    parts = []
    for r in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, r)
        parts.append(out.getvalue())
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    return b"".join(parts), offsets, parts


def naive_content(parts):
    return struct.pack(">ii", 3, len(parts)) + b"".join(struct.pack(">i", len(p)) + p for p in parts)


def sample_blocks(n=20):
    records = [{"_hoodie_record_key": f"k{i}", "v": i * 7, "s": "x" * (i % 5)} for i in range(n)]
    buffer, offsets, _ = encode_with_fastavro(records)
    header = {HeaderKey.INSTANT_TIME: "20250101000000000", HeaderKey.SCHEMA: json.dumps(SCHEMA)}
    data = LogBlock(BlockType.AVRO_DATA, header, avro_data_content(buffer, offsets), {})
    delete = LogBlock(BlockType.DELETE, dict(header), delete_content(["k1", "k2"], ["p", "p"], [5, None]), {})
    return [data, delete, rollback_command_block("20250101000000001", "20241231000000000")]


@pytest.mark.parametrize("n", [0, 1, 2, 17, 1000])
def test_avro_data_content_matches_naive_encoding(n):
    records = [{"_hoodie_record_key": f"key-{i}", "v": i - 500, "s": None if i % 3 else "é" * i} for i in range(n)]
    buffer, offsets, parts = encode_with_fastavro(records)
    content = avro_data_content(buffer, offsets)
    assert content == naive_content(parts)
    buf2, off2 = split_avro_data_content(content)
    assert buf2 == buffer and off2.tolist() == offsets.tolist()
    # offsets into a larger buffer (not starting at 0)
    assert avro_data_content(b"zz" + buffer, offsets + 2) == content


def test_avro_data_content_large_block_round_trip():
    """A 200k-record block (speed is measured in benchmarks/format_bench.py, not here)."""
    n = 200_000
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 60, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    buffer = rng.integers(0, 256, int(offsets[-1]), dtype=np.uint8).tobytes()
    content = avro_data_content(buffer, offsets)
    buf2, off2 = split_avro_data_content(content)
    assert buf2 == buffer and np.array_equal(off2, offsets)


def test_bad_contents_raise():
    buffer, offsets, parts = encode_with_fastavro([{"_hoodie_record_key": "a", "v": 1, "s": "b"}])
    content = avro_data_content(buffer, offsets)
    with pytest.raises(HoodieFormatError):
        split_avro_data_content(content[:-1])
    with pytest.raises(HoodieFormatError):
        split_avro_data_content(content + b"\0")
    with pytest.raises(HoodieFormatError):
        split_avro_data_content(struct.pack(">ii", 2, 0))
    with pytest.raises(HoodieFormatError):
        parse_delete_content(struct.pack(">ii", 2, 0))


def test_delete_ordering_wrappers():
    import datetime
    import decimal

    vals = [
        None,
        3,
        2**40,
        1.5,
        "s",
        True,
        b"b",
        datetime.date(2024, 1, 2),
        datetime.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone.utc),
        decimal.Decimal("1.500000000000000"),
        np.int32(9),
    ]
    keys = [f"k{i}" for i in range(len(vals))]
    content = delete_content(keys, ["p"] * len(vals), vals)
    parsed = parse_delete_content(content, with_wrapper=True)
    wrappers = [v[0] if v else None for _k, _p, v in parsed]
    assert parsed[0][2] == (
        "IntWrapper",
        0,
    )  # no ordering value: Hudi's default, never null (Hudi's scanners fail on it)
    assert wrappers == [
        "IntWrapper",
        "LongWrapper",
        "LongWrapper",
        "DoubleWrapper",
        "StringWrapper",
        "BooleanWrapper",
        "BytesWrapper",
        "DateWrapper",
        "TimestampMicrosWrapper",
        "DecimalWrapper",
        "LongWrapper",
    ]
    assert [v for _k, _p, v in parse_delete_content(content)][:7] == [0, 3, 2**40, 1.5, "s", True, b"b"]
    hinted = parse_delete_content(delete_content(["a", "b"], ["p", "p"], [0, 7], wrapper="int"), with_wrapper=True)
    assert [v for _k, _p, v in hinted] == [("IntWrapper", 0), ("IntWrapper", 7)]
    assert delete_content(["a"], ["p"], [0], wrapper="int")[8:] == bytes([2, 2, 2, ord("a"), 2, 2, ord("p"), 4, 0, 0])


def test_parquet_content_round_trip():
    table = pa.table({"_hoodie_record_key": ["a", "b"], "v": [1, 2]})
    content = parquet_data_content(table)
    assert content[:4] == b"PAR1" and read_parquet_content(content).equals(table)


def test_write_log_file_round_trip(tmp_path):
    blocks = sample_blocks()
    path = tmp_path / ".f1-0_20250101000000000.log.1_0-1-2"
    size = write_log_file(*at(path), blocks)
    assert size == path.stat().st_size
    assert [f.name for f in tmp_path.iterdir()] == [path.name]
    read = read_log_file(*at(path))
    assert [(b.block_type, b.header, b.content) for b in read] == [(b.block_type, b.header, b.content) for b in blocks]
    with pytest.raises(HoodieFormatError):
        write_log_file(*at(path), blocks)


def strip(blocks):
    return [(b.block_type, b.header, b.content, b.footer) for b in blocks]


def test_truncation_at_every_byte_of_last_block():
    blocks = sample_blocks()
    data = encode_log_file(blocks)
    parsed = read_log_blocks(data)
    last_start = parsed[-1].offset
    assert last_start + parsed[-1].size == len(data)
    for cut in range(last_start, len(data)):
        got = read_log_blocks(data[:cut])
        assert strip(got[:2]) == strip(parsed[:2]), cut
        rest = got[2:]
        assert rest == [] or (len(rest) == 1 and rest[0].block_type == BlockType.CORRUPT), cut
        if rest:
            assert MAGIC + rest[0].content == data[last_start:cut]
    # same for a large data block as the last block
    big = sample_blocks(300)
    data = encode_log_file([big[1], big[0]])
    start = read_log_blocks(data)[1].offset
    for cut in range(start, len(data), 7):
        got = read_log_blocks(data[:cut])
        assert strip(got[:1]) == strip(big[1:2])
        assert all(b.block_type == BlockType.CORRUPT for b in got[1:]) and len(got) <= 2


def test_corrupt_length_of_middle_block_resyncs_at_next_magic():
    blocks = sample_blocks()
    data = encode_log_file(blocks)
    parsed = read_log_blocks(data)
    middle = parsed[1].offset
    # the low 4 bytes of the int64 blockSize (Java casts it to int, so the high 4 bytes are ignored)
    for i in range(4, 8):
        for flip in (0x01, 0x80, 0xFF):
            bad = bytearray(data)
            bad[middle + 6 + i] ^= flip
            got = read_log_blocks(bytes(bad))
            assert [b.block_type for b in got] == [BlockType.AVRO_DATA, BlockType.CORRUPT, BlockType.COMMAND], (i, flip)
            assert strip([got[0], got[2]]) == strip([parsed[0], parsed[2]])
            assert got[1].offset == middle and got[1].size == parsed[1].size
            assert encode_log_file(got) == bytes(bad)


def test_corrupt_trailer_and_missing_next_magic():
    blocks = sample_blocks()
    data = encode_log_file(blocks)
    parsed = read_log_blocks(data)
    first_end = parsed[0].size
    bad = bytearray(data)
    bad[first_end - 1] ^= 0x10  # trailing length of the first block
    got = read_log_blocks(bytes(bad))
    assert [b.block_type for b in got] == [BlockType.CORRUPT, BlockType.DELETE, BlockType.COMMAND]
    bad = bytearray(data)
    bad[first_end] = ord("X")  # the next magic is broken: block 1 corrupt, block 2 swallowed into it
    got = read_log_blocks(bytes(bad))
    assert [b.block_type for b in got] == [BlockType.CORRUPT, BlockType.COMMAND]
    # garbage at the start of a file is not a log file
    with pytest.raises(HoodieFormatError):
        read_log_blocks(b"garbage" + data)
    # fewer than 6 bytes after the last block: end of file
    assert strip(read_log_blocks(data + b"#HU")) == strip(parsed)
    assert read_log_blocks(b"") == [] and read_log_blocks(b"#HUDI") == []


def test_decode_block_rejects_other_versions():
    data = bytearray(encode_block(sample_blocks()[2]))
    data[14:18] = struct.pack(">i", 2)
    with pytest.raises(HoodieFormatError):
        decode_block_at(bytes(data), 0)
    with pytest.raises(HoodieFormatError):
        read_log_blocks(bytes(data))


def test_header_order_and_footer_preserved():
    block = LogBlock(
        BlockType.AVRO_DATA,
        {HeaderKey.SCHEMA: "{}", HeaderKey.INSTANT_TIME: "1"},
        avro_data_content(b"", np.zeros(1, np.int64)),
        {HeaderKey.BLOCK_IDENTIFIER: "x"},
    )
    decoded, end = decode_block_at(encode_block(block), 0)
    assert list(decoded.header) == [HeaderKey.SCHEMA, HeaderKey.INSTANT_TIME]
    assert decoded.footer == {HeaderKey.BLOCK_IDENTIFIER: "x"}
    assert end == len(encode_block(block))


def _streamed(block, piece=7):
    """The same block with its content handed over as an iterator of small segments (length not known up front)."""
    content = bytes(block.content)
    return LogBlock(
        block.block_type, block.header, (content[i : i + piece] for i in range(0, len(content), piece)), block.footer
    )


def test_streamed_block_content_is_written_byte_identical(tmp_path):
    """A block whose content is produced while it is written (sizes filled in afterwards) is byte-identical to the
    block encoded in one piece, alone, among other blocks, in memory and in a log file."""
    blocks = sample_blocks()
    eager = encode_log_file(blocks)
    assert encode_log_file([_streamed(b) for b in blocks]) == eager
    assert encode_log_file([blocks[0], _streamed(blocks[1]), blocks[2]]) == eager
    path = tmp_path / ".f1-0_20250101000000000.log.1_0-1-2"
    assert write_log_file(*at(path), [_streamed(b) for b in blocks]) == len(eager)
    assert path.read_bytes() == eager
    read = read_log_file(*at(path))
    assert [(b.block_type, b.content) for b in read] == [(b.block_type, b.content) for b in blocks]
    empty = LogBlock(BlockType.AVRO_DATA, blocks[0].header, iter(()), {})
    assert encode_log_file([empty]) == encode_block(LogBlock(BlockType.AVRO_DATA, blocks[0].header, b"", {}))


_DELETE_KEYS = st.lists(st.text(alphabet="ab/=é漢\u0001", min_size=1, max_size=6), max_size=25)


@settings(max_examples=150, deadline=None)
@given(
    _DELETE_KEYS,
    st.sampled_from(["", "p=1", "city=São Paulo"]),
    st.sampled_from(
        [None, pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_(), pa.timestamp("us"), pa.date32()]
    ),
    st.randoms(use_true_random=False),
)
def test_vectorized_delete_content_is_byte_identical(keys, partition, ordering_type, rnd):
    """The write path's DELETE encoding from Arrow arrays equals the record-by-record fastavro encoding of the same
    values (nulls: no ordering value), for every ordering type the writer meets."""
    import datetime

    from hoodie_stream.format.log_file.delete_block import delete_content_arrow

    def value():
        if rnd.random() < 0.3:
            return None
        if ordering_type in (pa.int32(), pa.int64()):
            return rnd.randint(-(2**31), 2**31 - 1)
        if ordering_type == pa.float64():
            return rnd.uniform(-1e6, 1e6)
        if ordering_type == pa.string():
            return rnd.choice(["", "x", "é漢", "2026-11-23"])
        if ordering_type == pa.bool_():
            return rnd.random() < 0.5
        if ordering_type == pa.date32():
            return datetime.date(2026, 1, 1) + datetime.timedelta(days=rnd.randint(0, 900))
        return datetime.datetime(2026, 1, 1) + datetime.timedelta(microseconds=rnd.randint(0, 10**12))

    values = None if ordering_type is None else [value() for _ in keys]
    ordering = None if values is None else pa.array(values, ordering_type)
    got = delete_content_arrow(pa.array(keys, pa.string()), partition, ordering)
    assert got == delete_content(keys, [partition] * len(keys), values)
    assert [(k, p) for k, p, _ in parse_delete_content(got)] == [(k, partition) for k in keys]
