"""BaseFileWriter writes chunks in its threads: the file holds the chunks in order, the footers are those of all
their keys in order, and a failure in a thread fails the file (nothing left under its name)."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hoodie_stream.format.base_file.bloom_filter import BloomFilter
from hoodie_stream.format.base_file.parquet import BaseFileWriter, read_base_file, read_footer
from storage_helpers import at

META = ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path"]
SCHEMA = pa.schema([(m, pa.string()) for m in META] + [("_hoodie_file_name", pa.string()), ("x", pa.int64())])


def chunk(keys):
    n = len(keys)
    columns = {m: pa.array(["c"] * n) for m in META}
    columns["_hoodie_record_key"] = pa.array(keys)
    columns["_hoodie_file_name"] = pa.array(["f.parquet"] * n)
    columns["x"] = pa.array(np.arange(n))
    return pa.table(columns, schema=SCHEMA)


@pytest.mark.parametrize("in_flight", [1, 3, 16])
def test_chunks_in_order_and_footers_of_all_keys(tmp_path, in_flight):
    """Chunks land in the order written and the footers sum all of them, one chunk in flight or several."""
    rng = np.random.default_rng(2)
    parts = [[f"k{i:07d}" for i in rng.permutation(size)] for size in (70_000, 3, 130_001, 1, 5_000, 40_000)]
    path = tmp_path / "f.parquet"
    writer = BaseFileWriter(*at(path), SCHEMA, compression="zstd", in_flight=in_flight)
    for keys in parts:
        writer.write(chunk(keys))
    size = writer.close()
    assert size == os.path.getsize(path)
    every = [k for keys in parts for k in keys]
    assert read_base_file(*at(path))["_hoodie_record_key"].to_pylist() == every
    assert pq.ParquetFile(path).metadata.num_row_groups == len(parts)
    footer = read_footer(*at(path))
    assert footer["org.apache.hudi.bloomfilter"] == BloomFilter().add_keys(pa.array(every)).serialize()
    assert (footer["hoodie_min_record_key"], footer["hoodie_max_record_key"]) == (min(every), max(every))


def test_a_failed_write_fails_the_file(tmp_path):
    path = tmp_path / "f.parquet"
    writer = BaseFileWriter(*at(path), SCHEMA)

    def broken(table):
        raise OSError("disk full")

    writer._writer.write_table = broken
    writer.write(chunk(["a", "b"]))  # written in a thread: the error comes with the next call
    with pytest.raises(OSError, match="disk full"):
        writer.close()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("failing", [0, 2, 4])
def test_a_failed_chunk_among_several_in_flight_fails_the_file(tmp_path, failing):
    path = tmp_path / "f.parquet"
    writer = BaseFileWriter(*at(path), SCHEMA, in_flight=8)
    real, calls = writer._writer.write_table, []

    def write_table(table):
        calls.append(table.num_rows)
        if len(calls) == failing + 1:
            raise OSError("disk full")
        real(table)

    writer._writer.write_table = write_table
    for n in range(5):
        writer.write(chunk([f"{n}-{i}" for i in range(n + 1)]))
    with pytest.raises(OSError, match="disk full"):
        writer.close()
    assert calls == list(range(1, failing + 2))  # in order, and nothing after the failed chunk
    assert os.listdir(tmp_path) == []


def test_bloom_keys_and_a_filter_to_start_from(tmp_path):
    """A writer given a filter adds the keys it is told the filter lacks; the key range covers every row."""
    path = tmp_path / "f.parquet"
    start = BloomFilter().add_keys(pa.array(["a", "b"]))
    writer = BaseFileWriter(*at(path), SCHEMA, bloom=start)
    writer.write(chunk(["a", "b"]), bloom_keys=pa.array([], pa.string()))
    writer.write(chunk(["c", "0"]), bloom_keys=pa.array(["c", "0"]))
    writer.close()
    footer = read_footer(*at(path))
    assert footer["org.apache.hudi.bloomfilter"] == BloomFilter().add_keys(pa.array(["a", "b", "c", "0"])).serialize()
    assert (footer["hoodie_min_record_key"], footer["hoodie_max_record_key"]) == ("0", "c")


def test_abort_discards_the_file(tmp_path):
    writer = BaseFileWriter(*at(tmp_path / "f.parquet"), SCHEMA)
    writer.write(chunk(["a"]))
    writer.abort()
    assert os.listdir(tmp_path) == []
