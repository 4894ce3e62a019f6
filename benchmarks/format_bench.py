"""Format core benchmarks.

1. AVRO_DATA record encode/decode (6 columns) against fastavro as the baseline, and the walk over a block's record
   length prefixes (avro_record_bounds) against a record-by-record walk.
2. Snapshot read of a MOR table (1M rows in 8 base files, 10% of the keys updated in log files) through
   HoodieTable.read against hudi-rs (`hudi` 0.5.0) reading the same table in the same run.

Run: python benchmarks/format_bench.py [n_rows]
"""

import io
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fastavro
import numpy as np
import pyarrow as pa

from common import trips_rows, trips_schema
from hoodie_stream.format.avro.decoder import decode_records
from hoodie_stream.format.avro.encoder import encode_records
from hoodie_stream.format.avro.schema import arrow_to_avro_schema
from hoodie_stream.format.hoodie_table import HoodieTable
from hoodie_stream.format.log_file.data_block import avro_data_content, avro_record_bounds
from hoodie_stream.format.write.writer import HoodieWriter


def trips_table(n_rows, seed=0):
    """Six trips-like columns (long ts, uuid-like string, two strings, double, partition string) with nulls."""
    rng = np.random.default_rng(seed)
    null = rng.random((6, n_rows)) < 0.05
    ts = pa.array(1_700_000_000_000 + rng.integers(0, 10**9, n_rows), pa.int64(), mask=null[0])
    uuid = pa.array([f"{x:032x}" for x in rng.integers(0, 2**63, n_rows)], pa.string(), mask=null[1])
    rider = pa.array(np.char.add("rider-", rng.integers(0, 1000, n_rows).astype(str)), pa.string(), mask=null[2])
    driver = pa.array(np.char.add("driver-", rng.integers(0, 1000, n_rows).astype(str)), pa.string(), mask=null[3])
    fare = pa.array(rng.random(n_rows) * 100, pa.float64(), mask=null[4])
    cities = np.array(["san_francisco", "sao_paulo", "chennai", "são_luís"])
    city = pa.array(cities[rng.integers(0, 4, n_rows)], pa.string(), mask=null[5])
    return pa.table({"ts": ts, "uuid": uuid, "rider": rider, "driver": driver, "fare": fare, "city": city})


def _best(fn, repeat=3):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def bench_encode_decode(n_rows):
    """Figures (records/s, ratios) of encode_records/decode_records vs fastavro on n_rows trips rows.

    fastavro timings exclude table.to_pylist() (records prepared beforehand).
    """
    table = trips_table(n_rows)
    schema = arrow_to_avro_schema(table.schema, "trips_record", "hoodie.trips")
    parsed = fastavro.parse_schema(schema)

    t_enc, (buffer, offsets) = _best(lambda: encode_records(table, schema))
    t_dec, decoded = _best(lambda: decode_records(buffer, offsets, schema))
    assert decoded.equals(table)

    records = table.to_pylist()

    def fastavro_per_record():
        out = io.BytesIO()
        for rec in records:
            fastavro.schemaless_writer(out, parsed, rec)
        return out.getvalue()

    def fastavro_one_call():
        out = io.BytesIO()
        fastavro.writer(out, parsed, records, codec="null")
        return out.getvalue()

    view = memoryview(buffer)

    def fastavro_read_per_record():
        return [fastavro.schemaless_reader(io.BytesIO(view[a:b]), parsed) for a, b in zip(offsets[:-1], offsets[1:])]

    container = fastavro_one_call()

    def fastavro_read_one_call():
        return list(fastavro.reader(io.BytesIO(container)))

    t_fa_rec, fa_bytes = _best(fastavro_per_record, 1)
    assert fa_bytes == buffer
    t_fa_one, _ = _best(fastavro_one_call, 1)
    t_fa_read_rec, _ = _best(fastavro_read_per_record, 1)
    t_fa_read_one, _ = _best(fastavro_read_one_call, 1)
    t_fa_enc = min(t_fa_rec, t_fa_one)
    t_fa_dec = min(t_fa_read_rec, t_fa_read_one)

    content = avro_data_content(buffer, offsets)
    t_walk, (starts, ends) = _best(lambda: avro_record_bounds(content))
    t_loop, loop_starts = _best(lambda: walk_record_by_record(content))
    assert np.array_equal(starts, loop_starts)
    t_scan, scanned = _best(lambda: decode_records(content, *avro_record_bounds(content)[:1], schema, ends=ends))
    assert scanned.equals(table)
    return {
        "rows": n_rows,
        "bytes": len(buffer),
        "encode_rps": n_rows / t_enc,
        "decode_rps": n_rows / t_dec,
        "fastavro_encode_per_record_rps": n_rows / t_fa_rec,
        "fastavro_encode_one_call_rps": n_rows / t_fa_one,
        "fastavro_decode_per_record_rps": n_rows / t_fa_read_rec,
        "fastavro_decode_one_call_rps": n_rows / t_fa_read_one,
        "encode_ratio": t_fa_enc / t_enc,
        "decode_ratio": t_fa_dec / t_dec,
        "block_bytes": len(content),
        "walk_rps": n_rows / t_walk,
        "loop_walk_rps": n_rows / t_loop,
        "block_scan_rps": n_rows / t_scan,
    }


def walk_record_by_record(content):
    """The baseline: each record's int32 length prefix read in turn (starts of the records)."""
    unpack = struct.Struct(">i").unpack_from
    (n,) = unpack(content, 4)
    starts = [0] * n
    pos = 8
    for i in range(n):
        (length,) = unpack(content, pos)
        starts[i] = pos = pos + 4
        pos += length
    return np.array(starts, dtype=np.int64)


def build_mor_table(base, n_rows, update_fraction=0.1, groups=8, seed=7):
    """n_rows in `groups` base files, then one deltacommit updating `update_fraction` of the keys in logs."""
    rng = np.random.default_rng(seed)
    schema = trips_schema()
    writer = HoodieWriter.create(
        base, table_name="bench", record_key_fields=["id"], schema=schema, precombine_field="ts", partition_fields=[]
    )

    def rows(sel, ts):
        return trips_rows(sel, ts, rng, cities=("sf", "nyc", "chennai", "sao_paulo"))

    txn = writer.start(operation="INSERT")
    groups_written = []
    for chunk in np.array_split(np.arange(n_rows, dtype=np.int64), groups):
        groups_written.append((chunk, txn.write_base("", rows(chunk, 1))))
    first = txn.commit()
    txn = writer.start()
    updated = 0
    for chunk, stat in groups_written:
        sel = chunk[rng.random(len(chunk)) < update_fraction]
        updated += len(sel)
        txn.append_log("", stat.file_id, first, rows(sel, 2), base_file=stat.path.rsplit("/", 1)[-1])
    txn.commit()
    return updated


def bench_snapshot(n_rows):
    from hudi import HudiReadOptions, HudiTableBuilder

    base = tempfile.mkdtemp(prefix="format-bench-")
    try:
        updated = build_mor_table(base, n_rows)
        t_ours, ours = _best(lambda: HoodieTable(base).read())

        def hudi_rs():
            batches = HudiTableBuilder.from_base_uri(base).build().read(HudiReadOptions())
            return pa.Table.from_batches(batches)

        t_rs, theirs = _best(hudi_rs)
        assert ours.num_rows == theirs.num_rows == n_rows, (ours.num_rows, theirs.num_rows)
        return {
            "rows": n_rows,
            "updated": updated,
            "ours_rps": n_rows / t_ours,
            "hudi_rs_rps": n_rows / t_rs,
            "ratio": t_rs / t_ours,
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    n_rows = int(argv[0]) if argv else 1_000_000
    r = bench_encode_decode(n_rows)
    print(f"Avro records, 6 columns, {r['rows']:,} rows, {r['bytes'] / 1e6:.1f} MB")
    print(f"  encode_records            {r['encode_rps']:>14,.0f} rec/s")
    print(f"  fastavro writer/record    {r['fastavro_encode_per_record_rps']:>14,.0f} rec/s")
    print(f"  fastavro writer one call  {r['fastavro_encode_one_call_rps']:>14,.0f} rec/s")
    print(f"  encode speed-up vs faster fastavro: {r['encode_ratio']:.1f}x")
    print(f"  decode_records            {r['decode_rps']:>14,.0f} rec/s")
    print(f"  fastavro reader/record    {r['fastavro_decode_per_record_rps']:>14,.0f} rec/s")
    print(f"  fastavro reader one call  {r['fastavro_decode_one_call_rps']:>14,.0f} rec/s")
    print(f"  decode speed-up vs faster fastavro: {r['decode_ratio']:.1f}x")
    print(f"AVRO_DATA block of those records ({r['block_bytes'] / 1e6:.1f} MB): walk over the length prefixes")
    print(f"  avro_record_bounds        {r['walk_rps']:>14,.0f} rec/s")
    print(f"  record by record          {r['loop_walk_rps']:>14,.0f} rec/s")
    print(
        f"  walk speed-up: {r['walk_rps'] / r['loop_walk_rps']:.1f}x; walk + decode_records {r['block_scan_rps']:,.0f} rec/s"
    )
    r = bench_snapshot(n_rows)
    print(f"Snapshot read, MOR, {r['rows']:,} rows in 8 base files, {r['updated']:,} keys updated in logs")
    print(f"  HoodieTable.read          {r['ours_rps']:>14,.0f} rows/s")
    print(f"  hudi-rs 0.5.0             {r['hudi_rs_rps']:>14,.0f} rows/s")
    print(f"  ratio (ours / hudi-rs): {r['ratio']:.2f}x  (goal >= 0.5x)")


if __name__ == "__main__":
    main()
