"""Streaming write benchmark: HoodieStreamSink against the Spark floor, Apache Hudi's own Structured Streaming sink,
delta-spark's MERGE in foreachBatch and delta-rs `merge`, per CDC micro-batch.

Setup (local[2], 2 shuffle partitions): a non-partitioned table keyed by `id` (precombine `ts`, 8 trips-like
columns, about 100 bytes a record), grown in `--build-chunk` batches of new keys through the sink itself (the same
sink instance, upsert: a second sink on the table would be a second writer racing its table services) and, for
delta-rs, the same chunks appended with `write_deltalake`. At each table size of `--sizes` (default 1M then 6M
rows) `--batches` CDC micro-batches of `--batch-rows` events (70% updates of live keys, 5% deletes of live keys as
`_hoodie_is_deleted=true`, 25% inserts of new keys, shuffled; keys unique in a batch) are written to parquet (two
files a batch, so Spark reads them in two tasks) and each batch is applied by:

- sink:  `sink(spark.read.parquet(batch), batch_id)`, the call foreachBatch makes (no streaming query: the sink is
         called directly, so the figures hold nothing but the micro-batch itself); one delta commit per batch;
- floor: the same DataFrame through the sink's shape with nothing computed and nothing written: mapInArrow
         pass-through, shuffle by pmod(xxhash64(id), 128), mapInArrow adding a bucket id, shuffle by bucket id,
         mapInArrow counting rows, collect;
- delta: `pyarrow.parquet.read_table(batch)` then delta-rs `merge` on `id` into a Delta table holding the same
         rows (matched & deleted -> delete, matched -> update all, not matched & not deleted -> insert all).
Every system writes the codec of the sink's base files (`hoodie.parquet.compression.codec`, gzip by default).

Initial load (first, at each of `--initial-sizes`, default 1M and 6M rows): the rows as one micro-batch into an
empty table, with the sink's default options (the first micro-batch of a table is bulk inserted), against
- floor: the same read, one shuffle (by pmod(xxhash64(id), 128), 2 partitions) and a Spark parquet write of the
         same rows with the codec of the sink's base files (`hoodie.parquet.compression.codec`, gzip by default);
- delta: `write_deltalake` of `pyarrow.parquet.read_table(batch)` into an empty path, the same codec;
- hudi: Apache Hudi 0.15.0's `bulk_insert` (its defaults: row writer, no sort) of the same rows, the same codec;
- delta_spark: delta-spark's `df.write.format("delta")` of the same rows, the same codec.
Goals: sink speed >= 0.8x the floor's, sink latency <= Hudi bulk_insert's. `--initial-runs` repeats each size, the
order of the systems alternating from run to run.

Batches are interleaved (sink, floor, delta for batch k, then k+1), each system gets `--warmup` unmeasured batches
first at every size. Latency per batch: median and p99 (nearest rank: with 10 batches it is the slowest one);
records/s = batch events / median latency. Ratios are computed in the same run, for sink_c (the default options)
and for sink (no compaction) beside it: speed against the floor = floor latency / sink latency (goals >= 0.8
without compaction, >= 0.65 with), against a peer = its latency / the sink's (goals >= 3 for hudi, >= 1 for
hudi_bucket, delta_spark and delta). Where the time goes: every Spark
stage's wall time (from Spark's status store, no UI needed) and the sink's driver-side time (latency minus the span
of its Spark stages). `--profile` adds a cProfile of the sink's three mapInArrow functions over extra batches
(Spark's `spark.sql.pyspark.udf.profiler=perf`); with `--initial-only`, of its functions over one more initial load.

- sink_c: the sink with the default asynchronous compaction, on a second table given exactly the same batches in
         the same order, replayed after the other systems (so its compaction never disturbs them); its measured
         batches run back to back (`--trigger` N starts them every N seconds, as a ProcessingTime trigger). It is
         what a user with default options gets; the summary compares its p99 with the sink's (goal: at most 1.5x).

- delta_spark: delta-spark 4.4.0's `MERGE` in `foreachBatch` of a streaming query (benchmarks/spark_peer.py, a process
         of its own on this project's pyspark), each batch's directory moved into the directory the query reads,
         timed until its micro-batch is done; it replays the same batches alone after the other systems (an idle
         streaming query lists its source every 10 ms, which beside the sink slowed the sink by a third).
- hudi, hudi_bucket: Apache Hudi 0.15.0's own Structured Streaming sink (`writeStream.format("hudi")`, MERGE_ON_READ
         upsert; benchmarks/spark_peer.py, a process of its own on .venv-hudi's pyspark 3.5) with its defaults (SIMPLE
         index, async compaction), and with the BUCKET index (`--hudi-buckets`); each replays the same batches alone
         after the other systems, as sink_c does. The summary gives the sink's speed against them.

- cdc_before_after, cdc_before, cdc_op_key: the sink on a table of its own created with `hoodie.table.cdc.enabled`
         in each supplemental logging mode (DATA_BEFORE_AFTER, DATA_BEFORE, OP_KEY_ONLY), built with the same chunks
         and given the same batches, interleaved with `sink` (the order of the systems rotating from batch to batch).
         In DATA_BEFORE_AFTER every log file gets a `.cdc` file of its changes, which costs a read of the file
         group's records before the batch; the other two modes write nothing more. The summary gives each mode's
         latency against the sink's (its write overhead per CDC batch).

- sink_v6, sink_v8, sink_v9 (`--table-version 6,8,9`: `sink` in --systems becomes one system per version): the
         sink on a table of its own written at that table version (`hoodie.write.table.version`), built with the same
         chunks and given the same batches, interleaved (the order rotating from batch to batch); their initial
         loads beside the sink's. Version 6 names a log file by its slice's base instant, 8 and 9 write one log file
         per delta commit, named by it, and a timeline of layout 2. `sink_c` becomes sink_c_v6, ... (replayed one
         after the other, each on a table of its own, as sink_c) and `hudi12` becomes hudi12_v6, ...: Apache Hudi
         1.2.0's Structured Streaming sink (its defaults, as `hudi`; .venv-hudi's pyspark 3.5, jars of
         .venv-hudi/jars/hudi-1.2.0) writing that version, replayed as the other peers. The summary gives each
         version's speed against the floor, its latency against version 6's, and Hudi 1.2.0's latency against the
         sink's at the same version.
- `--read-runs N`: at the end, the snapshot read of every Hudi table written (the sinks', sink_c's, Hudi's peers')
         by `HoodieTable(path).read()` and hudi-rs, N times each, the order alternating, with each table's file
         slices and log files; the summary gives each version's read time against version 6's.

Table services (for `sink`): compaction scheduling is off unless `--compaction` (then the sink's defaults: a plan every 5 delta
commits, executed asynchronously on the same two cores); cleaning runs with its defaults.

Run: python benchmarks/stream_bench.py                     # 1M and 6M rows, 10 batches of 100k at each
     python benchmarks/stream_bench.py --quick             # 200k and 1M rows, 4 batches: under ~3 minutes
     python benchmarks/stream_bench.py --initial-only --initial-runs 3   # the initial load alone, 3 times
     python benchmarks/stream_bench.py --initial-only --initial-sizes 1000000 --systems sink,floor --profile 1
     python benchmarks/stream_bench.py --sizes 6000000 --batches 20 --systems sink,delta
     python benchmarks/stream_bench.py --systems sink,floor,sink_c,hudi12 --table-version 6,8,9 --read-runs 3
Needs: bash scripts/setup-bench-peers.sh (delta-rs, delta-spark and its jars, Apache Hudi 0.15.0) for the peers;
`--systems sink,floor` runs without them.
"""

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common import WorkerRss, spark_session, write_batch

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
KEY_GROUPS = 128
FLOOR_BUCKETS = 16
STAGES = {"sink": ("read+key-by", "bucket-assign", "write"), "floor": ("read+pass", "pass+bucket", "pass+count")}


# -- data --------------------------------------------------------------------------------------------------
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
        live = np.flatnonzero(self.live)
        picked = self.rng.choice(live, n_upd + n_del, replace=False)
        upd, dele = picked[:n_upd], picked[n_upd:]
        ins = self._grow(n_ins)
        self.live[dele] = False
        t = pa.concat_tables(
            [rows(upd, self.ts, self.rng), rows(dele, self.ts, self.rng, deleted=True), rows(ins, self.ts, self.rng)]
        )
        t = t.take(pa.array(self.rng.permutation(n)))
        return t, {"updates": n_upd, "deletes": n_del, "inserts": n_ins}

    @property
    def live_rows(self):
        return int(self.live.sum())


# -- spark stages ------------------------------------------------------------------------------------------
def stage_walls(spark, group):
    """[(stage id, wall ms, task ms)] of the completed stages of a job group, in stage order."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    store = sc._jsc.sc().statusStore()
    out = []
    for job in sorted(tracker.getJobIdsForGroup(group)):
        info = tracker.getJobInfo(job)
        if info is None:
            continue
        for sid in sorted(info.stageIds):
            try:
                s = store.lastStageAttempt(sid)
            except Exception:  # a stage never submitted (skipped)
                continue
            sub, done = s.submissionTime(), s.completionTime()
            if not (sub.isDefined() and done.isDefined()):
                continue
            out.append((sid, sub.get().getTime(), done.get().getTime(), s.executorRunTime()))
    return out


class Timed:
    """Run `fn` under a fresh Spark job group; wall time and per-stage times."""

    def __init__(self, spark):
        self.spark = spark
        self.n = 0

    def __call__(self, fn):
        self.n += 1
        group = f"bench-{self.n}"
        sc = self.spark.sparkContext
        sc.setJobGroup(group, group)
        t0 = time.perf_counter()
        try:
            fn()
        finally:
            elapsed = time.perf_counter() - t0
            sc.setLocalProperty("spark.jobGroup.id", None)
        stages = stage_walls(self.spark, group)
        span = (max(s[2] for s in stages) - min(s[1] for s in stages)) / 1000 if stages else 0.0
        return elapsed, [(s[2] - s[1]) / 1000 for s in stages], span


def read(spark, directory):
    """The batch as Spark reads it (schema given, as a streaming file source has it: no inference job)."""
    return spark.read.schema(DDL).parquet(directory)


# -- the floor ---------------------------------------------------------------------------------------------
class PassThrough:
    def __call__(self, batches):
        yield from batches


class AddBucket:
    def __call__(self, batches):
        for b in batches:
            bucket = pa.array((b.column(0).to_numpy(zero_copy_only=False) % FLOOR_BUCKETS).astype(np.int32))
            yield pa.RecordBatch.from_arrays(b.columns + [bucket], names=b.schema.names + ["__bucket"])


class CountRows:
    def __call__(self, batches):
        n = 0
        for b in batches:
            n += b.num_rows
        yield pa.record_batch([pa.array([n], pa.int64())], names=["n"])


def floor(df):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    keyed = df.mapInArrow(PassThrough(), df.schema)
    keyed = keyed.withColumn("__kg", F.pmod(F.xxhash64(F.col("id")), F.lit(KEY_GROUPS)).cast("int"))
    bucket_schema = T.StructType(keyed.schema.fields + [T.StructField("__bucket", T.IntegerType())])
    routed = keyed.repartition(2, "__kg").mapInArrow(AddBucket(), bucket_schema)
    out = routed.repartition(2, "__bucket").mapInArrow(CountRows(), "n long")
    return sum(r["n"] for r in out.collect())


def floor_load(df, out, codec):
    """The initial load's floor: the read, one shuffle, a parquet write of the same rows (Spark's writer)."""
    from pyspark.sql import functions as F

    shuffled = df.repartition(2, F.pmod(F.xxhash64(F.col("id")), F.lit(KEY_GROUPS)))
    shuffled.write.mode("overwrite").option("compression", codec).parquet(out)


# -- delta-rs ----------------------------------------------------------------------------------------------
def delta_rs_writer(codec):
    """delta-rs's writer properties for a Hudi parquet codec name (the sink's)."""
    from deltalake import WriterProperties

    return WriterProperties(compression=codec.upper())


def delta_merge(path, batch_dir, codec):
    from deltalake import DeltaTable

    source = pq.read_table(batch_dir)
    (
        DeltaTable(path)
        .merge(
            source=source,
            predicate="t.id = s.id",
            source_alias="s",
            target_alias="t",
            writer_properties=delta_rs_writer(codec),
        )
        .when_matched_delete(predicate="s._hoodie_is_deleted")
        .when_matched_update_all()
        .when_not_matched_insert_all(predicate="NOT s._hoodie_is_deleted")
        .execute()
    )


# -- figures -----------------------------------------------------------------------------------------------
SINK_C = "sink_c"  # the sink with async compaction
TABLE_VERSIONS = (6, 8, 9)  # the table versions the sink writes (hoodie.write.table.version)
VERSIONED = ("sink", SINK_C, "hudi12")  # systems that --table-version turns into one system per version


def version_of(system, kind):
    """The table version of a versioned system of `kind` ("sink", "sink_c", "hudi12"): `sink_v8` -> 8 for "sink";
    None for any other system."""
    prefix = f"{kind}_v"
    if system.startswith(prefix) and system[len(prefix) :].isdigit():
        return int(system[len(prefix) :])
    return None


def expand_versions(systems, versions):
    """--systems with --table-version: each of `VERSIONED` becomes one system per version (`sink` -> `sink_v6`,
    `sink_v8`, ...), in place; the others stay."""
    out = []
    for system in systems:
        out += [f"{system}_v{v}" for v in versions] if versions and system in VERSIONED else [system]
    return out


CDC_SYSTEMS = {  # the sink on a table with CDC enabled in each supplemental logging mode
    "cdc_before_after": "DATA_BEFORE_AFTER",
    "cdc_before": "DATA_BEFORE",
    "cdc_op_key": "OP_KEY_ONLY",
}


def p99(values):
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(np.ceil(0.99 * len(s))) - 1))]


def summarize(lat):
    return statistics.median(lat), p99(lat)


def fmt_s(x):
    return f"{x:7.3f}s"


class Results:
    def __init__(self):
        self.by_size = {}  # size -> system -> {"lat": [], "stages": [], "span": []}

    def add(self, size, system, elapsed, stages, span):
        rec = self.by_size.setdefault(size, {}).setdefault(system, {"lat": [], "stages": [], "span": []})
        rec["lat"].append(elapsed)
        rec["stages"].append(stages)
        rec["span"].append(span)


def print_size(size, res, batch_rows):
    print(
        f"\n== table of {size:,} rows, batches of {batch_rows:,} events ({len(next(iter(res.values()))['lat'])} "
        f"measured batches) =="
    )
    print(f"{'system':<11} {'median':>9} {'p99':>9} {'records/s':>11}   per-batch latencies (s)")
    for system, rec in res.items():
        med, hi = summarize(rec["lat"])
        lats = " ".join(f"{x:.2f}" for x in rec["lat"])
        print(f"{system:<11} {fmt_s(med)} {fmt_s(hi)} {batch_rows / med:11,.0f}   {lats}")
    for system in [s for s in res if s in ("sink", "floor") or version_of(s, "sink")]:
        rec = res.get(system)
        if not rec or not rec["stages"]:
            continue
        widths = {len(s) for s in rec["stages"]}
        if len(widths) != 1:
            print(f"  {system}: stage counts vary per batch {sorted(widths)}; per-stage breakdown skipped")
            continue
        k = widths.pop()
        names = STAGES.get(system, STAGES["sink"]) if k == 3 else [f"stage{i}" for i in range(k)]
        parts = [f"{n} {statistics.median([s[i] for s in rec['stages']]):.3f}s" for i, n in enumerate(names)]
        driver = statistics.median([lat - span for lat, span in zip(rec["lat"], rec["span"])])
        print(
            f"  {system} median stage walls: " + ", ".join(parts) + f"; driver-side (latency - Spark span) "
            f"{driver:.3f}s"
        )


def ratios(res):
    """{name: (value, goal)} (issue 23's goals): speed against the floor (>= 0.8 without compaction, >= 0.65 with
    the default async compaction: sink_c back to back with `--trigger 0`) and against each peer (its latency / the
    sink's: >= 3 for Apache Hudi's streaming sink with its defaults, >= 1 for its bucket index, delta-spark and
    delta-rs)."""
    out = {}
    for system, label, floor_goal in ((SINK_C, "default options", 0.65), ("sink", "no compaction", 0.8)):
        if system not in res:
            continue
        sink = statistics.median(res[system]["lat"])
        if "floor" in res:
            out[f"{system} ({label}) / floor speed"] = (statistics.median(res["floor"]["lat"]) / sink, floor_goal)
        for peer, goal in (("hudi", 3.0), ("hudi_bucket", 1.0), (DELTA_SPARK, 1.0), ("delta", 1.0)):
            if peer in res:
                out[f"{system} ({label}) vs {peer} ({peer} latency / sink latency)"] = (
                    statistics.median(res[peer]["lat"]) / sink,
                    goal,
                )
    return out


def version_ratios(res):
    """[(name, value)] of the table versions at one size: each version's speed against the floor (floor latency /
    its latency), its latency against version 6's (same kind: sink_v8 / sink_v6, sink_c_v8 / sink_c_v6), the p99
    with async compaction against without, and Apache Hudi 1.2.0's latency at a version against the sink's."""
    out = []
    med = {system: statistics.median(rec["lat"]) for system, rec in res.items()}
    for kind in ("sink", SINK_C):
        for system in [s for s in res if version_of(s, kind)]:
            if "floor" in med:
                out.append(
                    (f"{system} speed / floor speed (floor latency / {system} latency)", med["floor"] / med[system])
                )
            base = f"{kind}_v6"
            if system != base and base in med:
                out.append((f"{system} latency / {base} latency", med[system] / med[base]))
    for system in [s for s in res if version_of(s, SINK_C)]:
        plain = f"sink_v{version_of(system, SINK_C)}"
        if plain in res:
            out.append((f"{system} p99 / {plain} p99", p99(res[system]["lat"]) / p99(res[plain]["lat"])))
    for system in [s for s in res if version_of(s, "hudi12")]:
        v = version_of(system, "hudi12")
        for sink in (f"sink_c_v{v}", f"sink_v{v}"):
            if sink in med:
                out.append((f"{system} latency / {sink} latency", med[system] / med[sink]))
        if system != "hudi12_v6" and "hudi12_v6" in med:
            out.append((f"{system} latency / hudi12_v6 latency", med[system] / med["hudi12_v6"]))
        if "hudi" in med:
            out.append((f"{system} latency / hudi (0.15.0) latency", med[system] / med["hudi"]))
    return out


def read_bench(tables, runs, expected):
    """The snapshot read of each table of `tables` [(system, path)] as it stands at the end: `HoodieTable(path).read()`
    (all columns) and hudi-rs's `HudiTableBuilder.from_base_uri(path).build().read(HudiReadOptions())`, each timed
    from opening the table to the last row, `runs` times, the order of the tables reversed and of the two readers
    swapped from run to run. A reader that fails on a table is reported and left out of it.
    {system: {"version", "slices", "logs", "max_logs", "seconds": {reader: [s]}, "rows": {reader: n}, "error": {}}}."""
    from hudi import HudiReadOptions, HudiTableBuilder

    from hoodie_stream.format.hoodie_table import HoodieTable

    def hoodie_stream_read(path):
        return HoodieTable(path).read().num_rows

    def hudi_rs_read(path):
        return sum(b.num_rows for b in HudiTableBuilder.from_base_uri(path).build().read(HudiReadOptions()))

    readers = (("hoodie_stream", hoodie_stream_read), ("hudi-rs", hudi_rs_read))
    out = {}
    for system, path in tables:
        table = HoodieTable(path)
        slices = table.file_slices()
        logs = slices.column("log_files").to_pylist()
        out[system] = {
            "version": int(table.config.props.get("hoodie.table.version", 0)),
            "slices": len(logs),
            "logs": sum(logs),
            "max_logs": max(logs, default=0),
            "seconds": {name: [] for name, _ in readers},
            "rows": {},
            "error": {},
        }
    print(f"\n== snapshot reads of the tables written ({runs} run{'s' if runs > 1 else ''}, order alternating) ==")
    for r in range(runs):
        for i, (system, path) in enumerate(tables if r % 2 == 0 else tables[::-1]):
            rec = out[system]
            for name, fn in readers if (r + i) % 2 == 0 else readers[::-1]:
                if name in rec["error"]:
                    continue
                t0 = time.perf_counter()
                try:
                    n = fn(path)
                except Exception as err:  # noqa: BLE001  (reported, the other reads go on)
                    rec["error"][name] = f"{type(err).__name__}: {str(err)[:400]}"
                    print(f"  {system}: {name} failed: {rec['error'][name]}")
                    continue
                rec["seconds"][name].append(time.perf_counter() - t0)
                rec["rows"][name] = n
    print(
        f"{'table':<13} {'version':>7} {'slices':>6} {'log files':>9} {'max/slice':>9}   "
        f"{'HoodieTable.read':>16} {'hudi-rs':>9}  hudi-rs / HoodieTable"
    )
    for system, rec in out.items():
        t = {name: statistics.median(v) if v else None for name, v in rec["seconds"].items()}
        ours, rs = t["hoodie_stream"], t["hudi-rs"]
        print(
            f"{system:<13} {rec['version']:>7} {rec['slices']:>6} {rec['logs']:>9} {rec['max_logs']:>9}   "
            f"{(fmt_s(ours) if ours else 'failed'):>16} {(fmt_s(rs) if rs else 'failed'):>9}  "
            f"{(f'{rs / ours:.2f}' if ours and rs else '-')}"
        )
        for name, n in rec["rows"].items():
            if n != expected:
                print(f"  WARNING: {name} read {n:,} rows of {system}'s table, expected {expected:,}")
    return out


def read_ratios(reads):
    """[(name, value)] of the snapshot reads: each table's read time against the table of the same kind at version 6
    (sink_v8 / sink_v6, sink_c_v9 / sink_c_v6, hudi12_v9 / hudi12_v6), per reader; hudi-rs's time / HoodieTable's."""
    out = []
    med = {
        system: {name: statistics.median(v) for name, v in rec["seconds"].items() if v} for system, rec in reads.items()
    }
    for system, t in med.items():
        for kind in ("sink", SINK_C, "hudi12"):
            base = f"{kind}_v6"
            if version_of(system, kind) and system != base and base in med:
                for name in t:
                    if name in med[base]:
                        out.append((f"{name} read of {system} / of {base}", t[name] / med[base][name]))
        if len(t) == 2:
            out.append((f"{system}: hudi-rs time / HoodieTable.read time", t["hudi-rs"] / t["hoodie_stream"]))
    return out


@contextlib.contextmanager
def profiled(spark, what):
    """The sink's mapInArrow functions under cProfile (Spark's UDF profiler) inside; their profile printed after."""
    spark.conf.set("spark.sql.pyspark.udf.profiler", "perf")
    try:
        yield
    finally:
        spark.conf.unset("spark.sql.pyspark.udf.profiler")
    print_profile(spark, what=what)
    spark.profile.clear()


def print_profile(spark, what, top=14):
    import pstats

    results = spark.profile.profiler_collector._perf_profile_results
    for udf_id, stats in sorted(results.items(), key=lambda kv: str(kv[0])):
        print(f"\n-- cProfile of mapInArrow UDF {udf_id} ({what}, both tasks), top {top} by own time --")
        stats.sort_stats(pstats.SortKey.TIME).print_stats(top)
        stats.print_callers(r"compute\.py:\d+\(wrapper\)|\(read\)$")


# -- main --------------------------------------------------------------------------------------------------
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1000000,6000000", help="table sizes (rows) to measure at, ascending")
    p.add_argument("--batches", type=int, default=10, help="measured CDC batches per size")
    p.add_argument("--batch-rows", type=int, default=100_000, help="events per CDC batch")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured batches per size and system")
    p.add_argument("--build-chunk", type=int, default=1_000_000, help="rows per insert batch while building")
    p.add_argument("--systems", default="sink,floor,delta,sink_c")
    p.add_argument(
        "--trigger",
        type=float,
        default=0.0,
        help="sink_c: seconds from one measured batch's start to the next (0: back to back, the default)",
    )
    p.add_argument("--compaction", action="store_true", help="let the sink schedule + run async compaction")
    p.add_argument(
        "--table-version",
        default="",
        help="table versions to write (e.g. 6,8,9): sink, sink_c and hudi12 in --systems become one system per "
        "version (sink_v6, sink_v8, ...; hudi12_v9: Apache Hudi 1.2.0's streaming sink writing version 9)",
    )
    p.add_argument(
        "--read-runs",
        type=int,
        default=0,
        metavar="N",
        help="at the end, N snapshot reads of every Hudi table written (HoodieTable.read and hudi-rs, alternating)",
    )
    p.add_argument("--option", action="append", default=[], metavar="K=V", help="more sink options")
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="after the measurements, cProfile the sink's mapInArrow functions over N more batches (with "
        "--initial-only: over one more initial load of each size)",
    )
    p.add_argument("--verify", action="store_true", help="check the row count of both tables at the end")
    p.add_argument("--initial-sizes", default="1000000,6000000", help="rows of the initial loads (empty: none)")
    p.add_argument("--initial-runs", type=int, default=1, help="initial loads per size and system")
    p.add_argument("--initial-only", action="store_true", help="measure the initial loads only")
    p.add_argument("--quick", action="store_true", help="200k and 1M rows, 4 batches (under ~3 minutes)")
    p.add_argument("--driver-memory", default="4g", help="each Spark driver's heap: this project's and Hudi's")
    p.add_argument(
        "--hudi-buckets", type=int, default=4, help="hudi_bucket: hoodie.bucket.index.num.buckets (Flink's default)"
    )
    p.add_argument("--workdir", default=None, help="where tables and batches go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    a = p.parse_args(argv)
    if a.quick:
        a.sizes, a.batches, a.build_chunk, a.verify = "200000,1000000", 4, 800_000, True
        a.initial_sizes = "200000,1000000"
    a.sizes = [int(float(s)) for s in a.sizes.split(",")]
    a.initial_sizes = [int(float(s)) for s in a.initial_sizes.split(",") if s.strip()]
    a.table_version = [int(v) for v in a.table_version.split(",") if v.strip()]
    bad = [v for v in a.table_version if v not in TABLE_VERSIONS]
    if bad:
        p.error(f"--table-version {bad}: the sink writes {TABLE_VERSIONS}")
    a.systems = expand_versions([s.strip() for s in a.systems.split(",") if s.strip()], a.table_version)
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from hoodie_stream.streaming_sink.sink import HoodieStreamSink

    work = args.workdir or tempfile.mkdtemp(prefix="stream-bench-")
    os.makedirs(work, exist_ok=True)
    hudi_path, delta_path = os.path.join(work, "hudi"), os.path.join(work, "delta")
    systems = args.systems
    if "delta" in systems:
        from deltalake import write_deltalake
    print(
        f"stream_bench: local[2], {os.cpu_count()} cores; sizes {args.sizes}; {args.batches} batches of "
        f"{args.batch_rows:,} events (+{args.warmup} warm-up) per size; systems {systems}; work dir {work}"
    )
    t_start = time.perf_counter()
    spark = spark_session(args.driver_memory)
    rss = WorkerRss()
    rss.start()
    options = {
        "hoodie.table.name": "bench",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
    }
    if not args.compaction:
        options["compaction.schedule.enabled"] = "false"
    options.update(kv.split("=", 1) for kv in args.option)
    from hoodie_stream.options import parse_options

    codec = parse_options("bench", options).parquet_codec  # every system writes the sink's codec
    sink = HoodieStreamSink(hudi_path, options)  # one writer: it also builds the table (upserts of new keys)
    cdc_sinks = {  # the sinks on tables of their own: CDC enabled in a logging mode, or a table version
        system: HoodieStreamSink(
            os.path.join(work, system),
            {**options, "hoodie.table.cdc.enabled": "true", "hoodie.table.cdc.supplemental.logging.mode": mode},
        )
        for system, mode in CDC_SYSTEMS.items()
        if system in systems
    }
    for system in systems:
        if version_of(system, "sink"):
            version = {"hoodie.write.table.version": str(version_of(system, "sink"))}
            cdc_sinks[system] = HoodieStreamSink(os.path.join(work, system), {**options, **version})
    cdc_ids = dict.fromkeys(cdc_sinks, 0)  # each side sink's next batch id
    timed = Timed(spark)
    work_load = Workload()
    results = Results()
    initial = {}  # size -> system -> [latencies]
    batch_id = 0
    batch_no = 0
    history = []  # (size, batch dir, measured, mix) in the order applied: replayed by sink_c
    reads = {}  # table system -> read figures (--read-runs)
    try:
        if args.initial_sizes:
            load_options = {k: v for k, v in options.items() if not k.startswith("compaction.")}
            initial = initial_loads(
                spark,
                timed,
                work,
                args.initial_sizes,
                args.initial_runs,
                systems,
                load_options,
                args.driver_memory,
                profile=bool(args.profile) and args.initial_only,
            )
        for size in [] if args.initial_only else args.sizes:
            # grow the tables to `size` live rows
            while work_load.live_rows < size:
                n = min(args.build_chunk, size - work_load.live_rows)
                chunk = work_load.inserts(n)
                d = write_batch(chunk, os.path.join(work, "build", f"{work_load.next_id}"), files=2)
                if "sink" in systems:
                    el, _, _ = timed(lambda: sink(read(spark, d), batch_id))
                    batch_id += 1
                    print(f"  build: sink inserted {n:,} rows in {el:.1f}s ({n / el:,.0f} rows/s)")
                for system, cdc_sink in cdc_sinks.items():
                    el, _, _ = timed(lambda cdc_sink=cdc_sink, system=system: cdc_sink(read(spark, d), cdc_ids[system]))
                    cdc_ids[system] += 1
                    print(f"  build: {system} inserted {n:,} rows in {el:.1f}s")
                if "delta" in systems:
                    t0 = time.perf_counter()
                    write_deltalake(
                        delta_path, pq.read_table(d), mode="append", writer_properties=delta_rs_writer(codec)
                    )
                    el = time.perf_counter() - t0
                    print(f"  build: delta-rs appended {n:,} rows in {el:.1f}s ({n / el:,.0f} rows/s)")
                history.append((size, d, False, None))
            for k in range(args.warmup + args.batches):
                table, mix = work_load.cdc(args.batch_rows)
                batch_no += 1
                d = write_batch(table, os.path.join(work, "batches", f"{batch_no:04d}"))
                measured = k >= args.warmup
                history.append((size, d, measured, mix))
                turn = k % len(systems)
                for system in systems[turn:] + systems[:turn]:  # the order rotates from batch to batch
                    if system == SINK_C or version_of(system, SINK_C) or system in PEERS:
                        continue  # replayed after the other systems (below)
                    if system == "sink":
                        el, stages, span = timed(lambda: sink(read(spark, d), batch_id))
                        batch_id += 1
                        r = sink.last_result
                        if r.num_writes != mix["updates"] + mix["inserts"] or r.num_deletes != mix["deletes"]:
                            print(f"  WARNING: sink wrote {r.num_writes} records and {r.num_deletes} deletes for {mix}")
                    elif system in cdc_sinks:
                        el, stages, span = timed(
                            lambda system=system: cdc_sinks[system](read(spark, d), cdc_ids[system])
                        )
                        cdc_ids[system] += 1
                        r = cdc_sinks[system].last_result
                        if r.num_writes != mix["updates"] + mix["inserts"] or r.num_deletes != mix["deletes"]:
                            print(
                                f"  WARNING: {system} wrote {r.num_writes} records and {r.num_deletes} deletes for {mix}"
                            )
                    elif system == "floor":
                        el, stages, span = timed(lambda: floor(read(spark, d)))
                    elif system == "delta":
                        t0 = time.perf_counter()
                        delta_merge(delta_path, d, codec)
                        el, stages, span = time.perf_counter() - t0, [], 0.0
                    else:
                        raise SystemExit(f"unknown system {system!r}")
                    if measured:
                        results.add(size, system, el, stages, span)
            if [s for s in systems if s != SINK_C and not version_of(s, SINK_C) and s not in PEERS]:
                print_size(size, results.by_size[size], args.batch_rows)
            print(
                f"  python workers: peak RSS {rss.peak_mb():.0f} MB (one process), "
                f"{rss.peak_total_mb():.0f} MB (all together) so far"
            )
        if args.profile and "sink" in systems and not args.initial_only:
            with profiled(spark, "sink batches"):
                for _ in range(args.profile):
                    table, _mix = work_load.cdc(args.batch_rows)
                    batch_no += 1
                    d = write_batch(table, os.path.join(work, "batches", f"{batch_no:04d}"))
                    sink(read(spark, d), batch_id)
                    batch_id += 1
                    if "delta" in systems:  # keep the Delta table in step for --verify
                        delta_merge(delta_path, d, codec)
        for system in [s for s in systems if (s == SINK_C or version_of(s, SINK_C)) and not args.initial_only]:
            version = version_of(system, SINK_C)
            replay_with_compaction(
                spark,
                timed,
                results,
                history,
                os.path.join(work, "hudi_c" if version is None else system),
                {**options, **({"hoodie.write.table.version": str(version)} if version else {})},
                args.batch_rows,
                args.trigger,
                system,
            )
        for system in [s for s in systems if s in PEERS and not args.initial_only]:
            replay_with_peer(
                system,
                results,
                history,
                work,
                args.batch_rows,
                args.trigger,
                args.driver_memory,
                args.hudi_buckets,
                codec,
                work_load.live_rows if args.verify else None,
            )
        if args.verify and not args.initial_only:
            verify(
                hudi_path if "sink" in systems else None,
                delta_path if "delta" in systems else None,
                work_load.live_rows,
            )
            for system in [s for s in systems if s in cdc_sinks or version_of(s, SINK_C)]:
                verify(os.path.join(work, system), None, work_load.live_rows, system)
        if args.read_runs and not args.initial_only:
            tables = [("sink", hudi_path)] if "sink" in systems else []
            tables += [(s, os.path.join(work, s)) for s in systems if version_of(s, "sink") or version_of(s, SINK_C)]
            tables += [(SINK_C, os.path.join(work, "hudi_c"))] if SINK_C in systems else []
            tables += [(s, os.path.join(work, f"peer-{s}")) for s in systems if PEERS.get(s, ("",))[0] in HUDI_PEERS]
            reads = read_bench(tables, args.read_runs, work_load.live_rows)
    finally:
        for _size, d, _measured, _mix in history:
            shutil.rmtree(d, ignore_errors=True)
        rss.stop()
        sink.close()
        for cdc_sink in cdc_sinks.values():
            cdc_sink.close()
        spark.stop()
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

    print("\n== summary ==")
    if args.table_version and not args.initial_only:
        for size in args.sizes:
            for name, value in version_ratios(results.by_size[size]):
                print(f"  {size:>11,} rows: {name} = {value:.2f}")
    if args.read_runs and not args.initial_only:
        for name, value in read_ratios(reads):
            print(f"  snapshot read: {name} = {value:.2f}")
    for size, res in initial.items():
        for name, value, goal, met in initial_ratios(res):
            verdict = f"  (goal {goal}: {'met' if met else 'NOT met'})" if goal else ""
            print(f"  initial load of {size:>11,} rows: {name} = {value:.2f}{verdict}")
    for size in [] if args.initial_only else args.sizes:
        for name, (value, goal) in ratios(results.by_size[size]).items():
            verdict = "met" if value >= goal else "NOT met"
            print(f"  {size:>11,} rows: {name} = {value:.2f}  (goal >= {goal}: {verdict})")
    if SINK_C in systems and "sink" in systems and not args.initial_only:
        for size in args.sizes:
            with_c, without = p99(results.by_size[size][SINK_C]["lat"]), p99(results.by_size[size]["sink"]["lat"])
            verdict = "met" if with_c <= 1.5 * without else "NOT met"
            print(
                f"  {size:>11,} rows: sink p99 with async compaction / without = {with_c:.3f}s / {without:.3f}s "
                f"= {with_c / without:.2f}  (goal <= 1.5: {verdict})"
            )
    for system in [s for s in systems if s in CDC_SYSTEMS and "sink" in systems and not args.initial_only]:
        for size in args.sizes:
            res = results.by_size[size]
            med = statistics.median(res[system]["lat"]) / statistics.median(res["sink"]["lat"])
            tail = p99(res[system]["lat"]) / p99(res["sink"]["lat"])
            print(
                f"  {size:>11,} rows: {system} ({CDC_SYSTEMS[system]}) latency / sink latency: median {med:.2f}, "
                f"p99 {tail:.2f}"
            )
    if len(args.sizes) > 1 and not args.initial_only:
        first, last = args.sizes[0], args.sizes[-1]
        for system in [s for s in systems if s in results.by_size[first] and s in results.by_size[last]]:
            a = statistics.median(results.by_size[first][system]["lat"])
            b = statistics.median(results.by_size[last][system]["lat"])
            print(
                f"  {system}: median latency {a:.3f}s at {first:,} rows -> {b:.3f}s at {last:,} rows "
                f"(x{b / a:.2f} for x{last / first:.1f} the rows)"
            )
    print(f"  python workers: peak RSS {rss.peak_mb():.0f} MB (one process), {rss.peak_total_mb():.0f} MB (all)")
    print(f"  total run time {time.perf_counter() - t_start:.0f}s")
    return results


def initial_loads(spark, timed, work, sizes, runs, systems, options, driver_memory, profile=False):
    """Each size's rows as the first write into an empty table: sink, floor, delta-rs, Apache Hudi's bulk_insert
    and delta-spark's write in turn (the order reversed on every other run), `runs` times, after one unmeasured
    load of 100k rows by each (the Python workers start, the JVMs warm up); every system writes the sink's codec.
    The peers (hudi, delta_spark) run in processes of their own, started once for all loads (their JVMs stay up,
    idle, while the others load). `profile`: one more sink load of each size, its mapInArrow functions under
    cProfile, printed. {size: {system: [latencies]}}."""
    from hoodie_stream.options import parse_options
    from spark_peer import SparkPeer

    codec = parse_options("bench", options).parquet_codec  # the floor writes what the sink's base files hold
    order = [s for s in ("sink", "floor", "delta", "hudi", DELTA_SPARK) if s in systems]
    order[1:1] = [s for s in systems if version_of(s, "sink")]  # the sink at each table version, beside it
    peers = {}
    try:
        for system, peer_system in (("hudi", "hudi"), (DELTA_SPARK, "delta")):
            if system in order:
                peers[system] = SparkPeer(peer_system, driver_memory)
        warm = write_batch(Workload(seed=5).inserts(100_000), os.path.join(work, "initial", "warm-up"), files=2)
        for system in order:
            load_once(
                spark, timed, system, warm, os.path.join(work, "initial", f"warm-{system}"), options, codec, peers
            )
        shutil.rmtree(warm, ignore_errors=True)
        out = {}
        for size in sizes:
            d = write_batch(Workload(seed=11).inserts(size), os.path.join(work, "initial", str(size)), files=2)
            res = out[size] = {}
            for r in range(runs):
                for system in order if r % 2 == 0 else order[::-1]:  # alternating order
                    target = os.path.join(work, "initial", f"{system}-{size}-{r}")
                    el, info = load_once(spark, timed, system, d, target, options, codec, peers)
                    if info[0] is not None and info[0] != size:
                        print(f"  WARNING: the initial load wrote {info[0]:,} records of {size:,}")
                    detail = f" ({info[1]})" if info[1] else ""
                    print(f"  initial load {size:,} rows, run {r + 1}: {system} {el:.1f}s{detail}")
                    res.setdefault(system, []).append(el)
            if profile and "sink" in order:
                with profiled(spark, f"the initial load of {size:,} rows"):
                    target = os.path.join(work, "initial", f"sink-{size}-profiled")
                    el, _info = load_once(spark, timed, "sink", d, target, options, codec, peers)
                    print(f"  initial load {size:,} rows under cProfile: sink {el:.1f}s")
            shutil.rmtree(d, ignore_errors=True)
            print(f"\n== initial load of {size:,} rows ({runs} run{'s' if runs > 1 else ''}) ==")
            for system, lat in res.items():
                rate = size / statistics.median(lat)
                print(f"{system:<11} median {fmt_s(statistics.median(lat))}  {rate:11,.0f} rows/s")
            for name, value, goal, met in initial_ratios(res):
                verdict = f" (goal {goal}: {'met' if met else 'NOT met'})" if goal else ""
                print(f"  {name} = {value:.2f}{verdict}")
        return out
    finally:
        for peer in peers.values():
            peer.close()


def load_once(spark, timed, system, batch_dir, target, options, codec, peers):
    """One initial load of `batch_dir` into the empty `target` (removed afterwards): (seconds, (records, text))."""
    from hoodie_stream.streaming_sink.sink import HoodieStreamSink

    try:
        if system == "sink" or version_of(system, "sink"):
            version = version_of(system, "sink")
            sink = HoodieStreamSink(
                target, {**options, **({"hoodie.write.table.version": str(version)} if version else {})}
            )
            try:
                el, stages, _span = timed(lambda: sink(read(spark, batch_dir), 0))
            finally:
                sink.close()
            walls = ", ".join(f"{w:.1f}" for w in stages)
            return el, (sink.last_result.num_writes, f"{len(sink.last_result.stats)} files; stages {walls}s")
        if system == "floor":
            el, _stages, _span = timed(lambda: floor_load(read(spark, batch_dir), target, codec))
            return el, (None, codec)
        if system in ("hudi", DELTA_SPARK):
            # Hudi: bulk_insert (row writer, sort mode NONE: its defaults) of the sink's codec
            hudi = {**hudi_options("hudi", 0), "hoodie.parquet.compression.codec": codec} if system == "hudi" else {}
            el = peers[system].request("load", input=batch_dir, path=target, options=hudi, codec=codec)["seconds"]
            return el, (peers[system].request("count", path=target)["rows"], codec)
        from deltalake import write_deltalake

        t0 = time.perf_counter()
        write_deltalake(target, pq.read_table(batch_dir), writer_properties=delta_rs_writer(codec))
        return time.perf_counter() - t0, (None, codec)
    finally:
        shutil.rmtree(target, ignore_errors=True)


def initial_ratios(res):
    """[(name, value, goal text, met)] of an initial load's medians (goals: issue 23's; None: reported only)."""
    out = []
    if "sink" in res:
        sink = statistics.median(res["sink"])
        if "floor" in res:
            speed = statistics.median(res["floor"]) / sink
            out.append(("sink speed / floor speed", speed, ">= 0.8", speed >= 0.8))
        if "hudi" in res:
            times = sink / statistics.median(res["hudi"])
            out.append(("sink time / Hudi bulk_insert time", times, "<= 1.0", times <= 1.0))
        for system, name in (("delta", "delta-rs"), (DELTA_SPARK, "delta-spark")):
            if system in res:
                out.append((f"sink time / {name} time", sink / statistics.median(res[system]), None, None))
    for system in [s for s in res if version_of(s, "sink")]:  # --table-version: reported only
        t = statistics.median(res[system])
        if "floor" in res:
            out.append((f"{system} speed / floor speed", statistics.median(res["floor"]) / t, None, None))
        if system != "sink_v6" and "sink_v6" in res:
            out.append((f"{system} time / sink_v6 time", t / statistics.median(res["sink_v6"]), None, None))
    return out


def replay_with_compaction(spark, timed, results, history, path, options, batch_rows, trigger, system=SINK_C):
    """sink_c: a second table given exactly the same batches, in the same order, by a sink with the default
    asynchronous compaction (a plan every 5 delta commits); it runs alone, after the other systems, so neither
    disturbs the other's figures. Its measured batches are the same CDC batches the sink's figures come from.
    Batches start every `trigger` seconds (start to start, as Spark's ProcessingTime trigger: a batch that takes
    longer is followed at once); 0 runs them back to back. `system`: the name its figures go under (sink_c_v8: the
    options ask for table version 8)."""
    from hoodie_stream.streaming_sink.sink import HoodieStreamSink

    opts = {k: v for k, v in options.items() if not k.startswith("compaction.")}
    sink_c = HoodieStreamSink(path, opts)
    print(
        f"\n== {system}: the same {len(history)} batches into a second table, async compaction on, measured "
        f"batches started every {trigger:g}s =="
    )
    try:
        current = None
        next_start = time.monotonic()
        for batch_id, (size, d, measured, mix) in enumerate(history):
            if measured:
                time.sleep(max(0.0, next_start - time.monotonic()))
            next_start = time.monotonic() + trigger
            el, stages, span = timed(lambda: sink_c(read(spark, d), batch_id))
            if mix is None:
                print(f"  build: {system} inserted into a table of {size:,} rows in {el:.1f}s")
            if measured:
                results.add(size, system, el, stages, span)
            if size != current and current is not None:
                print_size(current, {system: results.by_size[current][system]}, batch_rows)
            current = size
        print_size(current, {system: results.by_size[current][system]}, batch_rows)
        services = sink_c.services
        from hoodie_stream.compaction.plan import pending_plans
        from hoodie_stream.format.timeline.active_timeline import Timeline

        print(
            f"  compactions completed while {system} ran: {services.completed_count}; plans still pending at the "
            f"end: {len(pending_plans(Timeline(path)))}; errors: {len(services.errors)}"
        )
    finally:
        sink_c.close(wait=True)  # its compaction would go on beside the peers replayed next


DELTA_SPARK = "delta_spark"  # delta-spark MERGE in foreachBatch, in a process of its own


HUDI_SYSTEMS = {  # Apache Hudi's own Structured Streaming sink, its defaults (SIMPLE index, async compaction)
    "hudi": {},
    "hudi_bucket": {"hoodie.index.type": "BUCKET"},  # + hoodie.bucket.index.num.buckets (--hudi-buckets)
}
PEERS = {  # system -> (benchmarks/spark_peer.py's system, its name)
    "hudi": ("hudi", "Apache Hudi 0.15.0"),
    "hudi_bucket": ("hudi", "Apache Hudi 0.15.0"),
    DELTA_SPARK: ("delta", "delta-spark 4.4.0"),
}
HUDI_PEERS = ("hudi", "hudi12")  # spark_peer.py's Hudi systems: 0.15.0 and 1.2.0
for _v in TABLE_VERSIONS:  # Apache Hudi 1.2.0's streaming sink, its defaults, writing table version _v
    HUDI_SYSTEMS[f"hudi12_v{_v}"] = {"hoodie.write.table.version": str(_v), "hoodie.write.auto.upgrade": "false"}
    PEERS[f"hudi12_v{_v}"] = ("hudi12", "Apache Hudi 1.2.0")


def hudi_options(system, buckets, partition_field=""):
    """Hudi's write options for the bench table (MERGE_ON_READ, upsert, keyed by id, ordered by ts;
    `_hoodie_is_deleted` rows delete), non-partitioned or partitioned by the values of `partition_field`, and the
    system's index (BUCKET: `buckets` per partition)."""
    keygen = "SimpleKeyGenerator" if partition_field else "NonpartitionedKeyGenerator"
    options = {
        "hoodie.table.name": "bench",
        "hoodie.datasource.write.table.type": "MERGE_ON_READ",
        "hoodie.datasource.write.operation": "upsert",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.partitionpath.field": partition_field,
        "hoodie.datasource.write.keygenerator.class": f"org.apache.hudi.keygen.{keygen}",
        **HUDI_SYSTEMS[system],
    }
    if system == "hudi_bucket":
        options["hoodie.bucket.index.num.buckets"] = str(buckets)
    return options


@contextlib.contextmanager
def peer_stream(system, work, driver_memory, buckets, codec, schema_from, load=None, partition_field=""):
    """A peer's process (benchmarks/spark_peer.py) with its streaming query started on its table at
    `work/peer-<system>` (Hudi's options from `hudi_options`, every base file in `codec`); yields (the peer, the
    table's path, the load's seconds). With `load` (a directory of Parquet rows), the rows are first written as the
    table by the peer's own load (Hudi: bulk_insert; delta-spark: a plain write), partitioned by `partition_field`
    when given. The query is stopped and the process closed after."""
    from spark_peer import SparkPeer

    peer_system = PEERS[system][0]
    path = os.path.join(work, f"peer-{system}")
    if peer_system in HUDI_PEERS:
        options = {**hudi_options(system, buckets, partition_field), "hoodie.parquet.compression.codec": codec}
    else:
        options = {}
    peer = SparkPeer(peer_system, driver_memory)
    try:
        loaded = None
        if load is not None:
            partition_by = [partition_field] if partition_field and peer_system not in HUDI_PEERS else []
            answer = peer.request(
                "load", input=load, path=path, options=options, codec=codec, partition_by=partition_by
            )
            loaded = answer["seconds"]
        peer.request(
            "start_stream",
            path=path,
            watch=os.path.join(work, f"peer-{system}-watch"),
            checkpoint=os.path.join(work, f"peer-{system}-chk"),
            schema_from=schema_from,
            options=options,
            codec=codec,
        )
        yield peer, path, loaded
        peer.request("stop_stream")
    finally:
        peer.close()


def replay_with_peer(system, results, history, work, batch_rows, trigger, driver_memory, buckets, codec, expected=None):
    """A peer's streaming query (benchmarks/spark_peer.py, a process of its own: Apache Hudi 0.15.0's Structured
    Streaming sink on pyspark 3.5, or delta-spark's MERGE in foreachBatch) given exactly the same batches in the
    same order, alone after the other systems as sink_c is (an idle streaming query lists its source directory
    every 10 ms: beside the others it would slow them): each batch directory moved into the directory the query
    reads, timed until the peer committed it. With `expected`, the peer's table is counted by its own reader at the
    end (not timed)."""
    label = f"{system} ({PEERS[system][1]})"
    print(f"\n== {label}: the same {len(history)} batches, measured batches started every {trigger:g}s ==")
    with peer_stream(system, work, driver_memory, buckets, codec, history[0][1]) as (peer, path, _loaded):
        current = None
        next_start = time.monotonic()
        for size, d, measured, mix in history:
            if measured:
                time.sleep(max(0.0, next_start - time.monotonic()))
            next_start = time.monotonic() + trigger
            el = peer.request("batch", input=d)["seconds"]
            if mix is None:
                print(f"  build: {system} inserted into a table of {size:,} rows in {el:.1f}s")
            if measured:
                results.add(size, system, el, [], el)
            if size != current and current is not None:
                print_size(current, {system: results.by_size[current][system]}, batch_rows)
            current = size
        print_size(current, {system: results.by_size[current][system]}, batch_rows)
        if expected is not None:
            n = peer.request("count", path=path)["rows"]
            print(
                f"  verify: {system} table has {n:,} rows, expected {expected:,}: {'ok' if n == expected else 'WRONG'}"
            )
        if PEERS[system][0] in HUDI_PEERS:
            c = peer.request("compactions", path=path)
            print(f"  compactions completed while {system} ran: {c['completed']}; pending at the end: {c['pending']}")


def verify(hudi_path, delta_path, expected, name="Hudi"):
    if delta_path:
        from deltalake import DeltaTable

        n = DeltaTable(delta_path).to_pyarrow_dataset().count_rows()
        print(f"  verify: delta-rs table has {n:,} rows, expected {expected:,}: {'ok' if n == expected else 'WRONG'}")
    if hudi_path:
        from hoodie_stream.format.hoodie_table import HoodieTable

        n = HoodieTable(hudi_path).read(columns=["id"]).num_rows
        print(f"  verify: {name} table has {n:,} rows, expected {expected:,}: {'ok' if n == expected else 'WRONG'}")


if __name__ == "__main__":
    main()
