"""Sustained streaming benchmark: CDC micro-batches back to back for minutes into this project's sink, with async
compaction and without, and into the peers of `stream_bench.py`: Apache Hudi 0.15.0's own Structured Streaming sink
and delta-spark's MERGE in foreachBatch.

Setup (local[2], 2 shuffle partitions): the table of `stream_bench.py` (keyed by `id`, precombine `ts`, 8
trips-like columns, ~100 bytes a record) plus a `region` column (`id % --partitions`, 8 by default) that partitions
it. `--rows` rows (default 6M) are written to parquet once; every system loads them as its own table first (not
part of the figures), then gets the same CDC batches in the same order. The systems (`--systems`, run one after
the other in the order given; stream_bench's names):

- sink_c:      the sink with its default options (async compaction, a plan every `compaction.delta_commits` = 5
               delta commits, cleaning); the rows loaded as its first micro-batch (a bulk insert);
- sink:        the same options with `compaction.schedule.enabled=false` (no plan is ever scheduled), on a copy of
               the table sink_c loaded;
- hudi:        Apache Hudi 0.15.0's own Structured Streaming sink (`writeStream.format("hudi")`, MERGE_ON_READ,
               upsert, partitioned by region) with its defaults (SIMPLE index, async compaction), on .venv-hudi's
               pyspark 3.5; the rows loaded by Hudi's bulk_insert;
- hudi_bucket: the same with the BUCKET index (`--hudi-buckets` buckets per partition, 4 by default), the rows
               bulk inserted into the buckets;
- delta_spark: delta-spark 4.4.0's MERGE on `id` in foreachBatch of a streaming query, the rows loaded by a plain
               Delta write partitioned by region.
A peer (benchmarks/spark_peer.py) runs in a process of its own with its own JVM, started for its run and closed
after it; every system writes the codec of the sink's base files (gzip by default).

The sink is called as foreachBatch does (`sink(df, batch_id)`, batch ids increasing, no streaming query, as
`stream_bench.py`); a peer's streaming query reads each batch directory moved into the directory it watches, and
the peer times the batch from that move to its micro-batch committed. Batches of `--batch-events` events (70%
updates of live keys, 5% deletes, 25% inserts, as `stream_bench.py`'s `Workload.cdc`) run back to back, no trigger
interval, until `--minutes` have passed (the batch running then finishes). A thread writes them to parquet two
batches ahead, so generating them is not in the figures.

Per run: events/s sustained (events written / wall time from the first batch's start to the last one's end);
batch latency median and p99 (nearest rank) of the sink's call or the peer's batch. For the sink: compaction plans
scheduled (`.compaction.requested` files) and completed (completed `commit` instants of operation COMPACT); the most
plans pending at once, sampled after every batch and, exactly, from the timeline files' modification times (layout
1 names an instant by its requested time only; the time a file was written gives the completion order); for each
completed plan the plan intervals it took (delta commits completed after the plan was written and before its
commit, divided by `compaction.delta_commits`), the worst printed; and, at the end, the log files per latest file
slice (mean, and max: the most-behind slice). For a Hudi peer: its compactions completed (seen in its timeline
after any batch) and pending at the end.

Summary: one line a system (batches, events/s, median, p99) and its ratios against each sink run X (X's events/s /
its events/s, its median / X's, its p99 / X's: above 1, X is ahead). Goals, with compaction against none: p99 ratio
<= 1.5, events/s ratio >= 0.75, every scheduled plan completes within 3 plan intervals (a plan still pending at the
end fails it when already older than that), never more than 2 plans pending (the larger of the two figures). The
exit status is 0 whatever the goals (it is a measurement), non-zero when a run fails: an error of the sink, a
crashed Python worker, a failed compaction, or a peer's failure (its error or its process ending), which is
printed as that peer's line of the summary while the other systems still run.

Run: python benchmarks/sustained_bench.py                  # 6M rows, 100k-event batches, 10 minutes per system
     python benchmarks/sustained_bench.py --systems sink_c,sink   # this project's sink alone (~21 min)
     python benchmarks/sustained_bench.py --rows 20000 --batch-events 2000 --minutes 0.3   # a smoke run
Needs: bash scripts/setup-bench-peers.sh for the peers.
"""

import argparse
import copy
import os
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa

from common import spark_session, write_batch
from stream_bench import DDL, PEERS, SINK_C, Workload, p99, peer_stream

OPTIONS = {
    "hoodie.table.name": "bench",
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.datasource.write.partitionpath.field": "region",
}
NO_COMPACTION = {"compaction.schedule.enabled": "false"}
SINK_RUNS = {SINK_C: {}, "sink": NO_COMPACTION}  # the sink's runs: their options over OPTIONS
SYSTEMS = [*SINK_RUNS, *PEERS]
GOALS = {"p99": 1.5, "speed": 0.75, "intervals": 3, "pending": 2}
PROGRESS_SECONDS = 30


# -- data --------------------------------------------------------------------------------------------------
def with_region(table, partitions):
    """stream_bench's rows with the partition column: region-<id % partitions>."""
    regions = pa.array([f"region-{i}" for i in range(partitions)])
    index = pa.array(table.column("id").to_numpy() % partitions)
    return table.append_column("region", regions.take(index))


def read(spark, directory):
    """A batch as Spark reads it (schema given, as a streaming file source has it)."""
    return spark.read.schema(DDL + ", region string").parquet(directory)


class Feeder:
    """CDC batches of a Workload written to parquet by a thread, `ahead` batches ahead of the writer."""

    def __init__(self, workload, events, partitions, directory, ahead=2):
        self.workload, self.events, self.partitions, self.directory = workload, events, partitions, directory
        self.ready: queue.Queue = queue.Queue(ahead)
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cdc-feeder", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _loop(self):
        n = 0
        try:
            while not self._stop.is_set():
                table, mix = self.workload.cdc(self.events)
                n += 1
                d = write_batch(with_region(table, self.partitions), os.path.join(self.directory, f"{n:05d}"))
                while not self._stop.is_set():
                    try:
                        self.ready.put((d, mix), timeout=0.2)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:
            self.error = exc
            self.ready.put(None)

    def next(self):
        """(batch directory, {"updates": n, "deletes": n, "inserts": n})."""
        item = self.ready.get()
        if item is None:
            raise RuntimeError("generating a CDC batch failed") from self.error
        return item

    def stop(self):
        self._stop.set()
        self._thread.join()
        shutil.rmtree(self.directory, ignore_errors=True)


# -- figures from the table --------------------------------------------------------------------------------
def pending_plans(path):
    from hoodie_stream.format.timeline.active_timeline import Timeline

    return len(Timeline(path).pending(["compaction"]))


@dataclass
class Plans:
    scheduled: int = 0
    completed: int = 0
    intervals: list = field(default_factory=list)  # plan intervals each completed plan took
    pending_age: list = field(default_factory=list)  # plan intervals each plan pending at the end has waited
    max_pending: int = 0  # from the timeline files' times


def plan_figures(path, delta_commits, since_ns):
    """Compaction plans written since `since_ns` (epoch ns) and what became of them, from the timeline files:
    their names (instant, action, state) and modification times (when each was written: completion order)."""
    from hoodie_stream.format.timeline.active_timeline import Timeline
    from hoodie_stream.format.timeline.instant import COMPLETED, REQUESTED, Instant

    hoodie = os.path.join(path, ".hoodie")
    written = {}  # Instant -> mtime ns
    with os.scandir(hoodie) as entries:
        for entry in entries:
            inst = Instant.from_file_name(entry.name)
            if inst is not None and entry.is_file():
                written[inst] = entry.stat().st_mtime_ns
    requested = {
        i.timestamp: t
        for i, t in written.items()
        if i.action == "compaction" and i.state == REQUESTED and t >= since_ns
    }
    timeline = Timeline(path)
    done = {}  # plan instant -> mtime of its completed commit
    for i, t in written.items():
        if i.action == "commit" and i.state == COMPLETED and i.timestamp in requested:
            meta = timeline.read_commit_metadata(i.timestamp)
            if meta.compacted or meta.operation_type == "COMPACT":
                done[i.timestamp] = t
    deltas = sorted(t for i, t in written.items() if i.action == "deltacommit" and i.state == COMPLETED)
    out = Plans(scheduled=len(requested), completed=len(done))
    for ts, at in requested.items():
        until = done.get(ts)
        n = sum(1 for t in deltas if at < t and (until is None or t <= until))
        (out.intervals if until is not None else out.pending_age).append(n / delta_commits)
    events = sorted([(t, 1) for t in requested.values()] + [(t, -1) for t in done.values()])
    pending = 0
    for _t, step in events:
        pending += step
        out.max_pending = max(out.max_pending, pending)
    return out


def log_files_per_slice(path):
    """(log files of each latest file slice, (partition, file id) of the slice with the most)."""
    from hoodie_stream.format.file_group.fs_view import FileSystemView

    counts, worst, where = [], -1, None
    for fs in FileSystemView(path).latest_slices():
        n = len(fs.log_files)
        counts.append(n)
        if n > worst:
            worst, where = n, (fs.partition, fs.file_id)
    return counts, where


# -- one run -----------------------------------------------------------------------------------------------
@dataclass
class Run:
    name: str
    latencies: list = field(default_factory=list)
    pending_samples: list = field(default_factory=list)  # the sink's plans pending after each batch
    events: int = 0
    wall: float = 0.0
    plans: Plans | None = None  # the sink's
    delta_commits: int = 5
    slice_logs: list = field(default_factory=list)
    worst_slice: tuple | None = None
    errors: list = field(default_factory=list)  # the sink's failed compactions
    loaded: float | None = None  # a peer's seconds to load its table
    compactions: dict | None = None  # a Hudi peer's {"completed": n, "pending": n}
    failure: str | None = None  # what ended a peer's run

    @property
    def speed(self):
        return self.events / self.wall

    @property
    def median(self):
        return statistics.median(self.latencies)

    @property
    def p99(self):
        return p99(self.latencies)


def back_to_back(res, feeder, minutes, write, status):
    """The feeder's batches through `write(directory, mix) -> seconds` back to back until `minutes` have passed
    (the batch running then finishes); latencies, events and the wall time from the first batch's start to the last
    one's end into `res`, a progress line every PROGRESS_SECONDS ending with `status()`."""
    d, mix = feeder.next()
    start = time.perf_counter()
    next_report = PROGRESS_SECONDS
    while True:
        res.latencies.append(write(d, mix))
        res.events += sum(mix.values())
        shutil.rmtree(d, ignore_errors=True)
        elapsed = time.perf_counter() - start
        if elapsed >= next_report:
            next_report += PROGRESS_SECONDS
            recent = " ".join(f"{x:.2f}" for x in res.latencies[-10:])
            print(
                f"  {elapsed:5.0f}s: {len(res.latencies)} batches, {res.events / elapsed:,.0f} events/s; last "
                f"batches {recent}s{status()}"
            )
        if elapsed >= minutes * 60:
            break
        d, mix = feeder.next()
    res.wall = time.perf_counter() - start


def run(spark, name, path, options, workload, args, work):
    """The sink: CDC batches of `workload` into the loaded table at `path` back to back for `args.minutes`."""
    from hoodie_stream.streaming_sink.sink import HoodieStreamSink

    sink = HoodieStreamSink(path, options)
    res = Run(name, delta_commits=sink.options.compaction.delta_commits)
    schedule = sink.options.compaction.schedule
    print(
        f"\n== run '{name}': {args.batch_events:,}-event batches back to back for {args.minutes:g} min; compaction "
        + (f"scheduled every {res.delta_commits} delta commits" if schedule else "never scheduled")
        + " =="
    )
    feeder = Feeder(workload, args.batch_events, args.partitions, os.path.join(work, f"batches-{name}")).start()
    services = sink.services
    batch_ids = iter(range(1, 1 << 62))  # the load was batch 0

    def write(d, mix):
        batch_id = next(batch_ids)
        t0 = time.perf_counter()
        sink(read(spark, d), batch_id)
        seconds = time.perf_counter() - t0
        r = sink.last_result
        if r is None or r.num_writes != mix["updates"] + mix["inserts"] or r.num_deletes != mix["deletes"]:
            got = "nothing" if r is None else f"{r.num_writes} records and {r.num_deletes} deletes"
            print(f"  WARNING: batch {batch_id}: the sink wrote {got} for {mix}")
        res.pending_samples.append(pending_plans(path))
        return seconds

    def status():
        return f"; plans pending {res.pending_samples[-1]}, completed {services.completed_count}"

    try:
        since_ns = time.time_ns()
        back_to_back(res, feeder, args.minutes, write, status)
        res.plans = plan_figures(path, res.delta_commits, since_ns)
        res.slice_logs, res.worst_slice = log_files_per_slice(path)
        res.errors = list(services.errors)
        print_run(res)
    finally:
        feeder.stop()
        sink.close(wait=False)  # a compaction still running is cancelled: its plan stays pending
        services.wait_idle(timeout=120)
    return res


def peer_run(system, load, workload, args, work, codec):
    """A peer of stream_bench (PEERS), in a process of its own: the loaded rows written as its own table by its own
    load (Hudi: bulk_insert; delta-spark: a plain write; partitioned by region as the sink's table), its streaming
    query started on that table, then the same CDC batches back to back for `args.minutes`, each timed by the peer
    (from the batch directory's rename into the directory the query reads to its micro-batch committed); for Hudi,
    its compactions at the end. A failure (an error, the peer's process ending) is kept in the run, not raised."""
    res = Run(system)
    print(
        f"\n== run '{system}' ({PEERS[system][1]}): {args.rows:,} rows loaded by its own load, then "
        f"{args.batch_events:,}-event batches back to back for {args.minutes:g} min =="
    )
    feeder = Feeder(workload, args.batch_events, args.partitions, os.path.join(work, f"batches-{system}")).start()
    try:
        with peer_stream(
            system, work, args.driver_memory, args.hudi_buckets, codec, load, load=load, partition_field="region"
        ) as (peer, path, loaded):
            res.loaded = loaded
            print(f"  load: {args.rows:,} rows in {loaded:.1f}s ({args.rows / loaded:,.0f} rows/s)")

            def write(d, _mix):
                return peer.request("batch", input=d)["seconds"]

            back_to_back(res, feeder, args.minutes, write, lambda: "")
            if PEERS[system][0] == "hudi":
                res.compactions = peer.request("compactions", path=path)
        print_run(res)
    except (Exception, SystemExit) as err:  # SystemExit: the peer is not set up
        res.failure = f"{type(err).__name__}: {err}"
        print(f"  FAILED after {len(res.latencies)} batches: {res.failure}")
    finally:
        feeder.stop()
    return res


def print_run(res):
    print(f"  {'batches':<34} {len(res.latencies):>12,}")
    print(f"  {'events written':<34} {res.events:>12,} in {res.wall:.1f}s")
    print(f"  {'events/s sustained':<34} {res.speed:>12,.0f}")
    print(f"  {'batch latency median':<34} {res.median:>11.3f}s")
    print(f"  {'batch latency p99':<34} {res.p99:>11.3f}s   (max {max(res.latencies):.3f}s)")
    if res.compactions is not None:
        c = res.compactions
        print(f"  {'Hudi compactions completed':<34} {c['completed']:>12}")
        print(f"  {'Hudi compactions pending at the end':<34} {c['pending']:>12}")
    if res.plans is not None:
        print_plans(res)


def print_plans(res):
    plans = res.plans
    print(f"  {'compaction plans scheduled':<34} {plans.scheduled:>12}")
    print(f"  {'compaction plans completed':<34} {plans.completed:>12}")
    print(f"  {'plans pending at the end':<34} {len(plans.pending_age):>12}")
    print(
        f"  {'most plans pending at once':<34} {max(res.pending_samples, default=0):>12}   (sampled after each batch; "
        f"{plans.max_pending} from the timeline files' times)"
    )
    if plans.intervals:
        print(
            f"  {'plan intervals to complete':<34} {max(plans.intervals):>12.2f}   (worst; median "
            f"{statistics.median(plans.intervals):.2f}; an interval is {res.delta_commits} delta commits)"
        )
    if plans.pending_age:
        print(f"  {'plan intervals waited, pending':<34} {max(plans.pending_age):>12.2f}   (oldest plan still pending)")
    logs = res.slice_logs
    if logs:
        part, file_id = res.worst_slice or ("", "")
        print(
            f"  {'log files per latest file slice':<34} {statistics.mean(logs):>12.2f}   (mean over {len(logs)} slices)"
        )
        print(f"  {'log files in the most-behind slice':<34} {max(logs):>12}   ({part}/{file_id})")
    if res.errors:
        print(f"  compaction errors: {len(res.errors)}: {res.errors[0]!r}")


# -- main --------------------------------------------------------------------------------------------------
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=6_000_000, help="rows of the table loaded first")
    p.add_argument("--partitions", type=int, default=8, help="partitions of the table (region = id %% partitions)")
    p.add_argument("--batch-events", type=int, default=100_000, help="events per CDC micro-batch")
    p.add_argument("--minutes", type=float, default=10.0, help="length of each run")
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"runs, in this order, of {', '.join(SYSTEMS)}")
    p.add_argument("--option", action="append", default=[], metavar="K=V", help="more sink options (both sink runs)")
    p.add_argument(
        "--hudi-buckets", type=int, default=4, help="hudi_bucket: hoodie.bucket.index.num.buckets (per partition)"
    )
    p.add_argument("--driver-memory", default="4g", help="each Spark driver's heap: this process's and each peer's")
    p.add_argument("--workdir", default=None, help="where the tables and batches go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    a = p.parse_args(argv)
    a.systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    unknown = [s for s in a.systems if s not in SYSTEMS]
    if unknown or not a.systems:
        p.error(f"--systems: {', '.join(unknown) or 'none given'}; known: {', '.join(SYSTEMS)}")
    return a


def verdict(met):
    return "PASS" if met else "FAIL"


def load_sink_tables(spark, tables, load, options):
    """The loaded rows as the first micro-batch (a bulk insert) of the first table, copied as the others."""
    from hoodie_stream.streaming_sink.sink import HoodieStreamSink

    sink = HoodieStreamSink(tables[0], options)
    try:
        t0 = time.perf_counter()
        sink(read(spark, load), 0)
        el = time.perf_counter() - t0
        rows, files = sink.last_result.num_writes, len(sink.last_result.stats)
    finally:
        sink.close()
    print(f"  load: {rows:,} rows bulk inserted by the sink in {el:.1f}s ({rows / el:,.0f} rows/s), {files} files")
    for table in tables[1:]:
        t0 = time.perf_counter()
        shutil.copytree(tables[0], table)
        print(f"  the loaded table copied for another run in {time.perf_counter() - t0:.1f}s")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from hoodie_stream.options import parse_options

    work = args.workdir or tempfile.mkdtemp(prefix="sustained-bench-")
    os.makedirs(work, exist_ok=True)
    options = dict(OPTIONS)
    options.update(kv.split("=", 1) for kv in args.option)
    codec = parse_options("bench", options).parquet_codec  # every peer writes the sink's codec
    print(
        f"sustained_bench: local[2], {os.cpu_count()} cores; a table of {args.rows:,} rows in {args.partitions} "
        f"partitions; {args.batch_events:,}-event CDC batches back to back for {args.minutes:g} min per run; "
        f"systems {','.join(args.systems)}; work dir {work}"
    )
    t_start = time.perf_counter()
    sinks = [s for s in args.systems if s in SINK_RUNS]
    tables = {s: os.path.join(work, f"table-{s}") for s in sinks}
    spark = None
    runs = []
    try:
        workload = Workload()
        load = write_batch(with_region(workload.inserts(args.rows), args.partitions), os.path.join(work, "load"))
        if sinks:
            spark = spark_session(args.driver_memory, app="hoodie-stream-sustained-bench")
            print(f"  spark.scheduler.mode {spark.sparkContext.getConf().get('spark.scheduler.mode', 'FIFO')}")
            load_sink_tables(spark, list(tables.values()), load, options)
        for system in args.systems:
            same = copy.deepcopy(workload)  # every run gets the same batches
            if system in SINK_RUNS:
                runs.append(run(spark, system, tables[system], {**options, **SINK_RUNS[system]}, same, args, work))
            else:
                runs.append(peer_run(system, load, same, args, work, codec))
    finally:
        if spark is not None:
            spark.stop()
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return summary(runs, time.perf_counter() - t_start)


# -- summary -----------------------------------------------------------------------------------------------
def summary(runs, seconds):
    """Every run's figures and ratios against the sink's runs; the goals of async compaction against none. Exit
    status 2 when a run failed (a peer's failure, a failed compaction of the sink)."""
    print("\n== summary: the same CDC batches into every system ==")
    by_name = {r.name: r for r in runs}
    sinks = [by_name[s] for s in SINK_RUNS if s in by_name]
    print_table(runs, sinks)
    for r in runs:
        if r.compactions is not None:
            c = r.compactions
            print(f"  {r.name}: Hudi compactions completed {c['completed']}, pending at the end {c['pending']}")
    if SINK_C in by_name and "sink" in by_name:
        print_goals(by_name[SINK_C], by_name["sink"])
    print(f"  total run time {seconds:.0f}s")
    failed = [r for r in runs if r.failure]
    compactions = [e for r in runs for e in r.errors]
    for r in failed:
        print(f"\nFAILED: {r.name}: {r.failure}", file=sys.stderr)
    if compactions:
        print(f"\nFAILED: {len(compactions)} compaction(s) failed during the runs", file=sys.stderr)
    return 2 if failed or compactions else 0


def print_table(runs, sinks):
    """One line a run: batches, events/s, median, p99, and against each sink run X: X's events/s / its events/s,
    its median / X's median, its p99 / X's p99 (above 1: X is ahead)."""
    against = "".join(f" | vs {x.name + ':':<7} speed median    p99" for x in sinks)
    print(f"  {'system':<12} {'batches':>7} {'events/s':>9} {'median':>8} {'p99':>8}{against}")
    if sinks:
        print("  (vs X: speed = X's events/s / its events/s; median, p99 = its / X's; above 1: X is ahead)")
    for r in runs:
        if r.failure:
            print(f"  {r.name:<12} FAILED after {len(r.latencies)} batches: {r.failure.splitlines()[0][:160]}")
            continue
        line = f"  {r.name:<12} {len(r.latencies):>7} {r.speed:>9,.0f} {r.median:>7.3f}s {r.p99:>7.3f}s"
        for x in sinks:
            if x is r:
                line += f" | {'':<10} {'-':>5} {'-':>6} {'-':>6}"
            else:
                ratios = (x.speed / r.speed, r.median / x.median, r.p99 / x.p99)
                line += f" | {'':<10}" + " ".join(f"{v:>{w}.2f}" for v, w in zip(ratios, (5, 6, 6)))
        print(line)


def print_goals(with_c, without):
    print("  async compaction (sink_c, the default options) against none (sink):")
    p99_ratio, speed_ratio = with_c.p99 / without.p99, with_c.speed / without.speed
    print(
        f"  batch latency p99, with / without:  {with_c.p99:.3f}s / {without.p99:.3f}s = {p99_ratio:.2f}  "
        f"(goal <= {GOALS['p99']}: {verdict(p99_ratio <= GOALS['p99'])})"
    )
    print(
        f"  events/s sustained, with / without: {with_c.speed:,.0f} / {without.speed:,.0f} = {speed_ratio:.2f}  "
        f"(goal >= {GOALS['speed']}: {verdict(speed_ratio >= GOALS['speed'])})"
    )
    plans = with_c.plans
    limit = GOALS["intervals"]
    if plans.scheduled:
        worst = max(plans.intervals, default=0.0)
        overdue = [a for a in plans.pending_age if a > limit]
        print(
            f"  every scheduled plan completes within {limit} plan intervals: {plans.completed} of {plans.scheduled} "
            f"completed, the slowest in {worst:.2f}; {len(plans.pending_age)} pending at the end, {len(overdue)} of "
            f"them older than {limit}  ({verdict(worst <= limit and not overdue)})"
        )
    else:
        print(f"  every scheduled plan completes within {limit} plan intervals: no plan was scheduled  (n/a)")
    most = max(max(with_c.pending_samples, default=0), plans.max_pending)
    print(
        f"  plans pending never above {GOALS['pending']}: at most {most} at once  ({verdict(most <= GOALS['pending'])})"
    )
    print(
        f"  log files in the most-behind slice at the end: {max(with_c.slice_logs, default=0)} with compaction, "
        f"{max(without.slice_logs, default=0)} without"
    )


if __name__ == "__main__":
    sys.exit(main())
