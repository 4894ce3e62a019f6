"""Memory benchmark of the sink's write buffers: ~1 KB records, `write.task.max.size=64`, `write.batch.size=16`.

On local[2] (2 bucket-assign and 2 write tasks, compaction scheduling off) the sink writes a table of 1 KB records
(id, ts, a 16-char name, a 1000-char payload), file groups of `write.parquet.max.file.size=16` MB:
- `--build-batches` insert batches of `--build-rows` rows: the first one's file groups (sized with the default
  1 KB record estimate) pass 16 MB in a write task's buffer -> "bucket" flushes;
- then `--update-batches` upsert batches of `--update-rows` events (95% updates of random live keys, the rest new
  keys): every file group gets ~9 MB of updates, under the 16 MB bucket limit, while a write task's ~12 buckets
  together pass 64 MB -> "task" flushes (the largest bucket first).

Figures:
- flush counts by cause per batch and in all (`sink.last_result.flushes`);
- the pympler estimate of buffered bytes against the bytes the buffers really hold: `peak_buffered` vs `peak_real`
  as the write tasks report them (`peak_real` = Arrow `nbytes` of the buffered slices); and independently, in a
  fresh interpreter, the sink's own `BufferedWriter` (real flushes into a scratch table) fed 10k-row batches shaped
  like the write stage's input: at every add the estimate against (a) the slices' `nbytes` and (b) the distinct Arrow
  buffers the slices pin (a slice keeps its whole parent buffer alive), plus that process's peak RSS over its input;
  one flush (append_log of a 16 MB bucket) and one bucket-assign task (its whole input) measured the same way;
- peak RSS of the PySpark Python workers (processes under this driver whose command line names pyspark.daemon or
  pyspark.worker): VmRSS sampled from /proc every 20 ms by a background thread, plus the kernel's high-water mark
  (VmHWM); per Spark stage too (samples matched to the stages' submission/completion times). Workers are reused
  across stages (Spark's default), so memory a worker kept from an earlier stage shows in later ones:
  `--no-reuse` (spark.python.worker.reuse=false, a fresh worker per task) attributes it to one stage exactly.
Goals: peak worker RSS < 64 MB + 200 MB = 264 MB; estimate within +-25% of the real buffered bytes.

Run: python benchmarks/memory_bench.py [--no-reuse] [--build-rows 200000 --update-rows 200000 ...]
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

from common import MB, WorkerRss, spark_session, status_bytes, write_batch

DDL = "id long, ts long, name string, payload string"
LIMIT_MB = 64 + 200


# -- data --------------------------------------------------------------------------------------------------
def payloads(rng, n, width=1000):
    """n random lowercase strings of `width` chars, built as one Arrow buffer."""
    data = rng.integers(97, 123, size=n * width, dtype=np.uint8)
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def records(ids, ts, rng):
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    names = pa.Array.from_buffers(
        pa.string(),
        n,
        [
            None,
            pa.py_buffer(np.arange(0, (n + 1) * 16, 16, dtype=np.int32)),
            pa.py_buffer(rng.integers(65, 91, n * 16, dtype=np.uint8)),
        ],
    )
    return pa.table({"id": ids, "ts": np.full(n, ts, dtype=np.int64), "name": names, "payload": payloads(rng, n)})


# -- the independent estimate check ------------------------------------------------------------------------
def pinned_bytes(tables):
    """Bytes of the distinct Arrow buffers the tables reference (a slice pins its whole parent buffer)."""
    seen = {}
    for t in tables:
        for col in t.columns:
            for chunk in col.chunks:
                for buf in chunk.buffers():
                    if buf is not None:
                        seen[buf.address] = max(seen.get(buf.address, 0), buf.size)
    return sum(seen.values())


def _self_kb(field):
    return status_bytes("self", field).get(field, 0)


def _reset_peak():
    """Reset this process's VmHWM to its current RSS (Linux clear_refs 5); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def keyed_input(rng, ids, fids, start, kind):
    """Rows shaped as the write stage receives them: data columns + key, partition, file id, kind, seq."""
    from hoodie_stream.chain.columns import FILE_ID, KEY, KIND, PARTITION, SEQ

    t = records(ids, 1, rng)
    n = t.num_rows
    return (
        t.append_column(KEY, pa.array(ids.astype(str)))
        .append_column(PARTITION, pa.array([""] * n))
        .append_column(FILE_ID, pa.array(fids, pa.string()))
        .append_column(KIND, pa.array(np.full(n, kind, dtype=np.int8)))
        .append_column(SEQ, pa.array(np.arange(start, start + n, dtype=np.int64)))
    )


def _as_worker(check, *args):
    """An in-process check run as the sink's Python workers run a task (streaming_sink/worker_memory.py)."""
    from hoodie_stream.chain import worker_memory

    with worker_memory.task():
        return check(*args)


def writer_check(rng, layout, groups=12, rows=160_000, batch_rows=10_000, batch_mb=16, task_mb=64):
    """The sink's own StreamWriteFunction buffers (BufferedWriter) in this process, writing log files into a scratch
    table: at every add the pympler estimate against the slices' nbytes and the distinct buffers they pin, and the
    process's peak RSS over its input (the input batches are built beforehand and not counted).

    layout "random": every row of a 10k-row batch goes to a random one of `groups` buckets (updates spread over
    file groups); "runs": a batch's rows go to consecutive buckets in runs of 2,500 (inserts packed in order).
    """
    from hoodie_stream.chain.columns import RecordKind
    from hoodie_stream.chain.stages import BatchContext, WriteSpec
    from hoodie_stream.format.write.writer import HoodieWriter
    from hoodie_stream.storage import storage_for
    from hoodie_stream.streaming_sink.write_function import BufferedWriter, StreamWriteFunction

    scratch = tempfile.mkdtemp(prefix="memory-bench-writer-")
    try:
        writer = HoodieWriter.create(
            scratch,
            table_name="scratch",
            record_key_fields=["id"],
            schema=records(np.arange(1), 1, rng).schema,
            precombine_field="ts",
            partition_fields=[],
        )
        instant = writer.start().instant
        context = BatchContext(storage_for(scratch), instant, "upsert", "ts", ("id", "ts", "name", "payload"))
        fn = StreamWriteFunction(
            context,
            WriteSpec(avro_schema=writer.avro_schema(), batch_size_bytes=batch_mb * MB, task_max_bytes=task_mb * MB),
        )
        ids = rng.permutation(rows).astype(np.int64)
        names = np.array([f"{i:08d}-0000-0000-0000-000000000000-0" for i in range(groups)], dtype=object)
        inputs = []
        for start in range(0, rows, batch_rows):
            n = min(batch_rows, rows - start)
            if layout == "random":
                fids = names[rng.integers(0, groups, n)]
            else:
                fids = names[(start + np.arange(n)) // 2_500 % groups]
            inputs.append(keyed_input(rng, ids[start : start + n], fids.tolist(), start, RecordKind.UPDATE))
        w = BufferedWriter(fn, "1-0-0", 0)
        worst_nbytes = worst_pinned = (0.0, 1.0)
        max_est = max_pinned = 0
        resettable = _reset_peak()
        rss0 = _self_kb("VmRSS")
        for t in inputs:
            w.add(t)
            tables = [x for b in w.buckets.values() for x in b.tables]
            if not tables:
                continue
            est, nbytes, pinned = w.total, sum(x.nbytes for x in tables), pinned_bytes(tables)
            max_est, max_pinned = max(max_est, est), max(max_pinned, pinned)
            worst_nbytes = max(worst_nbytes, (abs(est / nbytes - 1), est / nbytes), key=lambda x: x[0])
            worst_pinned = max(worst_pinned, (abs(est / pinned - 1), est / pinned), key=lambda x: x[0])
        w.flush_all()
        peak = (_self_kb("VmHWM") - rss0) if resettable else None
        return {
            "layout": layout,
            "flushes": w.flushes,
            "rows": rows,
            "groups": groups,
            "worst_vs_nbytes": worst_nbytes[1],
            "worst_vs_pinned": worst_pinned[1],
            "max_est": max_est,
            "max_pinned": max_pinned,
            "peak_rss_over_input": peak,
            "peak_real": w.peak_real,
            "peak_buffered": w.peak_buffered,
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def flush_check(rng, mb=16):
    """Peak RSS over its input of one flush: append_log of a `mb` MB bucket (1 KB records) into a scratch table."""
    import pyarrow.compute as pc

    from hoodie_stream.format.write.write_handles import append_log
    from hoodie_stream.format.write.writer import HoodieWriter

    scratch = tempfile.mkdtemp(prefix="memory-bench-flush-")
    try:
        rows = mb * MB // 1040
        t = records(np.arange(rows), 1, rng)
        keys = pc.cast(t["id"], pa.string()).combine_chunks()
        writer = HoodieWriter.create(
            scratch,
            table_name="scratch",
            record_key_fields=["id"],
            schema=t.schema,
            precombine_field="ts",
            partition_fields=[],
        )
        instant = writer.start().instant
        resettable = _reset_peak()
        rss0 = _self_kb("VmRSS")
        append_log(
            scratch, instant, "", "f0-0", instant, writer.avro_schema(), records=t, keys=keys, new_file_group=True
        )
        peak = (_self_kb("VmHWM") - rss0) if resettable else None
        return {"bucket": t.nbytes, "peak_rss_over_input": peak}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def assign_check(rng, rows):
    """Peak RSS of one bucket-assign task over its input (`rows` new keys of ~1 KB), in this process."""
    from hoodie_stream.bucket_assign.assigner import BucketAssigner
    from hoodie_stream.bucket_assign.write_tasks import WritePlan
    from hoodie_stream.chain.columns import DELETE, KEY, KEY_GROUP, PARTITION, SEQ
    from hoodie_stream.chain.stages import AssignSpec, BatchContext
    from hoodie_stream.storage import storage_for

    scratch = tempfile.mkdtemp(prefix="memory-bench-assign-")
    try:
        ids = np.arange(rows, dtype=np.int64)
        t = records(ids, 1, rng)
        t = (
            t.append_column(SEQ, pa.array(ids))
            .append_column(KEY, pa.array(ids.astype(str)))
            .append_column(PARTITION, pa.array([""] * rows))
            .append_column(DELETE, pa.array(np.zeros(rows, bool)))
            .append_column(KEY_GROUP, pa.array((ids % 64).astype(np.int32)))
        )
        context = BatchContext(
            storage_for(scratch), "20260101000000000", "upsert", "ts", ("id", "ts", "name", "payload")
        )
        assigner = BucketAssigner(
            context,
            AssignSpec(
                committed=frozenset(),
                global_index=True,
                event_time=True,
                small_files={},
                new_file_capacity=int(32 * MB / 1040),
                num_tasks=1,
                write_plan=WritePlan(1),
            ),
        )
        # as the sink feeds it: sorted by key group (Spark sorts in the JVM), 10k-row Arrow batches in, output
        # batches passed on one at a time
        batches = t.sort_by([(KEY_GROUP, "ascending")]).to_batches(max_chunksize=10_000)
        resettable = _reset_peak()
        rss0 = _self_kb("VmRSS")
        out_bytes = sum(b.nbytes for b in assigner(iter(batches)))
        peak = (_self_kb("VmHWM") - rss0) if resettable else None
        return {"input": t.nbytes, "output": out_bytes, "peak_rss_over_input": peak}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# -- main --------------------------------------------------------------------------------------------------
def stage_windows(spark, group):
    """[(stage id, submitted epoch s, completed epoch s)] of a job group's completed stages."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    store = sc._jsc.sc().statusStore()
    out = []
    for job in sorted(tracker.getJobIdsForGroup(group)):
        info = tracker.getJobInfo(job)
        for sid in sorted(info.stageIds if info else []):
            try:
                s = store.lastStageAttempt(sid)
            except Exception:
                continue
            if s.submissionTime().isDefined() and s.completionTime().isDefined():
                out.append((sid, s.submissionTime().get().getTime() / 1000, s.completionTime().get().getTime() / 1000))
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-batches", type=int, default=2)
    p.add_argument("--build-rows", type=int, default=200_000)
    p.add_argument("--update-batches", type=int, default=3)
    p.add_argument("--update-rows", type=int, default=200_000)
    p.add_argument("--update-share", type=float, default=0.95, help="updates among the upsert events")
    p.add_argument("--max-file-mb", type=int, default=16, help="write.parquet.max.file.size (MB)")
    p.add_argument("--assign-tasks", type=int, default=None, help="write.bucket_assign.tasks (default: 2)")
    p.add_argument("--option", action="append", default=[], metavar="K=V", help="more sink options")
    p.add_argument(
        "--no-reuse",
        action="store_true",
        help="spark.python.worker.reuse=false: a fresh worker per task, so RSS is attributed to one "
        "stage (the index state cache is then lost between batches)",
    )
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--workdir", default=None)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from hoodie_stream.streaming_sink.sink import HoodieStreamSink

    work = args.workdir or tempfile.mkdtemp(prefix="memory-bench-")
    base = os.path.join(work, "hudi")
    rng = np.random.default_rng(11)
    options = {
        "hoodie.table.name": "mem",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "write.task.max.size": "64",
        "write.batch.size": "16",
        "write.parquet.max.file.size": str(args.max_file_mb),
        "compaction.schedule.enabled": "false",
    }
    if args.assign_tasks:
        options["write.bucket_assign.tasks"] = str(args.assign_tasks)
    for kv in args.option:
        k, _, v = kv.partition("=")
        options[k] = v
    print(f"memory_bench: local[2]; options {options}")
    conf = {"spark.python.worker.reuse": "false"} if args.no_reuse else {}
    spark = spark_session(args.driver_memory, app="hoodie-stream-memory-bench", conf=conf)
    rss = WorkerRss().start()
    sink = HoodieStreamSink(base, options)
    warm = spark.range(0, 20000, numPartitions=2).mapInArrow(lambda it: (b.slice(0, 0) for b in it), "id long")
    warm.collect()
    time.sleep(0.5)
    idle = rss.max_between(time.time() - 0.3, time.time())
    print(f"idle Python worker after a pass-through mapInArrow job: {idle:.0f} MB RSS")
    stage_peaks = {"read+key-by": 0.0, "bucket-assign": 0.0, "write": 0.0}
    totals = {"bucket": 0, "task": 0, "end": 0}
    worst = 0.0
    next_id = 0
    rows_out = []
    try:
        plan = [("insert", args.build_rows)] * args.build_batches + [("upsert", args.update_rows)] * args.update_batches
        print(
            f"{'batch':>5} {'kind':<7} {'events':>8} {'latency':>8} {'bucket':>6} {'task':>5} {'end':>5} "
            f"{'peak_buffered':>13} {'peak_real':>10} {'est/real':>8} {'files':>5} {'worker RSS':>10}  "
            f"RSS by stage: key-by / assign / write"
        )
        for batch_id, (kind, n) in enumerate(plan):
            if kind == "insert":
                ids = np.arange(next_id, next_id + n)
                next_id += n
            else:
                n_upd = int(n * args.update_share)
                upd = rng.choice(next_id, n_upd, replace=False)
                ins = np.arange(next_id, next_id + n - n_upd)
                next_id += n - n_upd
                ids = rng.permutation(np.concatenate([upd, ins]))
            d = write_batch(records(ids, batch_id + 1, rng), os.path.join(work, "batches", str(batch_id)))
            group = f"mem-{batch_id}"
            spark.sparkContext.setJobGroup(group, group)
            t0w, t0 = time.time(), time.perf_counter()
            sink(spark.read.schema(DDL).parquet(d), batch_id)
            elapsed = time.perf_counter() - t0
            time.sleep(0.1)
            peak = rss.max_between(t0w, time.time())
            stages = stage_windows(spark, group)
            by_stage = [0.0, 0.0, 0.0]
            if len(stages) == 3:
                for i, (name, (_sid, a, b)) in enumerate(zip(stage_peaks, stages)):
                    by_stage[i] = rss.max_between(a, b)
                    stage_peaks[name] = max(stage_peaks[name], by_stage[i])
            shutil.rmtree(d)
            r = sink.last_result
            f = r.flushes
            for c in totals:
                totals[c] += f[c]
            # a bulk insert (the first batch into the empty table) buffers nothing in the write function
            ratio = f["peak_buffered"] / f["peak_real"] if f["peak_real"] else float("nan")
            if f["peak_real"]:
                worst = max(worst, abs(ratio - 1))
            rows_out.append((batch_id, kind, n, elapsed, f, ratio, len(r.stats), peak))
            print(
                f"{batch_id:>5} {kind:<7} {n:>8,} {elapsed:>7.1f}s {f['bucket']:>6} {f['task']:>5} {f['end']:>5} "
                f"{f['peak_buffered'] / MB:>10.1f} MB {f['peak_real'] / MB:>7.1f} MB {ratio:>8.3f} "
                f"{len(r.stats):>5} {peak:>7.0f} MB  " + " / ".join(f"{x:.0f}" for x in by_stage) + " MB"
            )
    finally:
        rss.stop()
        sink.close()
        spark.stop()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

    print("\n== flushes by cause (all batches) ==")
    print("  " + ", ".join(f"{c}: {totals[c]}" for c in totals))
    print("\n== pympler estimate vs real buffered bytes ==")
    buffered = [r[5] for r in rows_out if r[4]["peak_real"]]
    print(
        f"  sink (write tasks): peak_buffered / peak_real per batch that buffered ({len(buffered)}) within "
        f"{min(buffered, default=float('nan')):.3f} .. {max(buffered, default=float('nan')):.3f} "
        f"(worst deviation {worst * 100:.1f}%, goal <= 25%: {'met' if worst <= 0.25 else 'NOT met'})"
    )
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")  # each in-process check in a fresh interpreter: RSS from zero
    for layout in ("random", "runs"):
        with spawn.Pool(1) as pool:
            c = pool.apply(_as_worker, (writer_check, np.random.default_rng(5), layout))
        print(
            f"  in-process write buffers ({layout}: {c['rows']:,} rows of 1 KB in 10k-row batches over "
            f"{c['groups']} buckets; flushes {c['flushes']}):"
        )
        print(
            f"    estimate / slices' nbytes worst {c['worst_vs_nbytes']:.3f}; estimate / distinct Arrow buffers "
            f"pinned worst {c['worst_vs_pinned']:.3f}; largest estimate {c['max_est'] / MB:.1f} MB, largest "
            f"pinned {c['max_pinned'] / MB:.1f} MB (write.task.max.size 64 MB)"
        )
        if c["peak_rss_over_input"] is not None:
            print(
                f"    peak RSS of the writer over its input: {c['peak_rss_over_input'] / MB:.0f} MB "
                f"(buffers + flush transients)"
            )
    with spawn.Pool(1) as pool:
        fc = pool.apply(_as_worker, (flush_check, np.random.default_rng(7)))
    if fc["peak_rss_over_input"] is not None:
        print(
            f"  in-process flush of one {fc['bucket'] / MB:.0f} MB bucket (append_log: Avro encoding + log block): "
            f"peak RSS over its input {fc['peak_rss_over_input'] / MB:.0f} MB"
        )
    a_rows = args.build_rows // 2
    with spawn.Pool(1) as pool:
        ac = pool.apply(_as_worker, (assign_check, np.random.default_rng(6), a_rows))
    if ac["peak_rss_over_input"] is not None:
        print(
            f"  in-process bucket assign of one task's input ({a_rows:,} new keys, {ac['input'] / MB:.0f} MB): "
            f"peak RSS over its input {ac['peak_rss_over_input'] / MB:.0f} MB, output {ac['output'] / MB:.0f} MB"
        )
    print("\n== peak RSS of the Python workers ==")
    print(
        f"  sampled every 20 ms: {rss.peak_mb():.0f} MB (one process), {rss.peak_total_mb():.0f} MB (all "
        f"workers together); kernel high-water mark (VmHWM) {rss.hwm_mb():.0f} MB; "
        f"{len(rss.peak)} worker processes seen"
    )
    print(
        "  by stage (max of one worker while the stage ran, all batches): "
        + ", ".join(f"{k} {v:.0f} MB" for k, v in stage_peaks.items())
    )
    top = max(rss.peak_mb(), rss.hwm_mb())
    print(f"  goal < {LIMIT_MB} MB (64 MB task buffer + 200 MB): {'met' if top < LIMIT_MB else 'NOT met'}")


if __name__ == "__main__":
    main()
