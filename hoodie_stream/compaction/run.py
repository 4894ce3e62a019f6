"""Run one planned compaction: requested -> inflight, the execute operator as Spark tasks (one per operation),
then the commit operator; on any failure the compaction is reverted to requested and the error propagates."""

import contextlib
import json
import logging
import threading

from ..chain.job_tags import new_tag, tagged_jobs, wait_for_tasks
from ..errors import rebuild_task_error
from ..format.base_file.parquet import DEFAULT_COMPRESSION
from ..format.timeline.commit_metadata import WriteStat
from .commit import commit_compaction, read_plan, revert_to_requested
from .execute import CompactTask
from .operation import plan_operations

log = logging.getLogger("hoodie_stream.compaction")


def run_compaction(
    spark,
    storage,
    timeline,
    instant,
    max_memory_bytes,
    tasks=None,
    concurrency=None,
    before_task=None,
    nice=0,
    guard=None,
    compression=DEFAULT_COMPRESSION,
    job_context=None,
    stopped=None,
    release_memory=True,
):
    """Execute and commit one planned compaction. Returns the completed instant's write stats.

    Without `concurrency`, the operations run as one Spark job of `tasks` tasks (one per operation when unset).
    With `concurrency`, each operation is a Spark job of one task, submitted by `concurrency` driver threads: at
    most that many compaction tasks hold executor slots at once, and a slot a finished operation frees is taken by
    the next one straight away. Each thread calls `before_task()` before it submits an operation and submits it
    inside `job_context()` (the thread's scheduler pool and job group); once `stopped()` is true no operation is
    submitted any more and the compaction fails with CompactionStopped. `nice` lowers the CPU priority of the
    merging threads. `release_memory` (`hoodie.stream.worker.memory.release`): the tasks' allocators as the write
    chain's (`chain/worker_memory.py`). On failure the compaction's files are removed, the plan goes back to requested and the
    exception propagates (the caller reports it). `guard()` is called before the plan goes inflight and before
    the commit (the writer lease's check).
    """
    timeline.reload()
    inst = timeline.get(instant)
    if inst is None or inst.is_completed:
        return []
    if inst.is_inflight:
        revert_to_requested(storage, timeline, instant)
    plan = read_plan(timeline, instant)
    ops = plan_operations(plan)
    if guard is not None:
        guard()
    timeline.transition_to_inflight(instant, "compaction", b"")
    committed = timeline.committed_instants()
    tag = new_tag(f"compaction-{instant}")
    try:
        rows = [(json.dumps(op.to_avro()),) for op in ops]
        task = CompactTask(storage, instant, committed, max_memory_bytes, nice, compression, release_memory)
        if not rows:
            result = []
        elif concurrency:
            result = _run_operations_apart(spark, task, rows, concurrency, before_task, job_context, stopped, tag)
        else:
            result = _run_job(spark, task, rows, min(len(rows), tasks or len(rows)), tag)
        stats = []
        for row in result:
            data = json.loads(row["stat"])
            data.pop("__ranges", None)
            stats.append(WriteStat.from_dict(data))
        if guard is not None:
            guard()
        commit_compaction(storage, timeline, instant, plan, stats)
    except BaseException as exc:
        error = rebuild_task_error(exc)  # an error of a task is raised as itself
        # (stopped with its session, as a script ending with spark.stop() stops it: expected, not a warning)
        try:
            level = logging.INFO if stopped is not None and stopped() else logging.WARNING
        except Exception:
            level = logging.WARNING
        log.log(
            level,
            "compaction %s of %s did not complete (%s); its files are removed and the plan stays requested",
            instant,
            storage,
            type(error or exc).__name__,
        )
        # Spark fails the job at the first failed task and only asks the others to stop: the files they still
        # write must exist before they are removed
        wait_for_tasks(spark.sparkContext, tag)
        revert_to_requested(storage, timeline, instant)
        if error is not None:
            raise error from None
        raise
    return stats


def _run_job(spark, task, rows, partitions, tag):
    """One Spark job, tagged `tag`, running the execute operator over `rows` (operations as JSON) in `partitions`
    tasks."""
    from pyspark.sql import types as T

    with tagged_jobs(spark.sparkContext, "compaction", tag):
        frame = spark.createDataFrame(rows, "op string")
        frame = frame.coalesce(1) if partitions == 1 else frame.repartition(partitions)
        return frame.mapInArrow(task, T.StructType([T.StructField("stat", T.StringType())])).collect()


class CompactionStopped(Exception):
    """The compaction's service was stopped before every operation ran (the plan goes back to requested)."""


def _run_operations_apart(spark, task, rows, concurrency, before_task, job_context, stopped, tag):
    """Each operation its own one-task job, `concurrency` jobs at a time; the first failure (or `stopped()`) stops
    the others from starting new operations and is raised once the running ones ended."""
    pending = list(reversed(rows))
    lock = threading.Lock()
    failed = threading.Event()
    context = job_context or contextlib.nullcontext
    outcomes = [None] * min(concurrency, len(rows))

    def worker(slot):
        out = []
        try:
            with context():
                while not failed.is_set():
                    with lock:
                        if not pending:
                            break
                        row = pending.pop()
                    if before_task is not None:
                        before_task()
                    if stopped is not None and stopped():
                        raise CompactionStopped("the compaction service was stopped")
                    out += _run_job(spark, task, [row], 1, tag)
        except BaseException as exc:
            failed.set()
            outcomes[slot] = exc
        else:
            outcomes[slot] = out

    # daemon threads, not a ThreadPoolExecutor (whose threads the interpreter joins at exit): a job submitted
    # while a script's spark.stop() runs may never be answered, and must not keep the process from ending
    threads = [
        threading.Thread(target=worker, args=(slot,), name=f"hoodie-compact-{slot}", daemon=True)
        for slot in range(len(outcomes))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = []
    for outcome in outcomes:  # the first failure is raised (every worker has ended)
        if isinstance(outcome, BaseException):
            raise outcome
        result += outcome
    return result
