"""Cost per micro-batch on a remote store: storage requests by kind and batch latency, S3 against local disk.

Setup (local[2], 2 shuffle partitions): the counting moto S3 server of the tests (`tests/s3_server.py`,
`CountingS3Server`: moto served in this process, counting every request it answers by kind, whichever process sent
it: the driver and the executors' Python workers) and two tables of the same non-partitioned trips-like schema
(keyed by `id`, precombine `ts`, 8 columns, ~100 bytes a record, as `stream_bench.py`): one on the S3 server, one on
local disk, each written by its own `HoodieStreamSink`. Both are grown to each table size of `--keys` (default 1M
then 6M keys) by upserts of `--build-chunk` new keys, then given the same `--batches` CDC micro-batches of
`--batch-rows` events (70% updates of live keys, 5% deletes, 25% inserts, shuffled, keys unique in a batch;
`--warmup` unmeasured first), interleaved: S3 batch k, local batch k, then k+1.

Per batch on S3: the requests the server answered between the start of the batch and the end of its table services
(the sink's call, then `services.wait_idle()`: cleaning runs in the background), by kind (LIST, GET, HEAD, PUT,
POST, DELETE), the share made by the driver (counted by wrapping `ObjectStorage` in this process; the rest came
from the executors), and the same requests by area of the table (timeline, index state, markers, lease, data
files, ...). Latency is the sink's call alone, S3 and local. The summary gives, per table size, the median requests
per batch by kind, the latency medians and their ratio, and between the smallest and the largest size the ratio of
requests per batch (the goal: flat, ~1.0) and where the driver's requests come from (call sites).

Compaction scheduling is off unless `--compaction` (then the sink's defaults); cleaning runs with its defaults.

Run: python benchmarks/s3_bench.py                  # 1M and 6M keys, 8 batches of 100k events each
     python benchmarks/s3_bench.py --quick          # 100k and 600k keys, 4 batches of 10k events (~2 min)
     python benchmarks/s3_bench.py --keys 1000000 --batches 20 --sites 25
Latencies depend on the machine's load (moto answers in this process, competing with the driver for the GIL);
the request counts do not.
"""

import argparse
import collections
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from urllib.parse import parse_qs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (ROOT, ROOT / "tests", HERE):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common import spark_session, write_batch
from s3_server import CountingS3Server

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.int64()),
        ("uuid", pa.string()),
        ("rider", pa.string()),
        ("driver", pa.string()),
        ("fare", pa.float64()),
        ("city", pa.string()),
        ("_hoodie_is_deleted", pa.bool_()),
    ]
)
DDL = "id long, ts long, uuid string, rider string, driver string, fare double, city string, _hoodie_is_deleted boolean"
CITIES = pa.array(["san_francisco", "sao_paulo", "chennai", "new_york"])
SHOWN = ("LIST", "GET", "HEAD", "PUT", "POST", "DELETE")


# -- data (the workload of stream_bench.py) ------------------------------------------------------------------
def rows(ids, ts, rng, deleted=False):
    n = len(ids)
    ids = np.asarray(ids, dtype=np.int64)
    u = rng.integers(0, 2**62, n)
    return pa.table(
        {
            "id": pa.array(ids),
            "ts": pa.array(np.full(n, ts, dtype=np.int64)),
            "uuid": pc.cast(pa.array(u), pa.string()),
            "rider": pc.binary_join_element_wise("rider-", pc.cast(pa.array(ids % 1000), pa.string()), ""),
            "driver": pc.binary_join_element_wise("driver-", pc.cast(pa.array(u % 1000), pa.string()), ""),
            "fare": pa.array(rng.random(n) * 100),
            "city": pc.take(CITIES, pa.array(ids % len(CITIES))),
            "_hoodie_is_deleted": pa.array(np.full(n, deleted)),
        },
        schema=SCHEMA,
    )


class Workload:
    """Keys 0..next_id-1, `live` marks the ones not deleted; CDC batches drawn from them."""

    def __init__(self, seed=7):
        self.rng = np.random.default_rng(seed)
        self.live = np.zeros(0, dtype=bool)
        self.next_id = 0
        self.ts = 0

    def _grow(self, n):
        ids = np.arange(self.next_id, self.next_id + n, dtype=np.int64)
        self.next_id += n
        self.live = np.concatenate([self.live, np.ones(n, dtype=bool)])
        return ids

    def inserts(self, n):
        return rows(self._grow(n), 0, self.rng)

    def cdc(self, n, updates=0.70, deletes=0.05):
        self.ts += 1
        n_upd, n_del = int(n * updates), int(n * deletes)
        n_ins = n - n_upd - n_del
        picked = self.rng.choice(np.flatnonzero(self.live), n_upd + n_del, replace=False)
        upd, dele = picked[:n_upd], picked[n_upd:]
        ins = self._grow(n_ins)
        self.live[dele] = False
        t = pa.concat_tables(
            [rows(upd, self.ts, self.rng), rows(dele, self.ts, self.rng, deleted=True), rows(ins, self.ts, self.rng)]
        )
        return t.take(pa.array(self.rng.permutation(n))), {"updates": n_upd, "deletes": n_del, "inserts": n_ins}

    @property
    def live_rows(self):
        return int(self.live.sum())


def read(spark, directory):
    return spark.read.schema(DDL).parquet(directory)


# -- counting ------------------------------------------------------------------------------------------------
def area(key):
    """The part of a table an object key (relative to the table root) or listing prefix belongs to."""
    if key.startswith(".hoodie/.aux/hoodie_stream/index"):
        return "index state"
    if key.startswith(".hoodie/.temp"):
        return "markers"
    if key.startswith(".hoodie/.locks"):
        return "lease"
    if key.startswith(".hoodie/hoodie.properties"):
        return "properties"
    if key.startswith(".hoodie/metadata") or key.startswith(".hoodie/archived"):
        return ".hoodie other"
    if key.startswith(".hoodie"):
        return "timeline"
    if key in ("", "/"):
        return "table root"
    if key == "(DeleteObjects)":
        return "DeleteObjects"
    if key.rpartition("/")[2].startswith(".hoodie_partition_metadata"):
        return "partition metadata"
    return "data files"


class AreaCountingServer(CountingS3Server):
    """CountingS3Server also counting (kind, area of the table) for the table whose root is `self.table_prefix`."""

    def __init__(self, trace=None):
        self.table_prefix = None
        self.by_area = collections.Counter()
        self.trace = open(trace, "w") if trace else None  # noqa: SIM115 (closed with the server)
        super().__init__()

    def kind(self, environ):
        kind = CountingS3Server.kind(environ)
        if kind is None or self.table_prefix is None:
            return kind
        path = environ.get("PATH_INFO", "").lstrip("/")
        _bucket, _, key = path.partition("/")
        if kind == "LIST":
            query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
            key = (query.get("prefix") or [""])[0]
        if kind == "POST" and not key and "delete" in environ.get("QUERY_STRING", ""):
            key = self.table_prefix + "/(DeleteObjects)"  # bucket level, keys in the body: counted for the table
        if not key.startswith(self.table_prefix):
            return kind
        rel = key[len(self.table_prefix) :].lstrip("/")
        with self._lock:
            self.by_area[(kind, area(rel))] += 1
            if self.trace is not None:
                self.trace.write(f"{kind} {environ.get('REQUEST_METHOD')} {rel} {environ.get('QUERY_STRING', '')}\n")
        return kind

    def reset(self):
        super().reset()
        with self._lock:
            self.by_area.clear()


class DriverSites:
    """Counts the requests of every ObjectStorage made in this process (the driver), by kind and by the call site
    (the innermost hoodie_stream frames outside the storage layer)."""

    def __init__(self):
        self.kinds = collections.Counter()
        self.sites = collections.Counter()

    def install(self):
        from hoodie_stream.storage import object_store

        sites = self

        class SiteCounter(collections.Counter):
            def __setitem__(self, key, value):
                delta = value - self.get(key, 0)
                if delta > 0:
                    sites.kinds[key] += delta
                    sites.sites[(key, _call_site())] += delta
                super().__setitem__(key, value)

        original = object_store.ObjectStorage.__init__

        def init(obj, *args, **kwargs):
            original(obj, *args, **kwargs)
            obj.requests = SiteCounter()

        object_store.ObjectStorage.__init__ = init

    def snapshot(self):
        return collections.Counter(self.kinds), collections.Counter(self.sites)


def _call_site(depth=3):
    frame = sys._getframe(2)
    out = []
    while frame is not None and len(out) < depth:
        filename = frame.f_code.co_filename
        if "hoodie_stream" in filename and "/storage/" not in filename:
            module = filename.rpartition("hoodie_stream/")[2].removesuffix(".py")
            out.append(f"{module}.{frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(out) or "?"


# -- the run -------------------------------------------------------------------------------------------------
class Run:
    def __init__(self):
        self.batches = collections.defaultdict(list)  # size -> [record]


def run_batch(spark, sink, d, batch_id, server=None, sites=None):
    """Apply one batch; returns (latency s, kind counts, driver kind counts, area counts, driver sites)."""
    if server is not None:
        server.reset()
    before_kinds, before_sites = sites.snapshot() if sites else (collections.Counter(), collections.Counter())
    t0 = time.perf_counter()
    sink(read(spark, d), batch_id)
    elapsed = time.perf_counter() - t0
    if not sink.services.wait_idle(600):
        print("  WARNING: table services still busy after 600 s")
    if server is None:
        return elapsed, None, None, None, None
    counts = server.counts()
    by_area = collections.Counter(server.by_area)
    after_kinds, after_sites = sites.snapshot()
    return elapsed, counts, after_kinds - before_kinds, by_area, after_sites - before_sites


def fmt_counts(counts):
    return " ".join(f"{counts.get(k, 0):6d}" for k in SHOWN) + f" {sum(counts.get(k, 0) for k in SHOWN):7d}"


def median_counts(records, key):
    return {k: statistics.median([r[key].get(k, 0) for r in records]) for k in SHOWN}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", default="1000000,6000000", help="table sizes (keys) to measure at, ascending")
    p.add_argument("--batches", type=int, default=8, help="measured CDC batches per size")
    p.add_argument("--batch-rows", type=int, default=100_000, help="events per CDC batch")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured batches per size")
    p.add_argument("--build-chunk", type=int, default=1_000_000, help="new keys per build batch")
    p.add_argument("--compaction", action="store_true", help="let the sinks schedule + run async compaction")
    p.add_argument("--option", action="append", default=[], metavar="K=V", help="more sink options")
    p.add_argument("--sites", type=int, default=15, help="driver call sites shown (most requests first)")
    p.add_argument("--no-local", action="store_true", help="the S3 table only")
    p.add_argument("--trace", default=None, metavar="FILE", help="write every request to the table to FILE")
    p.add_argument("--quick", action="store_true", help="100k and 600k keys, 4 batches of 10k events")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--workdir", default=None, help="where the local table and the batches go (default: temp dir)")
    a = p.parse_args(argv)
    if a.quick:
        a.keys, a.batches, a.batch_rows, a.build_chunk = "100000,600000", 4, 10_000, 500_000
    a.keys = [int(float(s)) for s in a.keys.split(",")]
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    t_start = time.perf_counter()
    sites = DriverSites()
    sites.install()
    from hoodie_stream.streaming_sink.sink import HoodieStreamSink

    server = AreaCountingServer(args.trace)
    uri = server.new_table_uri("s3-bench")
    server.table_prefix = uri.split("/", 3)[3]
    work = args.workdir or tempfile.mkdtemp(prefix="s3-bench-")
    os.makedirs(work, exist_ok=True)
    local_path = os.path.join(work, "hudi")
    print(
        f"s3_bench: local[2], {os.cpu_count()} cores; keys {args.keys}; {args.batches} batches of "
        f"{args.batch_rows:,} events (+{args.warmup} warm-up) per size; S3 {uri} on {server.endpoint} (moto, "
        f"counting); local {local_path}"
    )
    spark = spark_session(args.driver_memory)
    options = {
        "hoodie.table.name": "bench",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
    }
    if not args.compaction:
        options["compaction.schedule.enabled"] = "false"
    options.update(kv.split("=", 1) for kv in args.option)
    sink_s3 = HoodieStreamSink(uri, options, storage_options=server.options())
    sink_local = None if args.no_local else HoodieStreamSink(local_path, options)
    work_load = Workload()
    batch_id = 0
    batch_no = 0
    results = Run()
    try:
        for size in args.keys:
            while work_load.live_rows < size:
                n = min(args.build_chunk, size - work_load.live_rows)
                d = write_batch(work_load.inserts(n), os.path.join(work, "build", f"{work_load.next_id}"))
                el, counts, _drv, _area, _s = run_batch(spark, sink_s3, d, batch_id, server, sites)
                line = f"  build: {n:,} new keys: S3 {el:.1f}s ({sum(counts.values())} requests)"
                if sink_local is not None:
                    el_local = run_batch(spark, sink_local, d, batch_id)[0]
                    line += f", local {el_local:.1f}s"
                print(line)
                batch_id += 1
                shutil.rmtree(d, ignore_errors=True)
            print(f"\n== table of {size:,} keys: {args.batches} CDC batches of {args.batch_rows:,} events ==")
            print(
                f"{'batch':>5} " + " ".join(f"{k:>6}" for k in SHOWN) + f" {'total':>7} {'driver':>7} "
                f"{'S3 s':>7} {'local s':>7}"
            )
            for k in range(args.warmup + args.batches):
                table, mix = work_load.cdc(args.batch_rows)
                batch_no += 1
                d = write_batch(table, os.path.join(work, "batches", f"{batch_no:04d}"))
                el, counts, drv, by_area, drv_sites = run_batch(spark, sink_s3, d, batch_id, server, sites)
                r = sink_s3.last_result
                if r.num_writes != mix["updates"] + mix["inserts"] or r.num_deletes != mix["deletes"]:
                    print(f"  WARNING: the S3 sink wrote {r.num_writes} records and {r.num_deletes} deletes for {mix}")
                el_local = None
                if sink_local is not None:
                    el_local = run_batch(spark, sink_local, d, batch_id)[0]
                batch_id += 1
                shutil.rmtree(d, ignore_errors=True)
                measured = k >= args.warmup
                tag = f"{batch_no:5d}" if measured else "   wu"
                local_text = f"{el_local:7.3f}" if el_local is not None else "      -"
                print(f"{tag} {fmt_counts(counts)} {sum(drv.values()):7d} {el:7.3f} {local_text}")
                if measured:
                    results.batches[size].append(
                        {
                            "counts": counts,
                            "driver": drv,
                            "area": by_area,
                            "sites": drv_sites,
                            "s3": el,
                            "local": el_local,
                        }
                    )
            summarize_size(size, results.batches[size], args.sites)
    except Exception:
        traceback.print_exc()
        raise
    finally:
        sink_s3.close()
        if sink_local is not None:
            sink_local.close()
        spark.stop()
        server.stop()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    summarize(args.keys, results)
    print(f"  total run time {time.perf_counter() - t_start:.0f}s")
    return results


def summarize_size(size, records, top):
    if not records:
        return
    med = median_counts(records, "counts")
    drv = median_counts(records, "driver")
    print("  median per batch: " + ", ".join(f"{k} {med[k]:g}" for k in SHOWN) + f"; total {sum(med.values()):g}")
    print("  of which driver:  " + ", ".join(f"{k} {drv[k]:g}" for k in SHOWN) + f"; total {sum(drv.values()):g}")
    areas = collections.Counter()
    for r in records:
        areas.update(r["area"])
    print("  by area (mean per batch, driver + executors):")
    for (kind, where), n in sorted(areas.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"    {where:<19} {kind:<6} {n / len(records):8.1f}")
    sites = collections.Counter()
    for r in records:
        sites.update(r["sites"])
    print(f"  driver call sites (mean per batch, top {top}):")
    for (kind, site), n in sites.most_common(top):
        print(f"    {n / len(records):7.1f} {kind:<6} {site}")
    s3 = statistics.median(r["s3"] for r in records)
    line = f"  latency median: S3 {s3:.3f}s"
    local = [r["local"] for r in records if r["local"] is not None]
    if local:
        line += f", local {statistics.median(local):.3f}s, S3/local {s3 / statistics.median(local):.2f}"
    print(line)


def summarize(sizes, results):
    print("\n== summary ==")
    print(
        f"{'keys':>11} "
        + " ".join(f"{k:>7}" for k in SHOWN)
        + f" {'total':>8} {'S3 s':>7} {'local s':>7} {'S3/loc':>6}"
    )
    for size in sizes:
        records = results.batches.get(size)
        if not records:
            continue
        med = median_counts(records, "counts")
        s3 = statistics.median(r["s3"] for r in records)
        local = [r["local"] for r in records if r["local"] is not None]
        loc = statistics.median(local) if local else None
        print(
            f"{size:>11,} "
            + " ".join(f"{med[k]:7g}" for k in SHOWN)
            + f" {sum(med.values()):8g} {s3:7.3f} "
            + (f"{loc:7.3f} {s3 / loc:6.2f}" if loc else f"{'-':>7} {'-':>6}")
        )
    if len(sizes) > 1 and all(results.batches.get(s) for s in (sizes[0], sizes[-1])):
        a, b = median_counts(results.batches[sizes[0]], "counts"), median_counts(results.batches[sizes[-1]], "counts")
        ratios = ", ".join(f"{k} {b[k] / a[k]:.2f}" if a[k] else f"{k} {b[k]:g}/0" for k in SHOWN)
        total = sum(b.values()) / max(1, sum(a.values()))
        print(f"  requests per batch {sizes[-1]:,} / {sizes[0]:,} keys: {ratios}; total {total:.2f} (goal: ~1.0)")


if __name__ == "__main__":
    main()
