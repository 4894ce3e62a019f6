"""Compaction throughput: the execute operator (merge base + logs into a new base file) against a pyarrow floor, for
each parquet codec.

Table: `rows` records in 4 file groups (base files), then 3 delta commits each updating 10% of the keys in new log
files. The operator's rate is MB of base + log files merged per second (one operation at a time, in-process, as a
compaction task runs it). The floor reads the same base files with pyarrow, takes the log records already decoded
(free for the floor), concatenates them without merging and writes one parquet file with the same codec at the same
level (`hoodie.parquet.compression.codec`: gzip 6, zstd 3, as parquet-mr). For each codec the floor and the operator
run one after the other, `--repeat` times, and the faster run of each counts. Then the compaction of the last codec
is committed, the table cleaned (KEEP_LATEST_FILE_VERSIONS=1) and its size before/after printed.

Run: python benchmarks/compaction_bench.py [rows] [--codec gzip,snappy,zstd] [--repeat N]
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common import trips_rows, trips_schema
from hoodie_stream.compaction import clean as cleaning
from hoodie_stream.compaction.execute import compact_operation
from hoodie_stream.compaction.operation import plan_operations
from hoodie_stream.compaction.plan import pending_plans, schedule_compaction
from hoodie_stream.format.base_file.parquet import PARQUET_CODECS, parquet_compression
from hoodie_stream.format.log_file.scanner import slice_versions
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.commit_metadata import CommitMetadata
from hoodie_stream.format.write.writer import HoodieWriter
from hoodie_stream.options import parse_compaction_options

GROUPS = 4
SCHEMA = trips_schema()
GOAL = 0.9


def rows(ids, ts, rng):
    return trips_rows(ids, ts, rng)


def build(base, n_rows):
    rng = np.random.default_rng(3)
    writer = HoodieWriter.create(
        base, table_name="bench", record_key_fields=["id"], schema=SCHEMA, precombine_field="ts", partition_fields=[]
    )
    txn = writer.start(operation="INSERT")
    groups = []
    for chunk in np.array_split(np.arange(n_rows, dtype=np.int64), GROUPS):
        groups.append((chunk, txn.write_base("", rows(chunk, 1, rng))))
    first = txn.commit()
    for ts in (2, 3, 4):
        txn = writer.start()
        for chunk, stat in groups:
            sel = chunk[rng.random(len(chunk)) < 0.10]
            txn.append_log("", stat.file_id, first, rows(sel, ts, rng), base_file=stat.path.rsplit("/", 1)[-1])
        txn.commit()


def table_bytes(base):
    total = 0
    for root, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def floor_seconds(base, ops, decoded, codec):
    """pyarrow reads each base file, concatenates the decoded log records and writes one parquet file."""
    out = tempfile.mkdtemp(prefix="compaction-floor-")
    try:
        started = time.perf_counter()
        for k, op in enumerate(ops):
            base_table = pq.read_table(os.path.join(base, op.base_file))
            logs = [t.select(base_table.column_names).cast(base_table.schema) for t in decoded[k]]
            pq.write_table(
                pa.concat_tables([base_table] + logs), os.path.join(out, f"{k}.parquet"), **parquet_compression(codec)
            )
        return time.perf_counter() - started
    finally:
        shutil.rmtree(out, ignore_errors=True)


def operator_seconds(base, instant, ops, committed, max_memory, codec):
    """The execute operator on every operation, one after the other; returns (seconds, write stats)."""
    started = time.perf_counter()
    stats = [
        compact_operation(base, instant, op, committed, max_memory, f"{k}-0-0", codec)[0] for k, op in enumerate(ops)
    ]
    return time.perf_counter() - started, stats


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="?", type=int, default=2_000_000)
    parser.add_argument("--codec", default="gzip,snappy,zstd", help=f"comma-separated, of {', '.join(PARQUET_CODECS)}")
    parser.add_argument("--repeat", type=int, default=1, help="runs of the floor and the operator per codec")
    args = parser.parse_args(argv)
    codecs = [c.strip() for c in args.codec.split(",") if c.strip()]
    for codec in codecs:
        parquet_compression(codec)  # an unknown codec is refused before the table is built
    base = tempfile.mkdtemp(prefix="compaction-bench-")
    try:
        build(base, args.rows)
        tl = Timeline(base)
        opts = parse_compaction_options()
        instant = schedule_compaction(base, tl, opts, force=True)
        ops = plan_operations(pending_plans(tl)[instant])
        tl.transition_to_inflight(instant, "compaction", b"")
        committed = {i.timestamp for i in tl.commits_timeline()}
        input_mb = (
            sum(
                os.path.getsize(os.path.join(base, op.base_file))
                + sum(os.path.getsize(os.path.join(base, n)) for n in op.log_files)
                for op in ops
            )
            / 1e6
        )
        decoded = [
            [v.table for v in slice_versions(base, list(op.log_files), committed.__contains__, "ts", pa.int64())]
            for op in ops
        ]
        print(
            f"Compaction of {len(ops)} file slices: {args.rows:,} rows in base files + 3 log files each "
            f"(10% of keys updated per delta commit), {input_mb:.1f} MB of base + log files"
        )
        print(f"  {'codec':<13}{'compaction':>16}{'pyarrow floor':>18}{'ratio':>9}   (goal >= {GOAL}x)")
        stats = []
        for codec in codecs:
            floor_s = ours_s = float("inf")
            for _ in range(args.repeat):
                for stat in stats:
                    os.remove(os.path.join(base, stat.path))
                floor_s = min(floor_s, floor_seconds(base, ops, decoded, codec))
                seconds, stats = operator_seconds(base, instant, ops, committed, opts.max_memory_bytes, codec)
                ours_s = min(ours_s, seconds)
            print(
                f"  {codec:<13}{input_mb / ours_s:8.1f} MB/s ({ours_s:5.2f} s){input_mb / floor_s:8.1f} MB/s "
                f"({floor_s:5.2f} s){floor_s / ours_s:8.2f}x"
            )
        tl.complete(instant, "compaction", CommitMetadata({}, True, {}, "COMPACT").with_stats(stats).to_json())

        before = table_bytes(base)
        deleted = cleaning.clean(
            base,
            Timeline(base),
            parse_compaction_options({"clean.policy": "KEEP_LATEST_FILE_VERSIONS", "clean.retain_file_versions": "1"}),
        )
        after = table_bytes(base)
        print(
            f"Cleaning (KEEP_LATEST_FILE_VERSIONS=1, base files of {codecs[-1]}): {deleted} files deleted, table "
            f"{before / 1e6:.1f} MB -> {after / 1e6:.1f} MB"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
