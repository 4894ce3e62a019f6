import base64
import struct
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import v6_table_zips
from hoodie_stream.errors import HoodieKeyError
from hoodie_stream.format.base_file.bloom_filter import BloomFilter, murmur_chain

BLOOM_KEY = b"org.apache.hudi.bloomfilter"


def java_murmur(data: bytes, seed: int) -> int:
    """Per-key model of Hadoop MurmurHash.hash(byte[], length, seed) with Java int arithmetic."""

    def i32(x):
        x &= 0xFFFFFFFF
        return x - (1 << 32) if x & 0x80000000 else x

    def sbyte(b):
        return b - 256 if b > 127 else b

    m, length = 0x5BD1E995, len(data)
    h = i32(seed ^ length)
    for i in range(length >> 2):
        k = i32(sbyte(data[4 * i + 3]) << 24 | data[4 * i + 2] << 16 | data[4 * i + 1] << 8 | data[4 * i])
        k = i32(k * m)
        k ^= (k & 0xFFFFFFFF) >> 24
        k = i32(k * m)
        h = i32(h * m) ^ k
    left = length & 3
    if left:
        if left >= 3:
            h ^= i32(sbyte(data[length - 3]) << 16)
        if left >= 2:
            h ^= i32(sbyte(data[length - 2]) << 8)
        h ^= sbyte(data[length - 1])
        h = i32(h * m)
    h = i32(h ^ ((h & 0xFFFFFFFF) >> 13))
    h = i32(h * m)
    return i32(h ^ ((h & 0xFFFFFFFF) >> 15))


def model_serialize(keys, num_entries=60000, max_entries=100000):
    """Plain-Python model of HoodieDynamicBoundedBloomFilter add + serializeToString."""
    import math

    vs = int(math.ceil(num_entries * (-math.log(1e-9) / (math.log(2) ** 2))))
    nh = int(math.ceil(math.log(2) * vs / num_entries))
    matrix = [set()]
    cur, reached, cur_idx = 0, False, 0
    for key in keys:
        if reached:
            bf = matrix[cur_idx % len(matrix)]
            cur_idx += 1
        elif cur >= num_entries and len(matrix) * num_entries < max_entries:
            matrix.append(set())
            bf = matrix[-1]
            cur = 0
        elif cur >= num_entries:
            reached = True
            bf = matrix[0]
        else:
            bf = matrix[-1]
        h = 0
        for _ in range(nh):
            h = java_murmur(key.encode("utf-8"), h)
            r = abs(h) % vs  # == Math.abs(h % vs) with Java's truncated remainder
            bf.add(r)
        cur += 1
    header = struct.pack(">iibi", -1, nh, 1, vs)
    out = [header, struct.pack(">iii", num_entries, cur, len(matrix))]
    for bits in matrix:
        arr = np.zeros((vs + 7) // 8, np.uint8)
        for b in bits:
            arr[b >> 3] |= 1 << (b & 7)
        out += [header, arr.tobytes()]
    return base64.b64encode(b"".join(out)).decode()


def fixture_base_files(tmp_root, fixture_table):
    files = []
    for zip_path in v6_table_zips():
        base = fixture_table(zip_path.name)
        files += [p for p in base.rglob("*.parquet") if ".hoodie" not in p.parts]
    return files


def test_fixture_footers_bit_exact(fixture_table, tmp_path):
    checked = 0
    for path in fixture_base_files(tmp_path, fixture_table):
        md = pq.ParquetFile(path).metadata.metadata or {}
        if BLOOM_KEY not in md:
            continue
        keys = pq.read_table(path, columns=["_hoodie_record_key"]).column(0)
        assert BloomFilter().add_keys(keys).serialize() == md[BLOOM_KEY].decode(), path
        restored = BloomFilter.deserialize(md[BLOOM_KEY].decode())
        assert all(restored.might_contain(k) for k in keys.to_pylist())
        assert restored.serialize() == md[BLOOM_KEY].decode()
        checked += 1
    assert checked >= 39  # every v6 fixture base file with meta fields


def test_parameters_match_hudi_defaults():
    bf = BloomFilter()
    assert (bf.vector_size, bf.nb_hash, bf.nr) == (2587966, 30, 60000)
    raw = base64.b64decode(bf.serialize())
    assert raw[:13] == struct.pack(">iibi", -1, 30, 1, 2587966)
    assert len(raw) == 13 + 12 + 13 + (2587966 + 7) // 8


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=23), min_size=0, max_size=20))
def test_murmur_matches_java_model(keys):
    got = murmur_chain(pa.array(keys, pa.string()), 3)
    for i, key in enumerate(keys):
        h = 0
        for j in range(3):
            h = java_murmur(key.encode("utf-8"), h)
            assert got[i, j] == h, (key, j)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=12))
def test_serialize_matches_model(keys):
    assert BloomFilter().add_keys(keys).serialize() == model_serialize(keys)


@pytest.mark.parametrize("n", [9, 10, 11, 25, 30, 31, 32, 47])
def test_dynamic_rows_match_model(n):
    keys = [f"key-{i}" for i in range(n)]
    expected = model_serialize(keys, num_entries=10, max_entries=25)
    one_shot = BloomFilter(num_entries=10, max_entries=25).add_keys(keys)
    assert one_shot.serialize() == expected
    batched = BloomFilter(num_entries=10, max_entries=25)
    for i in range(0, n, 7):
        batched.add_keys(keys[i : i + 7])
    assert batched.serialize() == expected


def test_membership_and_large_batch():
    keys = pa.array([str(uuid.uuid4()) for _ in range(100_000)])
    bf = BloomFilter().add_keys(keys)
    text = bf.serialize()
    assert len(bf.rows) == 2 and bf.current_nb_record == 40000
    restored = BloomFilter.deserialize(text)
    sample = keys.to_pylist()[::997]
    assert all(restored.might_contain(k) for k in sample)
    assert sum(restored.might_contain(str(uuid.uuid4())) for _ in range(200)) == 0


def test_rejects_null_and_empty_keys():
    with pytest.raises(HoodieKeyError):
        BloomFilter().add_keys(pa.array(["a", None]))
    with pytest.raises(HoodieKeyError):
        BloomFilter().add_keys([""])
