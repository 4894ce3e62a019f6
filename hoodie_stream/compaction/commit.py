"""Compaction commit operator, and the driver steps around execution.

`run_compaction` moves a planned compaction to inflight, runs the execute operator as Spark tasks (one per
operation), waits for all of them, and then either completes `<instant>.commit` (compacted: true, operation
COMPACT, the write stats) atomically, or — when any operation failed — removes the compaction's new files and its
inflight file, so the plan stays requested for a retry. A half-done compaction is never visible: readers ignore
base files of an instant that is not completed.
"""

import json
import logging
import os

from ..format.avro_models import read_container
from ..format.commit_metadata import CommitMetadata, WriteStat
from ..format.file_names import parse_base_file_name
from ..format.instant import Instant
from ..format.markers import delete_markers, list_markers
from ..format.reader import HoodieTable
from .execute import CompactTask

log = logging.getLogger("hoodie_stream.compaction")


def read_plan(timeline, instant):
    return read_container(timeline.read_bytes(Instant(instant, "compaction", "requested")))


def _new_files(base, instant, plan):
    """Relative paths of base files this compaction wrote (markers, plus a scan of the plan's partitions)."""
    found = {path for path, _io in list_markers(base, instant)}
    for partition in {op.get("partitionPath") or "" for op in plan.get("operations") or []}:
        directory = os.path.join(base, partition) if partition else base
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            parsed = parse_base_file_name(name)
            if parsed and parsed.instant == instant:
                found.add(f"{partition}/{name}" if partition else name)
            elif name.startswith(".") and name.endswith(".tmp") and f"_{instant}.parquet." in name:
                found.add(f"{partition}/{name}" if partition else name)
    return sorted(found)


def _remove_new_files(base, instant, plan, keep=frozenset()):
    """Delete the files this compaction wrote, except `keep` (relative paths the reported operations wrote)."""
    for rel in _new_files(base, instant, plan):
        path = os.path.join(base, rel)
        if rel not in keep and os.path.exists(path):
            os.remove(path)


def revert_to_requested(base, timeline, instant):
    """Undo an inflight (or failed) compaction: delete its new files and its inflight file; the plan stays."""
    timeline.reload()
    inst = timeline.get(instant)
    if inst is None or inst.is_completed:
        return False
    _remove_new_files(base, instant, read_plan(timeline, instant))
    delete_markers(base, instant)
    inflight = os.path.join(timeline.hoodie_dir, Instant(instant, "compaction", "inflight").file_name)
    if os.path.exists(inflight):
        os.remove(inflight)
    timeline.reload()
    return True


def run_compaction(spark, base, timeline, instant, max_memory_bytes, tasks=None, wave=None, before_wave=None,
                   nice=0):
    """Execute and commit one planned compaction. Returns the completed instant's write stats.

    With `wave`, the operations run as successive Spark jobs of at most `wave` tasks each, `before_wave()` called
    before each job; `nice` lowers the CPU priority of the merging threads. On failure the compaction's files are
    removed, the plan goes back to requested and the exception propagates (the caller reports it).
    """
    from pyspark.sql import types as T

    timeline.reload()
    inst = timeline.get(instant)
    if inst is None or inst.is_completed:
        return []
    if inst.is_inflight:
        revert_to_requested(base, timeline, instant)
    plan = read_plan(timeline, instant)
    ops = plan.get("operations") or []
    timeline.transition_to_inflight(instant, "compaction", b"")
    committed = {i.timestamp for i in timeline.commits_timeline()}
    try:
        if ops:
            rows = [(json.dumps(op),) for op in ops]
            size = wave or len(ops)
            task = CompactTask(base, instant, committed, max_memory_bytes, nice)
            result = []
            for start in range(0, len(rows), size):
                chunk = rows[start:start + size]
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
        if len(stats) != len(ops):
            raise RuntimeError(f"compaction {instant}: {len(stats)} of {len(ops)} operations reported")
        by_partition = {}
        for stat in stats:
            by_partition.setdefault(stat.partition_path, []).append(stat)
        # files no reported operation wrote: a failed task attempt, or a task of an earlier failed run that
        # finished after that run was cleaned up (Hudi reconciles markers the same way)
        _remove_new_files(base, instant, plan, keep={s.path for s in stats})
        schema = json.dumps(HoodieTable(base).avro_schema(), separators=(",", ":"))
        meta = CommitMetadata(by_partition, True, {"schema": schema}, "COMPACT", None)
        timeline.complete(instant, "compaction", meta.to_json())
    except BaseException as exc:
        log.warning("compaction %s of %s did not complete (%s); its files are removed and the plan stays requested",
                    instant, base, type(exc).__name__)
        revert_to_requested(base, timeline, instant)
        raise
    delete_markers(base, instant)
    timeline.reload()
    return stats
