"""Compaction commit operator: complete `<instant>.commit` (compacted: true, operation COMPACT, the write stats of
every operation) atomically, or revert a failed compaction to requested (its new files and inflight file removed,
the plan kept for a retry). A half-done compaction is never visible: readers ignore base files of an instant that is
not completed."""

import json

from ..errors import HoodieCommitError
from ..format.avro.models import read_container
from ..format.file_group.file_names import parse_base_file_name
from ..format.hoodie_table import HoodieTable
from ..format.table.markers import delete_markers, list_markers
from ..format.timeline.commit_metadata import CommitMetadata
from ..format.timeline.instant import Instant
from ..storage import storage_for
from ..storage.local import is_temp_name
from .operation import plan_operations


def read_plan(timeline, instant):
    return read_container(timeline.read_bytes(Instant(instant, "compaction", "requested")))


def _new_files(storage, instant, plan):
    """Relative paths of base files this compaction wrote (markers, plus a scan of the plan's partitions)."""
    found = {path for path, _io in list_markers(storage, instant)}
    for partition in {op.partition for op in plan_operations(plan)}:
        for info in storage.list(partition, temp=True):
            parsed = parse_base_file_name(info.name)
            if (parsed and parsed.instant == instant) or (
                is_temp_name(info.name) and f"_{instant}.parquet." in info.name
            ):
                found.add(info.path)
    return sorted(found)


def _remove_new_files(storage, instant, plan, keep=frozenset()):
    """Delete the files this compaction wrote, except `keep` (relative paths the reported operations wrote)."""
    for rel in _new_files(storage, instant, plan):
        if rel not in keep:
            storage.delete(rel)


def revert_to_requested(storage, timeline, instant):
    """Undo an inflight (or failed) compaction: delete its new files and its inflight file; the plan stays."""
    storage = storage_for(storage)
    timeline.reload()
    inst = timeline.get(instant)
    if inst is None or inst.is_completed:
        return False
    _remove_new_files(storage, instant, read_plan(timeline, instant))
    delete_markers(storage, instant)
    timeline.revert_to_requested(instant, "compaction")
    return True


def commit_compaction(storage, timeline, instant, plan, stats):
    """Complete the compaction with the write stats of its operations (every operation must have reported one)."""
    ops = plan_operations(plan)
    if len(stats) != len(ops):
        raise HoodieCommitError(f"compaction {instant}: {len(stats)} of {len(ops)} operations reported")
    by_partition = {}
    for stat in stats:
        by_partition.setdefault(stat.partition_path, []).append(stat)
    # files no reported operation wrote: a failed task attempt, or a task of an earlier failed run that
    # finished after that run was cleaned up (Hudi reconciles markers the same way)
    storage = storage_for(storage)
    _remove_new_files(storage, instant, plan, keep={s.path for s in stats})
    schema = json.dumps(HoodieTable(storage).avro_schema(), separators=(",", ":"))
    meta = CommitMetadata(by_partition, True, {"schema": schema}, "COMPACT", None)
    timeline.complete(instant, "compaction", meta)
    delete_markers(storage, instant)
    timeline.reload()
