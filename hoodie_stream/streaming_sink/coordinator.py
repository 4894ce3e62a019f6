"""The write coordinator (driver side): one delta commit per micro-batch.

requested -> inflight before any task writes; after the tasks: the completed deltacommit with every write stat,
the schema and the streaming checkpoint; on any failure the instant is rolled back (its files deleted) and the
error is raised so Spark retries the batch. An instant that wrote nothing (an empty batch, or input refused before
any file was written) is removed without a trace.
"""

import json

from ..checkpoints import index_state
from ..checkpoints.batch_checkpoint import checkpoint_metadata
from ..checkpoints.recovery import INDEX_MARK
from ..errors import rebuild_task_error
from ..format.table.markers import delete_markers, list_markers
from ..format.timeline.commit_metadata import RECORDS_MOVED_KEY, WriteStat
from ..format.write.rollback import files_of_instant


class BatchResult:
    """What a micro-batch committed: its instant, the write stats, the write tasks' flush counts and the keys it
    moved to another partition (`moved`: their old copies are deletes the stats' numDeletes count)."""

    def __init__(self, instant=None, stats=(), flushes=None, skipped=False, moved=0):
        self.instant = instant
        self.stats = list(stats)
        self.flushes = flushes or {}
        self.skipped = skipped
        self.moved = moved

    @property
    def num_writes(self):
        return sum(s.num_writes for s in self.stats)

    @property
    def num_deletes(self):
        """Records deleted, the old copies of moved keys not counted (`num_moved`)."""
        return sum(s.num_deletes for s in self.stats) - self.moved

    @property
    def num_moved(self):
        return self.moved

    def __repr__(self):
        if self.skipped:
            return "BatchResult(skipped: committed before)"
        inserts = sum(s.num_inserts or 0 for s in self.stats)
        updates = sum(s.num_update_writes or 0 for s in self.stats)
        flushes = ", ".join(f"{k}={self.flushes[k]}" for k in ("bucket", "task", "end") if k in self.flushes)
        return (
            f"BatchResult(instant={self.instant!r}, inserts={inserts}, updates={updates}, deletes={self.num_deletes}, "
            f"moves={self.moved}, files={sum(1 for s in self.stats if s.path)}, flushes=({flushes}))"
        )


def parse_task_results(rows):
    """Write stats, summed flush counts and the keys moved to another partition, from the write tasks' result
    rows."""
    stats, flushes = [], {"bucket": 0, "task": 0, "end": 0, "peak_buffered": 0, "peak_real": 0, "measured": 0}
    moved = 0
    for kind, payload in rows:
        data = json.loads(payload)
        if kind == "stat":
            stats.append(WriteStat.from_dict(data))
        else:
            for cause in ("bucket", "task", "end", "measured"):
                flushes[cause] += data[cause]
            for peak in ("peak_buffered", "peak_real"):
                flushes[peak] = max(flushes[peak], data[peak])
            moved += data.get("moved", 0)
    return stats, flushes, moved


def reconcile_markers(storage, instant, stats):
    """Delete files a failed or speculative task attempt wrote (they have markers but no write stat), as Hudi
    does before completing an instant (a write stat's `.cdc` files, named in its cdcStats, are kept). Returns the
    paths removed."""
    written = {s.path for s in stats} | {p for s in stats for p in s.cdc_stats or {}}
    return [rel for rel, _io in list_markers(storage, instant) if rel not in written and storage.delete(rel)]


def commit(txn, stats, identifier, batch_id, moved=0):
    reconcile_markers(txn.storage, txn.instant, stats)
    txn.add_stats(stats)
    extra = checkpoint_metadata(txn.writer.timeline, identifier, batch_id)
    extra[INDEX_MARK] = "1"  # this instant saved its index state before committing
    extra[RECORDS_MOVED_KEY] = str(moved)  # of the stats' numDeletes, the old copies of keys that moved partition
    txn.commit(extra)
    index_state.write_latest(txn.storage, txn.instant)
    return txn.instant


def discard_empty(txn):
    """Remove an instant that wrote no file: its timeline files, markers directory and index state files."""
    timeline = txn.writer.timeline
    index_state.remove_instant(txn.storage, txn.instant)  # before the instant leaves the timeline (recovery.py)
    timeline.reload()
    for inst in [i for i in timeline.instants if i.timestamp == txn.instant]:
        timeline.delete_instant_files(inst.timestamp, inst.action, only_pending=True)
    delete_markers(txn.storage, txn.instant)
    timeline.reload()


def abort(txn):
    """Roll back a failed instant; without any file written it simply disappears."""
    if not list_markers(txn.storage, txn.instant) and not files_of_instant(txn.storage, txn.instant):
        discard_empty(txn)
        return
    index_state.remove_instant(txn.storage, txn.instant)  # before the instant leaves the timeline (recovery.py)
    txn.rollback()


def task_error(exc):
    """The project's own error a Spark task of the chain raised, rebuilt on the driver with its class and fields
    from the structured line the task's failure carries (see `errors.in_task`); None for any other failure."""
    return rebuild_task_error(exc)
