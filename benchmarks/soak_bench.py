"""Soak benchmark: thousands of small CDC micro-batches into one table; does a micro-batch cost the same at the end
of the table's life as at its start?

Setup (local[2], 2 shuffle partitions): one merge-on-read table keyed by `id` (precombine `ts`) over a bounded key
space of `--keys` keys (default 20,000) in `--partitions` partitions (`region = id % partitions`, default 4), with
the sink's default options: async compaction (a plan every 5 delta commits), async cleaning (30 commits retained)
and, once the table services have it, timeline archiving. Batch 0 loads every key (a bulk insert, not measured);
then `--batches` micro-batches (default 10,000) of `--events` events each (default 20-100, drawn per batch): keys
drawn from the key space, 10% of them deletes (`_hoodie_is_deleted`), the rest upserts: an update of a live key, an
insert of a deleted one. The table stays the same size; only its history grows. Every batch is a function of the
seed and its batch id (nothing else carries over), so a run can be resumed (`--resume`, local only).

The sink is called as foreachBatch calls it (`sink(df, batch_id)`, no streaming query). A batch's rows are
generated and written as one Parquet file, and its DataFrame made, before the clock starts: the latency is the
sink's call alone. Async compaction and cleaning run in the background as in a query; nothing waits for them.

Sampled per batch (one row per batch in `samples.csv` of the work directory):
- latency of the sink's call;
- driver RSS: this Python process and the JVM (Spark's driver, a child process); every `--gc-every` batches the
  JVM's heap in use after a full GC and the Python objects tracked after `gc.collect()` (leaks show there first);
- the Python workers' RSS (pyspark.daemon and its forks): the largest one, and their sum;
- every `--files-every` batches the files under `.hoodie/` (recursive), split into the active timeline's files,
  `archived/`, the index state (`.aux`), markers (`.temp`) and the rest;
- on `--location s3` (the counting moto S3 server of the tests, `tests/s3_server.py`, in a process of its own: its
  memory is not the driver's): the requests the server answered from the start of the batch to the start of the
  next one (so async compaction and cleaning count with the batch they follow), by kind and by area of the table;
  the benchmark's own listings are not counted;
- every 10 batches, the machine itself (`machine_probe`): the same Python loop and the same 8 small files written
  and fsynced. A virtual machine's CPU and disk speed drift over hours; the probe shows when the latency moves
  with them.

Summary: windows of 100 batches (the baseline, batches 51-150, after the warm-up; checkpoints at 1k, 2k, 5k; the
last 100): median latency, requests per batch (mean: a compaction every 5th batch counts), memory, files. The goals
of issue 21 point 4, each with its verdict: latency of the last window <= 1.2x the baseline's; `.hoodie/` bounded
(the count at the end within 1.1x + 100 of the count half-way); memory flat (each figure's growth from half-way to
the end at most 2% of its value + 4 MB per 1,000 batches: growth in the first half is caches filling up and the JVM
sizing its heap); S3 requests per batch flat (last window within 1.1x of the baseline). At the end the table is read and must hold exactly the live keys. The exit
status is 0 whatever the goals, non-zero on an error (a failed batch, a failed compaction or clean, a crashed
Python worker, a table that does not hold what was written).

Run: python benchmarks/soak_bench.py                          # 10,000 batches on local disk
     python benchmarks/soak_bench.py --batches 300 --profile 100,290
     python benchmarks/soak_bench.py --location s3 --batches 200
     python benchmarks/soak_bench.py --workdir /tmp/soak --batches 10000 [--resume]   # keeps the table
"""

import argparse
import array
import collections
import cProfile
import csv
import gc
import io
import json
import math
import os
import pstats
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
import pyarrow.parquet as pq

from common import MB, WorkerRss, read_proc, spark_session, status_bytes

OPTIONS = {
    "hoodie.table.name": "soak",
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.datasource.write.partitionpath.field": "region",
}
DDL = "id long, ts long, region string, name string, amount double, note string, _hoodie_is_deleted boolean"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.int64()),
        ("region", pa.string()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("note", pa.string()),
        ("_hoodie_is_deleted", pa.bool_()),
    ]
)
GOALS = {"latency": 1.2, "files": (1.1, 100), "memory": (0.02, 4), "requests": 1.1}
KINDS = ("LIST", "GET", "HEAD", "PUT", "POST", "DELETE")
FILE_PARTS = ("timeline", "archived", "index", "markers", "other")
MEMORY = (("py_rss", "driver Python RSS"), ("jvm_rss", "driver JVM RSS"), ("jvm_heap", "JVM heap after GC"),
          ("worker_max", "largest Python worker RSS"), ("worker_sum", "Python workers' RSS, sum"))  # fmt: skip
STEPS = ("prepare", "chain", "commit", "services")  # the sink's own timing of a micro-batch (batch_metrics.STAGES)
COLUMNS = (
    ["batch", "events", "latency", "elapsed"]
    + list(STEPS)
    + ["driver"]
    + list(FILE_PARTS)
    + ["hoodie_files", "py_rss", "jvm_rss", "jvm_heap", "py_objects", "worker_max", "worker_sum", "requests"]
    + list(KINDS)
    + ["probe_cpu", "probe_fsync"]
)


# -- the workload ----------------------------------------------------------------------------------------------
class Workload:
    """Batches over keys 0..keys-1 in `partitions` regions; batch b is drawn from (seed, b) alone."""

    def __init__(self, keys, partitions, events, seed, deletes=0.10):
        self.keys, self.partitions, self.events, self.seed, self.deletes = keys, partitions, events, seed, deletes
        self.live = np.zeros(keys, dtype=bool)

    def _rows(self, ids, ts, deleted, rng):
        n = len(ids)
        regions = pa.array([f"region-{i}" for i in range(self.partitions)])
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "ts": pa.array(np.full(n, ts, dtype=np.int64)),
                "region": regions.take(pa.array(ids % self.partitions)),
                "name": pa.array([f"customer-{i % 9973}" for i in ids]),
                "amount": pa.array(rng.random(n) * 1000),
                "note": pa.array(
                    [f"event {ts} of key {i}: {'x' * int(k)}" for i, k in zip(ids, rng.integers(0, 40, n))]
                ),
                "_hoodie_is_deleted": pa.array(deleted, pa.bool_()),
            },
            schema=SCHEMA,
        )

    def load(self):
        """Batch 0: every key, inserted."""
        ids = np.arange(self.keys, dtype=np.int64)
        self.live[:] = True
        return self._rows(ids, 0, np.zeros(self.keys, dtype=bool), np.random.default_rng([self.seed, 0]))

    def _draw(self, batch):
        rng = np.random.default_rng([self.seed, batch])
        n = int(rng.integers(self.events[0], self.events[1] + 1))
        ids = np.sort(rng.choice(self.keys, n, replace=False)).astype(np.int64)
        deleted = rng.random(n) < self.deletes
        return rng, ids, deleted

    def batch(self, batch):
        """(rows of batch `batch` >= 1, {"updates", "inserts", "deletes", "upserts"}); advances the live keys."""
        rng, ids, deleted = self._draw(batch)
        was = self.live[ids]
        mix = {
            "updates": int((was & ~deleted).sum()),
            "inserts": int((~was & ~deleted).sum()),
            "deletes": int((was & deleted).sum()),  # deletes of keys already deleted change nothing
            "upserts": int((~deleted).sum()),
        }
        self.live[ids] = ~deleted
        return self._rows(ids, batch, deleted, rng), mix

    def replay(self, upto):
        """The live keys after batches 0..upto (for a resumed run)."""
        self.live[:] = True
        for b in range(1, upto + 1):
            _rng, ids, deleted = self._draw(b)
            self.live[ids] = ~deleted


# -- what is sampled ---------------------------------------------------------------------------------------------
def hoodie_files_local(path):
    """{part: files} under .hoodie/ of a local table."""
    out = dict.fromkeys(FILE_PARTS, 0)
    root = os.path.join(path, ".hoodie")
    for dirpath, _dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        out[_part(rel)] += len(files)
    return out


def _part(rel_dir):
    """The part of .hoodie/ a directory (relative to it) belongs to."""
    top = rel_dir.replace("\\", "/").split("/", 1)[0]
    if rel_dir in (".", ""):
        return "timeline"
    return {"archived": "archived", ".aux": "index", ".temp": "markers"}.get(top, "other")


def hoodie_files_s3(client, bucket, prefix):
    """{part: files} under .hoodie/ of a table on S3 (boto3: not counted by the server)."""
    out = dict.fromkeys(FILE_PARTS, 0)
    root = prefix.rstrip("/") + "/.hoodie/"
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=root):
        for obj in page.get("Contents", ()):
            rel_dir = obj["Key"][len(root) :].rpartition("/")[0]
            out[_part(rel_dir or ".")] += 1
    return out


def jvm_pid():
    """The pid of Spark's driver JVM: the java process among this process's descendants."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        cmd = read_proc(f"/proc/{name}/cmdline") or b""
        if b"java" not in cmd.split(b"\0", 1)[0] or b"SparkSubmit" not in cmd:
            continue
        pid, hops = int(name), 0
        while pid > 1 and hops < 16:
            stat = read_proc(f"/proc/{pid}/stat")
            if not stat:
                break
            pid = int(stat[stat.rindex(b")") + 2 :].split()[1])
            hops += 1
            if pid == me:
                return int(name)
    return None


def rss_mb(pid):
    if pid is None:
        return None
    return status_bytes(pid, "VmRSS").get("VmRSS", 0) / MB


def jvm_heap_after_gc(spark):
    """MB of the driver JVM's heap in use right after a full GC."""
    jvm = spark.sparkContext._jvm
    jvm.java.lang.System.gc()
    runtime = jvm.java.lang.Runtime.getRuntime()
    return (runtime.totalMemory() - runtime.freeMemory()) / MB


def area(rel):
    """The area of the table a key (relative to the table root) or listing prefix falls in."""
    if rel.startswith(".hoodie/.aux"):
        return "index state"
    if rel.startswith(".hoodie/.temp"):
        return "markers"
    if rel.startswith(".hoodie/.locks"):
        return "lease"
    if rel.startswith(".hoodie/archived"):
        return "archived"
    if rel.startswith(".hoodie/hoodie.properties"):
        return "properties"
    if rel.startswith(".hoodie"):
        return "timeline"
    if rel in ("", "/"):
        return "table root"
    if rel == "(DeleteObjects)":
        return "DeleteObjects"
    return "data files"


def _serve(conn):
    """In a process of its own: the tests' counting moto server, counting also by area of the table and not counting
    boto3's requests (the benchmark's own listings; the sink's requests come from obstore). Answers "snapshot" on
    `conn` with (requests by kind, requests by (kind, area)) until it gets "stop"."""
    from s3_server import CountingS3Server

    class Server(CountingS3Server):
        def __init__(self):
            self.table_prefix = None
            self.by_area = collections.Counter()
            super().__init__()

        def kind(self, environ):
            agent = environ.get("HTTP_USER_AGENT", "")
            if "Boto3" in agent or "botocore" in agent:
                return None
            kind = CountingS3Server.kind(environ)
            if kind is None or self.table_prefix is None:
                return kind
            key = environ.get("PATH_INFO", "").lstrip("/").partition("/")[2]
            query = environ.get("QUERY_STRING", "")
            if kind == "LIST":
                key = (parse_qs(query, keep_blank_values=True).get("prefix") or [""])[0]
            if kind == "POST" and not key and "delete" in query:
                key = self.table_prefix + "/(DeleteObjects)"
            if key.startswith(self.table_prefix):
                with self._lock:
                    self.by_area[(kind, area(key[len(self.table_prefix) :].lstrip("/")))] += 1
            return kind

    server = Server()
    uri = server.new_table_uri("soak")
    server.table_prefix = uri.split("/", 3)[3]
    conn.send((server.port, uri))
    while True:
        what = conn.recv()
        if what == "stop":
            break
        with server._lock:
            conn.send((dict(server._counts), dict(server.by_area)))
    server.stop()
    conn.send("stopped")


class S3Counter:
    """The counting moto server in a child process (its memory and its share of the GIL are not the driver's):
    `.path` a fresh table location on it, `.options()` the table's storage options, `.snapshot()` the requests
    counted so far ((Counter by kind, Counter by (kind, area))), `.client()` a boto3 client (not counted)."""

    def __init__(self):
        import multiprocessing

        from s3_server import _MotoEndpoint

        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child,), name="soak-s3-server", daemon=True)
        self._process.start()
        if not self._conn.poll(120):
            raise RuntimeError("the S3 server did not start within 120 s")
        port, self.path = self._conn.recv()
        self.endpoint = _MotoEndpoint()
        self.endpoint.port = port
        self.bucket = self.endpoint.bucket
        self.table_prefix = self.path.split("/", 3)[3]

    def options(self):
        return self.endpoint.options()

    def client(self):
        return self.endpoint.client()

    def snapshot(self):
        self._conn.send("snapshot")
        kinds, areas = self._conn.recv()
        return collections.Counter(kinds), collections.Counter(areas)

    def stop(self):
        if self._process.is_alive():
            self._conn.send("stop")
            self._conn.poll(30) and self._conn.recv()
        self._process.join(30)


# -- the run -----------------------------------------------------------------------------------------------------
_INDEX = {k: i for i, k in enumerate(COLUMNS)}


class Row:
    """One batch's sample, read like a dict of COLUMNS (None where not sampled), held as an array of doubles: the
    10,000 rows of a run take ~3 MB of the driver's memory this benchmark measures, not ~20 MB as dicts."""

    __slots__ = ("_values",)

    def __init__(self, values):
        self._values = array.array("d", (math.nan if values.get(k) is None else values[k] for k in COLUMNS))

    def get(self, key, default=None):
        value = self._values[_INDEX[key]]
        return default if math.isnan(value) else value

    def __getitem__(self, key):
        return self.get(key)


class Samples:
    """The per-batch rows (Row), appended to samples.csv as they come (flushed: a run can be watched
    and resumed)."""

    def __init__(self, path, resume, read_only=False):
        self.path = path
        self.rows = []
        if resume and os.path.exists(path):
            with open(path, newline="") as f:
                for line in csv.DictReader(f):
                    row = {k: (float(v) if v not in ("", None) else None) for k, v in line.items()}
                    if row.get("driver") is None and row.get("prepare") is not None:  # written before the column
                        row["driver"] = sum(row.get(k) or 0.0 for k in STEPS if k != "chain")
                    self.rows.append(Row(row))
        if read_only:
            return
        self._file = open(path, "a" if resume else "w", newline="")  # noqa: SIM115 (closed by close())
        self._writer = csv.DictWriter(self._file, COLUMNS)
        if not self.rows:
            self._writer.writeheader()

    def add(self, row):
        self.rows.append(Row(row))
        self._writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in COLUMNS})
        self._file.flush()

    def close(self):
        self._file.close()

    def window(self, start, end):
        return [r for r in self.rows if start <= r["batch"] <= end]

    def last_value(self, key, upto):
        """The last sampled value of `key` at or before batch `upto` (None when never sampled)."""
        found = None
        for r in self.rows:
            if r["batch"] > upto:
                break
            if r.get(key) is not None:
                found = r[key]
        return found


def machine_probe(work, files=8):
    """(cpu seconds, fsync seconds) of a fixed workload: a pure-Python loop, and `files` small files written and
    fsynced with their directory (what the sink's index state and log appends do per micro-batch). The same work
    every time: its changes over a run are the machine's (CPU steal, disk latency), not the table's."""
    t0 = time.perf_counter()
    total = 0
    for i in range(300_000):
        total += i * i % 7
    cpu = time.perf_counter() - t0
    folder = os.path.join(work, "probe")
    os.makedirs(folder, exist_ok=True)
    payload = os.urandom(4096)
    t0 = time.perf_counter()
    for i in range(files):
        name = os.path.join(folder, f"f{i}")
        with open(name, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.remove(name)
    return cpu, time.perf_counter() - t0


def batch_frame(spark, work, table):
    d = os.path.join(work, "batch")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    pq.write_table(table, os.path.join(d, "part-0.parquet"))
    return spark.read.schema(DDL).parquet(d)


def profile_call(sink, df, batch, work, top):
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    sink(df, batch)
    profiler.disable()
    latency = time.perf_counter() - t0
    out = os.path.join(work, f"profile-{batch}.prof")
    profiler.dump_stats(out)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(r"hoodie_stream", top)
    print(f"\n-- cProfile of the sink's call at batch {batch} ({latency:.3f}s; {out}), hoodie_stream functions:")
    body = text.getvalue()
    print(body[body.find("   ncalls") :].rstrip(), flush=True)
    return latency


def run(args):
    from hoodie_stream.checkpoints.batch_checkpoint import last_batch_id
    from hoodie_stream.format.timeline.active_timeline import Timeline
    from hoodie_stream.streaming_sink.sink import HoodieStreamSink

    work = args.workdir or tempfile.mkdtemp(prefix="soak-bench-")
    os.makedirs(work, exist_ok=True)
    config = {k: getattr(args, k) for k in ("keys", "partitions", "events", "seed", "location", "option")}
    config_path = os.path.join(work, "config.json")
    if args.resume:
        if args.location != "local":
            raise SystemExit("--resume works on local tables only (the S3 server keeps its objects for one run)")
        with open(config_path) as f:
            saved = json.load(f)
        if saved != json.loads(json.dumps(config)):
            raise SystemExit(f"--resume: the work directory was made with other arguments: {saved}")
    else:
        if os.path.exists(os.path.join(work, "table")):
            raise SystemExit(f"{work} holds a table already: --resume, or another --workdir")
        with open(config_path, "w") as f:
            json.dump(config, f)
    options = dict(OPTIONS)
    options.update(kv.split("=", 1) for kv in args.option)
    workload = Workload(args.keys, args.partitions, args.events, args.seed)
    server = None
    storage_options = None
    if args.location == "s3":
        server = S3Counter()  # before Spark starts (a spawned process)
        path = server.path
        storage_options = server.options()
        where = f"{path} on {server.endpoint.endpoint} (moto in a process of its own, counting)"
    else:
        path = os.path.join(work, "table")
        where = path
    print(
        f"soak_bench: local[2], {os.cpu_count()} cores; {args.batches:,} batches of {args.events[0]}-{args.events[1]} "
        f"events over {args.keys:,} keys in {args.partitions} partitions; table {where}; work dir {work}",
        flush=True,
    )
    # Spark's own defaults of what its status store retains (the benchmarks' 20,000 stages would grow the driver
    # JVM for the whole run, as a query's driver never does)
    spark = spark_session(args.driver_memory, app="hoodie-stream-soak-bench", conf={"spark.ui.retainedStages": "1000"})
    import hoodie_stream

    used = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("hoodie_stream").__file__).collect()[0]
    print(f"  hoodie_stream: driver {Path(hoodie_stream.__file__).parent}, workers {Path(used).parent}", flush=True)
    samples = Samples(os.path.join(work, "samples.csv"), args.resume)
    workers = WorkerRss()
    java = jvm_pid()
    sink = HoodieStreamSink(path, options, storage_options=storage_options)
    errors = []
    t_start = time.perf_counter()
    elapsed0 = samples.rows[-1]["elapsed"] if samples.rows else 0.0
    areas = []  # (batch, Counter of (kind, area)) on S3, for the batches of the summary's first and last windows
    shown = windows(args.batches)
    area_batches = [(a, b) for _label, a, b in (shown[0], shown[-1])]
    object_types = {}  # batch -> Counter of the Python objects tracked, by type (at the gc points)
    try:
        first = 1
        if args.resume:
            done = last_batch_id(Timeline(sink.storage), sink.options.checkpoint_identifier)
            if done is None:
                raise SystemExit("--resume: the table has no committed batch")
            first = done + 1
            workload.replay(done)
            samples.rows = [r for r in samples.rows if r["batch"] <= done]
            print(f"  resumed after batch {done:,} ({len(samples.rows):,} batches sampled before)", flush=True)
        else:
            t0 = time.perf_counter()
            sink(batch_frame(spark, work, workload.load()), 0)
            print(f"  load: {args.keys:,} keys bulk inserted in {time.perf_counter() - t0:.1f}s", flush=True)
        services = sink.services
        service_errors = 0
        files_parts = None
        reqs_before = server.snapshot() if server else None
        profiles = set(args.profile)
        for b in range(first, args.batches + 1):
            table, mix = workload.batch(b)
            df = batch_frame(spark, work, table)
            if b in profiles:
                latency = profile_call(sink, df, b, work, args.profile_top)
            else:
                t0 = time.perf_counter()
                sink(df, b)
                latency = time.perf_counter() - t0
            r = sink.last_result
            if r is None or r.skipped or r.num_writes != mix["upserts"]:
                got = "nothing" if r is None else repr(r)
                print(f"  WARNING: batch {b}: the sink wrote {got} for {mix}", flush=True)
            failed = getattr(services, "error_count", len(services.errors))  # (error_count: since 21 point 4)
            if failed > service_errors:
                service_errors = failed
                errors.append(services.errors[-1])
                print(f"  ERROR: a table service failed after batch {b}: {errors[-1]!r}", flush=True)
            row = dict.fromkeys(COLUMNS)
            row.update(batch=b, events=len(table), latency=latency)
            row.update({k: sink._seconds.get(k) for k in STEPS})
            row["driver"] = sum(sink._seconds.get(k, 0.0) for k in STEPS if k != "chain")
            row.update(py_rss=rss_mb(os.getpid()), jvm_rss=rss_mb(java))
            if b % 10 == 5:  # between batches, as the sink's background services run
                row["probe_cpu"], row["probe_fsync"] = machine_probe(work)
            if b % 10 == 1 or b == first:
                workers._scan()
            workers.samples.clear()
            workers.sample()
            if workers.samples:
                _t, top, total = workers.samples[-1]
                row.update(worker_max=top / MB, worker_sum=total / MB)
            if b % args.gc_every == 0 or b == args.batches or b in (first, 100, 150):
                row["jvm_heap"] = jvm_heap_after_gc(spark)
                gc.collect()
                objects = gc.get_objects()
                row["py_objects"] = len(objects)
                object_types[b] = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in objects)
                del objects
            if b % args.files_every == 0 or b == args.batches or files_parts is None:
                if server is not None:
                    files_parts = hoodie_files_s3(server.client(), server.bucket, server.table_prefix)
                else:
                    files_parts = hoodie_files_local(path)
                row.update(files_parts, hoodie_files=sum(files_parts.values()))
            if server is not None:
                # the requests since this batch started, counted with it; the next batch starts now
                now = server.snapshot()
                kinds, by_area = now[0] - reqs_before[0], now[1] - reqs_before[1]
                reqs_before = now
                row.update({k: kinds.get(k, 0) for k in KINDS}, requests=sum(kinds.values()))
                if any(a <= b <= z for a, z in area_batches):  # (a Counter per batch: not kept for every batch)
                    areas.append((b, by_area))
            row["elapsed"] = elapsed0 + time.perf_counter() - t_start
            samples.add(row)
            if b % args.progress == 0 or b == args.batches:
                progress(samples, b, args.batches, files_parts)
    except BaseException as exc:
        if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            traceback.print_exc()
        errors.append(exc)
    finally:
        try:
            sink.close(wait=False)  # a compaction still running is cancelled: its plan stays pending
        except Exception as exc:
            errors.append(exc)
        samples.close()
        try:
            spark.stop()  # fails the run (SystemExit 3) when a Python worker crashed
        finally:
            if not errors and samples.rows and not verify(path, storage_options, workload):
                errors.append(RuntimeError("the table does not hold the live keys"))
            if server is not None:
                server.stop()
    if samples.rows:
        summarize(samples, args, areas, object_types)
    print(f"  total run time {time.perf_counter() - t_start:.0f}s")
    if not args.workdir and not errors:
        shutil.rmtree(work, ignore_errors=True)
    if errors:
        print(f"\nFAILED: {len(errors)} error(s) during the run: {errors[0]!r}", file=sys.stderr)
        return 2
    return 0


def verify(path, storage_options, workload):
    """Whether the table holds exactly the live keys (the run wrote what it was given)."""
    from hoodie_stream.format.hoodie_table import HoodieTable

    ids = HoodieTable(path, storage_options).read(columns=["id"])["id"].to_numpy()
    want = np.flatnonzero(workload.live)
    ok = len(ids) == len(want) and np.array_equal(np.sort(ids), want)
    print(f"  table check: {len(ids):,} rows, {len(want):,} live keys expected: {'ok' if ok else 'MISMATCH'}")
    return ok


# -- figures -------------------------------------------------------------------------------------------------------
def _median(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def _mean(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.fmean(values) if values else None


def progress(samples, b, n, files_parts):
    recent = samples.window(b - 99, b)
    base = samples.window(*baseline(n))
    lat, lat0 = _median(recent, "latency"), _median(base, "latency")
    last = samples.rows[-1]
    elapsed = last["elapsed"]
    line = f"  batch {b:,}/{n:,} {elapsed / 60:.1f} min: latency median of the last {len(recent)} {lat:.3f}s"
    if lat0:
        line += f" (baseline {lat0:.3f}s, x{lat / lat0:.2f})"
    parts = files_parts or {}
    line += (
        f"; .hoodie {sum(parts.values()):,} files (timeline {parts.get('timeline', 0):,}, archived "
        f"{parts.get('archived', 0):,}, index {parts.get('index', 0):,}); RSS driver {last['py_rss']:.0f} MB, JVM "
        f"{last['jvm_rss']:.0f} MB, workers max {last['worker_max'] or 0:.0f} MB"
    )
    heap = samples.last_value("jvm_heap", b)
    if heap is not None:
        line += f", JVM heap after GC {heap:.0f} MB"
    if last.get("requests") is not None:
        line += f"; S3 requests/batch {_mean(recent, 'requests'):.1f}"
    cpu, fsync = _median(recent, "probe_cpu"), _median(recent, "probe_fsync")
    if cpu is not None:
        line += f"; probe cpu {cpu * 1000:.0f} ms, fsync {fsync * 1000:.1f} ms"
    line += f"; ~{(elapsed - samples.rows[0]['elapsed']) / len(samples.rows) * (n - b) / 60:.0f} min left"
    print(line, flush=True)


def baseline(n):
    """(first, last) batch of the baseline window: 51-150 after the warm-up, shorter for short runs."""
    warm = min(50, n // 4)
    return warm + 1, max(warm + 1, min(warm + 100, n // 2))


def windows(n):
    """[(label, first, last)]: the baseline, checkpoints at 1k, 2k, 5k (the 100 batches up to each), the last 100."""
    b0, b1 = baseline(n)
    out = [(f"{b0}-{b1} (baseline)", b0, b1)]
    for c in (1000, 2000, 5000):
        if b1 + 100 < c <= n - 100:
            out.append((f"{c - 99}-{c}", c - 99, c))
    first = max(b1 + 1, n - 99)
    out.append((f"{first}-{n} (last)", first, n))
    return out


def verdict(met):
    return "met" if met else "NOT MET"


def summarize(samples, args, areas, object_types):
    n = int(samples.rows[-1]["batch"])
    ws = windows(n)
    s3 = any(r.get("requests") is not None for r in samples.rows)
    print(f"\n== summary: {n:,} batches, {samples.rows[-1]['elapsed'] / 60:.1f} min ==")
    head = f"  {'batches':<20} {'latency med':>11} {'p90':>7} {'driver':>7} {'.hoodie':>8} {'timeline':>8} {'archived':>8} "
    head += f"{'index':>6} {'markers':>7} {'other':>5} {'py MB':>6} {'JVM MB':>7} {'heap MB':>7} {'worker':>6}"
    head += f" {'cpu ms':>6} {'fsync ms':>8}"
    if s3:
        head += f" {'req/batch':>9} " + " ".join(f"{k:>6}" for k in KINDS)
    print(head)
    for label, a, b in ws:
        rows = samples.window(a, b)
        if not rows:
            continue
        lat = sorted(r["latency"] for r in rows)
        line = f"  {label:<20} {statistics.median(lat):>10.3f}s {lat[int(0.9 * (len(lat) - 1))]:>6.3f}s"
        line += f" {_median(rows, 'driver'):>6.3f}s"
        for key, width in (("hoodie_files", 8), ("timeline", 8), ("archived", 8), ("index", 6), ("markers", 7),
                           ("other", 5)):  # fmt: skip
            v = samples.last_value(key, b)
            line += f" {v:>{width}.0f}" if v is not None else f" {'-':>{width}}"
        heap = samples.last_value("jvm_heap", b)
        line += f" {_median(rows, 'py_rss'):>6.0f} {_median(rows, 'jvm_rss'):>7.0f} "
        line += f"{heap:>7.0f}" if heap is not None else f"{'-':>7}"
        line += f" {_median(rows, 'worker_max') or 0:>6.0f}"
        cpu, fsync = _median(rows, "probe_cpu"), _median(rows, "probe_fsync")
        line += f" {cpu * 1000:>6.0f} {fsync * 1000:>8.1f}" if cpu is not None else f" {'-':>6} {'-':>8}"
        if s3:
            line += f" {_mean(rows, 'requests'):>9.1f} " + " ".join(f"{_mean(rows, k):>6.1f}" for k in KINDS)
        print(line)
    if areas:
        print("  S3 requests per batch by area (mean over the window, the kinds of each area):")
        for label, a, b in (ws[0], ws[-1]):
            total = collections.Counter()
            count = 0
            for batch, counter in areas:
                if a <= batch <= b:
                    total.update(counter)
                    count += 1
            shown = ", ".join(f"{where} {kind} {v / max(1, count):.1f}" for (kind, where), v in sorted(total.items()))
            print(f"    {label}: {shown}")

    print("\n== goals (issue 21, point 4) ==")
    (l0, b0, b1), (ll, l1, l2) = ws[0], ws[-1]
    base, last = samples.window(b0, b1), samples.window(l1, l2)
    m0, m1 = _median(base, "latency"), _median(last, "latency")
    ratio = m1 / m0
    print(
        f"  latency, batches {ll} / {l0}: {m1:.3f}s / {m0:.3f}s = {ratio:.2f}  "
        f"(goal <= {GOALS['latency']}: {verdict(ratio <= GOALS['latency'])})"
    )
    d0, d1 = _median(base, "driver"), _median(last, "driver")
    if d0:
        print(
            f"    of which the driver's own steps (all but the Spark job of the chain): {d1:.3f}s / {d0:.3f}s = "
            f"{d1 / d0:.2f}; the chain's Spark job {_median(last, 'chain'):.3f}s / {_median(base, 'chain'):.3f}s"
        )
    p0, p1 = _median(base, "probe_cpu"), _median(last, "probe_cpu")
    s0, s1 = _median(base, "probe_fsync"), _median(last, "probe_fsync")
    if p0 and s0:
        print(
            f"    the machine (machine_probe, the same work each time): CPU loop {p1 * 1000:.0f} ms / {p0 * 1000:.0f} ms"
            f" = {p1 / p0:.2f}, 8 files fsynced {s1 * 1000:.1f} ms / {s0 * 1000:.1f} ms = {s1 / s0:.2f}"
        )
    half = n // 2
    f_half, f_end = samples.last_value("hoodie_files", half), samples.last_value("hoodie_files", n)
    factor, slack = GOALS["files"]
    if f_half is not None and f_end is not None:
        per_k = (f_end - f_half) / max(1, n - half) * 1000
        a_end = samples.last_value("archived", n) or 0
        print(
            f"  files in .hoodie/: {f_half:,.0f} at batch {half:,}, {f_end:,.0f} at the end ({a_end:,.0f} of them "
            f"archived; {per_k:+,.0f} per 1,000 batches)  (goal: bounded, end <= {factor}x half-way + {slack}: "
            f"{verdict(f_end <= factor * f_half + slack)})"
        )
    share, slack = GOALS["memory"]
    for key, name in MEMORY:
        if key == "jvm_heap":  # sampled every --gc-every batches: the points of each half
            points = [(int(r["batch"]), r[key]) for r in samples.rows if r.get(key) is not None]
            first = [p for p in points if b1 <= p[0] <= half] or points[:1]
            second = [p for p in points if p[0] > half] or points[-1:]
            if not first or not second:
                continue
            v_start = first[0][1]
            v_half, at_half = statistics.median(v for _b, v in first), statistics.median(b for b, _v in first)
            v_end, at_end = statistics.median(v for _b, v in second), statistics.median(b for b, _v in second)
        else:
            v_start = _median(base, key)
            v_half, at_half = _median(samples.window(max(1, half - 49), half + 50), key), half
            v_end, at_end = _median(last, key), (l1 + l2) / 2
        if v_half is None or v_end is None:
            continue
        per_k = (v_end - v_half) / max(1.0, at_end - at_half) * 1000
        print(
            f"  {name}: {v_start or 0:.0f} MB in the baseline, {v_half:.0f} MB half-way, {v_end:.0f} MB at the end, "
            f"{per_k:+.1f} MB per 1,000 batches in the second half  (goal: flat, <= {share:.0%} + {slack} MB per "
            f"1,000 batches: {verdict(per_k <= share * v_half + slack)})"
        )
    objs = [(int(r["batch"]), int(r["py_objects"])) for r in samples.rows if r.get("py_objects") is not None]
    if objs:
        shown = ", ".join(f"{b:,}: {o:,}" for b, o in objs[:: max(1, len(objs) // 8)] + [objs[-1]])
        print(f"  Python objects tracked after gc.collect() (batch: objects): {shown}")
    points = sorted(b for b in object_types if b >= baseline(n)[1]) or sorted(object_types)
    if len(points) > 1:
        a, b = points[0], points[-1]
        grown = (object_types[b] - object_types[a]).most_common(8)
        if grown:
            shown = ", ".join(f"{name} +{count:,}" for name, count in grown)
            print(f"  the types that grew most from batch {a:,} to {b:,}: {shown}")
    if s3:
        q0, q1 = _mean(base, "requests"), _mean(last, "requests")
        ratio = q1 / q0 if q0 else float("inf")
        print(
            f"  S3 requests per batch, {ll} / {l0}: {q1:.1f} / {q0:.1f} = {ratio:.2f}  "
            f"(goal: flat, <= {GOALS['requests']}: {verdict(ratio <= GOALS['requests'])})"
        )


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", type=int, default=10_000, help="micro-batches after the load")
    p.add_argument("--events", default="20-100", help="events per batch: MIN-MAX, drawn per batch")
    p.add_argument("--keys", type=int, default=20_000, help="the key space (all loaded by batch 0)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--seed", type=int, default=21)
    p.add_argument("--location", choices=("local", "s3"), default="local")
    p.add_argument("--option", action="append", default=[], metavar="K=V", help="more sink options")
    p.add_argument("--progress", type=int, default=100, help="a progress line every N batches")
    p.add_argument("--files-every", type=int, default=10, help="count the files in .hoodie/ every N batches")
    p.add_argument("--gc-every", type=int, default=500, help="JVM heap after GC and Python objects every N batches")
    p.add_argument("--profile", default="", help="cProfile the sink's call at these batches (comma-separated)")
    p.add_argument("--profile-top", type=int, default=40, help="functions shown per profile")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--workdir", default=None, help="where the table, samples.csv and profiles go (kept)")
    p.add_argument("--resume", action="store_true", help="continue the run of --workdir after its last batch")
    p.add_argument("--report", action="store_true", help="print the summary of --workdir's samples.csv (no run)")
    a = p.parse_args(argv)
    lo, _, hi = a.events.partition("-")
    a.events = [int(lo), int(hi or lo)]
    a.profile = sorted({int(x) for x in a.profile.split(",") if x.strip()})
    if (a.resume or a.report) and not a.workdir:
        p.error("--resume and --report need --workdir")
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.report:  # a run's figures so far (it may still be running)
        samples = Samples(os.path.join(args.workdir, "samples.csv"), resume=True, read_only=True)
        if samples.rows:
            summarize(samples, args, [], {})
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
