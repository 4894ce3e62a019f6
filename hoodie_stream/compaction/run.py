"""Run one planned compaction: requested -> inflight, the execute operator as Spark tasks (one per operation),
then the commit operator; on any failure the compaction is reverted to requested and the error propagates."""

import json
import logging

from ..errors import rebuild_task_error
from ..format.base_file import DEFAULT_COMPRESSION
from ..format.commit_metadata import WriteStat
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
    wave=None,
    before_wave=None,
    nice=0,
    guard=None,
    compression=DEFAULT_COMPRESSION,
):
    """Execute and commit one planned compaction. Returns the completed instant's write stats.

    With `wave`, the operations run as successive Spark jobs of at most `wave` tasks each, `before_wave()` called
    before each job; `nice` lowers the CPU priority of the merging threads. On failure the compaction's files are
    removed, the plan goes back to requested and the exception propagates (the caller reports it). `guard()` is
    called before the plan goes inflight and before the commit (the writer lease's check).
    """
    from pyspark.sql import types as T

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
    committed = {i.timestamp for i in timeline.commits_timeline()}
    try:
        if ops:
            rows = [(json.dumps(op.to_avro()),) for op in ops]
            size = wave or len(ops)
            task = CompactTask(storage, instant, committed, max_memory_bytes, nice, compression)
            result = []
            for start in range(0, len(rows), size):
                chunk = rows[start : start + size]
                if before_wave is not None:
                    before_wave()
                frame = spark.createDataFrame(chunk, "op string").repartition(min(len(chunk), tasks or len(chunk)))
                result += frame.mapInArrow(task, T.StructType([T.StructField("stat", T.StringType())])).collect()
            stats = []
            for row in result:
                data = json.loads(row["stat"])
                data.pop("__ranges", None)
                stats.append(WriteStat.from_dict(data))
        else:
            stats = []
        if guard is not None:
            guard()
        commit_compaction(storage, timeline, instant, plan, stats)
    except BaseException as exc:
        error = rebuild_task_error(exc)  # an error of a task is raised as itself
        log.warning(
            "compaction %s of %s did not complete (%s); its files are removed and the plan stays requested",
            instant,
            storage,
            type(error or exc).__name__,
        )
        revert_to_requested(storage, timeline, instant)
        if error is not None:
            raise error from None
        raise
    return stats
