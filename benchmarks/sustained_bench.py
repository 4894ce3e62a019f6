"""Sustained streaming benchmark: CDC micro-batches back to back for minutes, with async compaction and without.

Setup (local[2], 2 shuffle partitions): the table of `stream_bench.py` (keyed by `id`, precombine `ts`, 8
trips-like columns, ~100 bytes a record) plus a `region` column (`id % --partitions`, 8 by default) that partitions
it. `--rows` rows (default 6M) are loaded with the sink as its first micro-batch (a bulk insert), then the table
directory is copied, so both runs start from the same table:

- compaction: the sink with its default options (async compaction, a plan every `compaction.delta_commits` = 5
  delta commits, cleaning);
- none:       the same options with `compaction.schedule.enabled=false` (no plan is ever scheduled).

Each run calls the sink as foreachBatch does (`sink(df, batch_id)`, batch ids increasing, no streaming query, as
`stream_bench.py`) with CDC batches of `--batch-events` events (70% updates of live keys, 5% deletes, 25% inserts,
as `stream_bench.py`'s `Workload.cdc`) back to back, no trigger interval, until `--minutes` have passed (the batch
running then finishes). Both runs get the same batches in the same order; a thread writes them to parquet two
batches ahead, so generating them is not in the figures.

Per run: events/s sustained (events written / wall time from the first batch's start to the last one's end);
batch latency median and p99 (nearest rank) of the sink's call; compaction plans scheduled (`.compaction.requested`
files) and completed (completed `commit` instants of operation COMPACT); the most plans pending at once, sampled
after every batch and, exactly, from the timeline files' modification times (layout 1 names an instant by its
requested time only; the time a file was written gives the completion order); for each completed plan the plan
intervals it took (delta commits completed after the plan was written and before its commit, divided by
`compaction.delta_commits`), the worst printed; and, at the end, the log files per latest file slice (mean, and max:
the most-behind slice). Goals, with compaction against none: p99 ratio <= 1.5, events/s ratio >= 0.7, every
scheduled plan completes within 3 plan intervals (a plan still pending at the end fails it when already older than
that), never more than 2 plans pending (the larger of the two figures). The exit status is 0 whatever the goals (it
is a measurement), non-zero when the run fails (an error, a crashed Python worker, a failed compaction).

Run: python benchmarks/sustained_bench.py                  # 6M rows, 100k-event batches, 10 minutes per run
     python benchmarks/sustained_bench.py --rows 200000 --batch-events 20000 --minutes 1   # a smoke run (~2.5 min)
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
from stream_bench import DDL, Workload, p99

OPTIONS = {
    "hoodie.table.name": "bench",
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.datasource.write.partitionpath.field": "region",
}
NO_COMPACTION = {"compaction.schedule.enabled": "false"}
GOALS = {"p99": 1.5, "speed": 0.7, "intervals": 3, "pending": 2}
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
    from hoodie_stream.format.timeline import Timeline

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
    from hoodie_stream.format.instant import COMPLETED, REQUESTED, Instant
    from hoodie_stream.format.timeline import Timeline

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
    from hoodie_stream.format.fs_view import FileSystemView

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
    pending_samples: list = field(default_factory=list)  # plans pending after each batch
    events: int = 0
    wall: float = 0.0
    plans: Plans = field(default_factory=Plans)
    delta_commits: int = 5
    slice_logs: list = field(default_factory=list)
    worst_slice: tuple | None = None
    errors: list = field(default_factory=list)

    @property
    def speed(self):
        return self.events / self.wall

    @property
    def p99(self):
        return p99(self.latencies)


def run(spark, name, path, options, workload, args, work):
    """CDC batches of `workload` into the table at `path` back to back for `args.minutes`."""
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
    try:
        d, mix = feeder.next()
        since_ns = time.time_ns()
        start = time.perf_counter()
        next_report = PROGRESS_SECONDS
        batch_id = 1  # the load was batch 0
        while True:
            t0 = time.perf_counter()
            sink(read(spark, d), batch_id)
            res.latencies.append(time.perf_counter() - t0)
            r = sink.last_result
            if r is None or r.num_writes != mix["updates"] + mix["inserts"] or r.num_deletes != mix["deletes"]:
                got = "nothing" if r is None else f"{r.num_writes} records and {r.num_deletes} deletes"
                print(f"  WARNING: batch {batch_id}: the sink wrote {got} for {mix}")
            res.events += sum(mix.values())
            shutil.rmtree(d, ignore_errors=True)
            res.pending_samples.append(pending_plans(path))
            batch_id += 1
            elapsed = time.perf_counter() - start
            if elapsed >= next_report:
                next_report += PROGRESS_SECONDS
                recent = res.latencies[-10:]
                print(
                    f"  {elapsed:5.0f}s: {len(res.latencies)} batches, {res.events / elapsed:,.0f} events/s; last "
                    f"batches {' '.join(f'{x:.2f}' for x in recent)}s; plans pending {res.pending_samples[-1]}, "
                    f"completed {services.completed_count}"
                )
            if elapsed >= args.minutes * 60:
                break
            d, mix = feeder.next()
        res.wall = time.perf_counter() - start
        res.plans = plan_figures(path, res.delta_commits, since_ns)
        res.slice_logs, res.worst_slice = log_files_per_slice(path)
        res.errors = list(services.errors)
        print_run(res)
    finally:
        feeder.stop()
        sink.close(wait=False)  # a compaction still running is cancelled: its plan stays pending
        services.wait_idle(timeout=120)
    return res


def print_run(res):
    plans = res.plans
    print(f"  {'batches':<34} {len(res.latencies):>12,}")
    print(f"  {'events written':<34} {res.events:>12,} in {res.wall:.1f}s")
    print(f"  {'events/s sustained':<34} {res.speed:>12,.0f}")
    print(f"  {'batch latency median':<34} {statistics.median(res.latencies):>11.3f}s")
    print(f"  {'batch latency p99':<34} {res.p99:>11.3f}s   (max {max(res.latencies):.3f}s)")
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
    p.add_argument("--option", action="append", default=[], metavar="K=V", help="more sink options (both runs)")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--workdir", default=None, help="where the tables and batches go (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    return p.parse_args(argv)


def verdict(met):
    return "PASS" if met else "FAIL"


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from hoodie_stream.streaming_sink.sink import HoodieStreamSink

    work = args.workdir or tempfile.mkdtemp(prefix="sustained-bench-")
    os.makedirs(work, exist_ok=True)
    table_c, table_n = os.path.join(work, "hudi_compaction"), os.path.join(work, "hudi_none")
    options = dict(OPTIONS)
    options.update(kv.split("=", 1) for kv in args.option)
    print(
        f"sustained_bench: local[2], {os.cpu_count()} cores; a table of {args.rows:,} rows in {args.partitions} "
        f"partitions; {args.batch_events:,}-event CDC batches back to back for {args.minutes:g} min per run; "
        f"work dir {work}"
    )
    t_start = time.perf_counter()
    spark = spark_session(args.driver_memory, app="hoodie-stream-sustained-bench")
    print(f"  spark.scheduler.mode {spark.sparkContext.getConf().get('spark.scheduler.mode', 'FIFO')}")
    try:
        workload = Workload()
        d = write_batch(with_region(workload.inserts(args.rows), args.partitions), os.path.join(work, "load"))
        sink = HoodieStreamSink(table_c, options)
        try:
            t0 = time.perf_counter()
            sink(read(spark, d), 0)
            el = time.perf_counter() - t0
            files = len(sink.last_result.stats)
        finally:
            sink.close()
        shutil.rmtree(d, ignore_errors=True)
        print(f"  load: {args.rows:,} rows bulk inserted in {el:.1f}s ({args.rows / el:,.0f} rows/s), {files} files")
        t0 = time.perf_counter()
        shutil.copytree(table_c, table_n)
        print(f"  the loaded table copied for the run without compaction in {time.perf_counter() - t0:.1f}s")
        after_load = copy.deepcopy(workload)  # both runs get the same batches
        with_c = run(spark, "compaction", table_c, options, workload, args, work)
        without = run(spark, "none", table_n, {**options, **NO_COMPACTION}, after_load, args, work)
    finally:
        spark.stop()
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

    print("\n== summary: async compaction (default options) against none ==")
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
    print(f"  total run time {time.perf_counter() - t_start:.0f}s")
    failed = with_c.errors + without.errors
    if failed:
        print(f"\nFAILED: {len(failed)} compaction(s) failed during the runs", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
