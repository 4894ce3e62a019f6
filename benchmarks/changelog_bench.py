"""Changelog (CDC) reads against snapshot and incremental reads of the same table, Spark-free (HoodieTable).

A table of --rows trips in --groups file groups (base files, as a bulk insert writes them), created with
hoodie.table.cdc.enabled=true, then --commits delta commits of --batch records each (80% updates of random keys,
10% deletes, 10% new keys) in log files. Measured, each --repeat times in alternating order, median seconds:

- snapshot: the whole table, merged (HoodieTable.read());
- incremental, last commit / all commits: the latest state of the records the window wrote;
- changes, last commit / all commits: read_changes, Hudi's JSON form and the flat form.

--mode is the table's supplemental logging mode. In DATA_BEFORE_AFTER (the default) every delta commit logs its
changes in .cdc files as it writes, and a changelog read takes them as they are: its cost is that of the changes.
In the other modes nothing is logged and the changes are inferred: for every file group the window's commits
wrote, the group's records before the window and after each commit, a cost that grows with the file groups written
and the commits in the window, not with the records changed. Printed: seconds, rows returned, and each read's ratio
to the snapshot read.

    python benchmarks/changelog_bench.py [--rows 1000000] [--groups 8] [--commits 5] [--batch 100000]
                                         [--mode DATA_BEFORE_AFTER|DATA_BEFORE|OP_KEY_ONLY]
"""

import argparse
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa

import common  # puts the checkout on sys.path
from hoodie_stream import HoodieTable
from hoodie_stream.format.write.writer import HoodieWriter


def build(path, rows, groups, commits, batch, rng, mode):
    schema = common.trips_schema()
    writer = HoodieWriter.create(
        path,
        table_name="trips",
        record_key_fields=["id"],
        schema=schema,
        precombine_field="ts",
        extra={"hoodie.table.cdc.enabled": "true", "hoodie.table.cdc.supplemental.logging.mode": mode},
    )
    txn = writer.start(operation="BULK_INSERT", action="commit")
    per = rows // groups
    files = []
    for g in range(groups):
        ids = np.arange(g * per, (g + 1) * per, dtype=np.int64)
        files.append((ids, txn.write_base("", common.trips_rows(ids, 1, rng))))
    first = txn.commit()
    next_id = rows
    for c in range(commits):
        txn = writer.start()
        n_upd, n_del, n_new = int(batch * 0.8), int(batch * 0.1), batch - int(batch * 0.8) - int(batch * 0.1)
        upd = rng.choice(rows, n_upd, replace=False)
        dels = rng.choice(rows, n_del, replace=False)
        for g, (_ids, stat) in enumerate(files):
            lo, hi = g * per, (g + 1) * per
            u = upd[(upd >= lo) & (upd < hi)]
            d = dels[(dels >= lo) & (dels < hi)]
            new = np.arange(next_id + g * (n_new // groups), next_id + (g + 1) * (n_new // groups), dtype=np.int64)
            records = pa.concat_tables([common.trips_rows(u, 2 + c, rng), common.trips_rows(new, 2 + c, rng)])
            txn.append_log(
                "",
                stat.file_id,
                first,
                records,
                deletes=(pa.array([str(k) for k in d]), None) if len(d) else None,
                num_inserts=len(new),
                base_file=stat.path,
            )
        next_id += n_new
        txn.commit()
    return HoodieTable(path)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--commits", type=int, default=5)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mode", default="DATA_BEFORE_AFTER", choices=["DATA_BEFORE_AFTER", "DATA_BEFORE", "OP_KEY_ONLY"])
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory(prefix="changelog-bench-") as tmp:
        t0 = time.perf_counter()
        table = build(f"{tmp}/t", args.rows, args.groups, args.commits, args.batch, rng, args.mode)
        print(
            f"changelog_bench: {args.rows:,} rows in {args.groups} file groups, then {args.commits} delta commits of "
            f"{args.batch:,} records, logging mode {args.mode} (built in {time.perf_counter() - t0:.1f}s)"
        )
        instants = [i.timestamp for i in table.timeline.commits_timeline()]
        first, last_but_one = instants[0], instants[-2]
        reads = {
            "snapshot": lambda: table.read(),
            "incremental, last commit": lambda: table.read("incremental", start=last_but_one),
            "incremental, all commits": lambda: table.read("incremental", start=first),
            "changes, last commit": lambda: table.read_changes(start=last_but_one),
            "changes, last commit, flat": lambda: table.read_changes(start=last_but_one, flat=True),
            "changes, all commits": lambda: table.read_changes(start=first),
            "changes, all commits, flat": lambda: table.read_changes(start=first, flat=True),
        }
        times = {name: [] for name in reads}
        counts = {}
        for r in range(args.repeat):
            order = list(reads) if r % 2 == 0 else list(reversed(reads))
            for name in order:
                seconds, result = timed(reads[name])
                times[name].append(seconds)
                counts[name] = result.num_rows
        snapshot = statistics.median(times["snapshot"])
        print(f"  {'read':<30} {'seconds':>8} {'rows':>11} {'x snapshot':>11}")
        for name in reads:
            median = statistics.median(times[name])
            print(f"  {name:<30} {median:8.2f} {counts[name]:11,} {median / snapshot:11.2f}")


if __name__ == "__main__":
    main()
