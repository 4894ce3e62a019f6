"""Compaction plan operator: decide whether to compact (trigger strategy) and write the plan.

The plan has one operation per latest file slice that has log files (log-only slices included), skipping file
groups already in a pending compaction, chosen as Hudi's default strategy (log file size based, bounded IO) does:
the slices with the most log bytes first, as long as the plan's IO (base and log bytes read plus the bytes
written) is within `compaction.target_io` MB (the operation that reaches the bound is the plan's last). A slice
left out gains log bytes with every delta commit and so comes first in a later plan; a bounded plan takes first
the slices with OVERDUE_INTERVALS x `compaction.delta_commits` log files or more (a small file group gains few log
bytes a commit and would otherwise wait behind the large ones), so every slice is compacted in turn. It is written as `<instant>.compaction.requested`, the Avro
`HoodieCompactionPlan` as Hudi serializes it (version 2: file names, not paths). From then on writers put new log
files of those file groups under the compaction instant (a new slice), and readers merge them with the slice being
compacted until the compaction commits.
"""

import time

from ..format.avro.models import read_container, write_container
from ..format.file_group.fs_view import FileSystemView
from ..format.timeline.active_timeline import Timeline
from ..format.timeline.instant import Instant, instant_to_datetime
from ..storage import Storage
from .operation import CompactionOperation, plan_operations

PLAN_VERSION = 2
MB = 1024.0 * 1024.0
# a slice with this many trigger intervals of log files (compaction.delta_commits each) is overdue: bounded plans
# take the overdue slices first, the most log files first
OVERDUE_INTERVALS = 6


def last_compaction(timeline):
    """The newest compaction instant time, pending or completed (None when there is none). The completed commits are
    read newest first, up to the first compaction: what the trigger asks after each commit costs the same whatever
    the timeline's length."""
    pending = [i.timestamp for i in timeline.pending(["compaction"])]
    newest_pending = max(pending, default=None)
    for inst in reversed(timeline.completed(["commit"])):
        if newest_pending is not None and inst.timestamp < newest_pending:
            break
        if timeline.read_commit_metadata(inst.timestamp).is_compaction:
            return inst.timestamp
    return newest_pending


def should_schedule(timeline, opts, now=None):
    """The trigger strategy's verdict: (yes?, delta commits since the last compaction, seconds since it)."""
    last = last_compaction(timeline)
    deltas = [i for i in timeline.completed(["deltacommit"]) if last is None or i.timestamp > last]
    if not deltas:
        return False, 0, 0.0
    since = last or deltas[0].timestamp
    now = time.time() if now is None else now
    elapsed = now - instant_to_datetime(since).timestamp()
    by_num = len(deltas) >= opts.delta_commits
    by_time = elapsed >= opts.delta_seconds
    verdict = {
        "num_commits": by_num,
        "time_elapsed": by_time,
        "num_and_time": by_num and by_time,
        "num_or_time": by_num or by_time,
    }[opts.trigger]
    return verdict, len(deltas), elapsed


def pending_plans(timeline):
    """{compaction instant: plan dict} of pending compactions, oldest first."""
    plans = {}
    for inst in timeline.pending(["compaction"]):
        data = timeline.read_bytes(Instant(inst.timestamp, "compaction", "requested"))
        plans[inst.timestamp] = read_container(data)
    return dict(sorted(plans.items()))


def pending_file_groups(timeline: Timeline) -> dict[tuple[str, str], str]:
    """{(partition, file id): compaction instant} of file groups in a pending compaction."""
    groups = {}
    for instant, plan in pending_plans(timeline).items():
        for op in plan_operations(plan):
            groups[(op.partition, op.file_id)] = instant
    return groups


def make_operations(storage: Storage, timeline: Timeline) -> list[CompactionOperation]:
    """One operation per latest slice with log files, outside pending compactions."""
    busy = pending_file_groups(timeline)
    ops = []
    for fs in FileSystemView(storage, timeline).latest_slices():
        if not fs.log_files or (fs.partition, fs.file_id) in busy:
            continue
        log_sizes = fs.log_sizes
        base_size = fs.base_size
        ops.append(
            CompactionOperation(
                file_id=fs.file_id,
                partition=fs.partition,
                base_instant=fs.base_instant,
                log_files=tuple(fs.log_file_names()),
                base_file=fs.base_file,
                metrics={
                    "TOTAL_LOG_FILES": float(len(log_sizes)),
                    "TOTAL_LOG_FILES_SIZE": float(sum(log_sizes)),
                    "TOTAL_IO_READ_MB": (base_size + sum(log_sizes)) / MB,
                    "TOTAL_IO_WRITE_MB": (base_size + sum(log_sizes)) / MB,
                    "TOTAL_IO_MB": 2 * (base_size + sum(log_sizes)) / MB,
                },
            )
        )
    return ops


def plan_io_mb(plan) -> float:
    """The IO (MB read and written) of a plan's operations, as their TOTAL_IO_MB metrics say."""
    return sum(op.metrics.get("TOTAL_IO_MB", 0.0) for op in plan_operations(plan))


def order_and_bound(
    ops: list[CompactionOperation], target_io_mb: float | None, overdue_log_files: int | None = None
) -> list[CompactionOperation]:
    """The operations with the most log bytes first, cut after the one whose IO reaches `target_io_mb` (None:
    all of them). Slices with at least `overdue_log_files` log files come before the others, the most log files
    first: a small file group gains few log bytes a commit and would otherwise wait behind the large ones."""

    def rank(op):
        files = op.metrics.get("TOTAL_LOG_FILES", 0.0)
        overdue = overdue_log_files is not None and files >= overdue_log_files
        return (overdue, files if overdue else 0.0, op.metrics.get("TOTAL_LOG_FILES_SIZE", 0.0))

    ordered = sorted(ops, key=rank, reverse=True)
    if target_io_mb is None:
        return ordered
    chosen = []
    remaining = float(target_io_mb)
    for op in ordered:
        if remaining <= 0:
            break
        chosen.append(op)
        remaining -= op.metrics.get("TOTAL_IO_MB", 0.0)
    return chosen


def schedule_compaction(storage, timeline, opts=None, force=False, target_io_mb=None):
    """Write a compaction plan when the trigger strategy says so (or `force`). Returns its instant or None.
    The plan's IO is bounded by `compaction.target_io` of `opts` when set, else by `target_io_mb` when given."""
    timeline.reload()
    if not force:
        ok, _n, _s = should_schedule(timeline, opts)
        if not ok:
            return None
    bound = getattr(opts, "target_io_mb", None) or target_io_mb
    overdue = OVERDUE_INTERVALS * opts.delta_commits if opts is not None and bound is not None else None
    ops = order_and_bound(make_operations(storage, timeline), bound, overdue)
    if not ops:
        return None
    plan = {
        "operations": [op.to_avro() for op in ops],
        "extraMetadata": None,
        "version": PLAN_VERSION,
        "strategy": None,
        "preserveHoodieMetadata": True,
    }
    return timeline.create_new("compaction", write_container("HoodieCompactionPlan", plan))
