"""Compaction throughput: the execute operator (merge base + logs into a new base file) against a pyarrow floor.

Table: `rows` records in 4 file groups (base files), then 3 delta commits each updating 10% of the keys in new log
files. The operator's rate is MB of base + log files merged per second (one operation at a time, in-process, as a
compaction task runs it). The floor reads the same base files with pyarrow, takes the log records already decoded
(free for the floor), concatenates them without merging and writes one parquet file with the same compression.
Then the table is cleaned (KEEP_LATEST_FILE_VERSIONS=1) and its size before/after is printed.

Run: python benchmarks/compaction_bench.py [rows]
"""

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
from hoodie_stream.format.base_file import DEFAULT_COMPRESSION
from hoodie_stream.format.commit_metadata import CommitMetadata
from hoodie_stream.format.log_scanner import slice_versions
from hoodie_stream.format.timeline import Timeline
from hoodie_stream.format.writer import HoodieWriter
from hoodie_stream.options import parse_compaction_options

GROUPS = 4
SCHEMA = trips_schema()


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


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    n_rows = int(argv[0]) if argv else 2_000_000
    base = tempfile.mkdtemp(prefix="compaction-bench-")
    try:
        build(base, n_rows)
        tl = Timeline(base)
        opts = parse_compaction_options()
        instant = schedule_compaction(base, tl, opts, force=True)
        ops = pending_plans(tl)[instant]["operations"]
        tl.transition_to_inflight(instant, "compaction", b"")
        committed = {i.timestamp for i in tl.commits_timeline()}
        input_mb = (
            sum(
                os.path.getsize(os.path.join(base, op["dataFilePath"]))
                + sum(os.path.getsize(os.path.join(base, n)) for n in op["deltaFilePaths"])
                for op in ops
            )
            / 1e6
        )

        # floor: pyarrow reads the base files, log records come decoded for free, one parquet file is written
        decoded = []
        for op in ops:
            versions = slice_versions(base, op["deltaFilePaths"], committed.__contains__, "ts", pa.int64())
            decoded.append([v.table for v in versions])
        floor_dir = tempfile.mkdtemp(prefix="compaction-floor-")
        started = time.perf_counter()
        for k, op in enumerate(ops):
            base_table = pq.read_table(os.path.join(base, op["dataFilePath"]))
            logs = [t.select(base_table.column_names).cast(base_table.schema) for t in decoded[k]]
            pq.write_table(
                pa.concat_tables([base_table] + logs),
                os.path.join(floor_dir, f"{k}.parquet"),
                compression=DEFAULT_COMPRESSION,
            )
        floor_s = time.perf_counter() - started
        shutil.rmtree(floor_dir, ignore_errors=True)

        started = time.perf_counter()
        stats = [
            compact_operation(base, instant, op, committed, opts.max_memory_bytes, f"{k}-0-0")[0]
            for k, op in enumerate(plan_operations(pending_plans(tl)[instant]))
        ]
        ours_s = time.perf_counter() - started
        tl.complete(instant, "compaction", CommitMetadata({}, True, {}, "COMPACT").with_stats(stats).to_json())

        before = table_bytes(base)
        deleted = cleaning.clean(
            base,
            Timeline(base),
            parse_compaction_options({"clean.policy": "KEEP_LATEST_FILE_VERSIONS", "clean.retain_file_versions": "1"}),
        )
        after = table_bytes(base)

        print(
            f"Compaction of {len(ops)} file slices: {n_rows:,} rows in base files + 3 log files each "
            f"(10% of keys updated per delta commit), {input_mb:.1f} MB of base + log files"
        )
        print(f"  compaction (merge + write)   {input_mb / ours_s:8.1f} MB/s   ({ours_s:.2f} s)")
        print(f"  pyarrow floor (read + write) {input_mb / floor_s:8.1f} MB/s   ({floor_s:.2f} s)")
        print(f"  ratio compaction / floor: {floor_s / ours_s:.2f}x  (goal >= 0.7x)")
        print(
            f"Cleaning (KEEP_LATEST_FILE_VERSIONS=1): {deleted} files deleted, table {before / 1e6:.1f} MB -> "
            f"{after / 1e6:.1f} MB"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
