"""`rollback INSTANT`: roll back a pending write, or the last completed delta commit, as Hudi does, under the
table's writer lease.

- a pending (requested or inflight) delta commit, commit or replace commit: its files are deleted and a rollback
  instant recorded (`format/write/rollback.py`, what a sink's recovery does), and the index state files it wrote removed;
- an inflight compaction: reverted to requested (its new base files removed; the plan stays, `compact` runs it);
- the last completed delta commit: refused when anything but cleans and rollbacks came after it, or when one of
  its log files holds blocks of other instants (Hudi would append a rollback command block; hoodie-stream's writers
  never append to a log file, so a file of its own write is deleted whole). Otherwise a rollback plan naming the
  files its write stats list is written, the instant's timeline files are removed (from then on no reader sees it:
  a crash leaves a pending rollback that the next writer finishes), its files deleted and the rollback completed.
  The index state, which covered that instant, is marked stale: the sink's next micro-batch rebuilds it.
Anything else (a requested compaction plan, a clean, a completed compaction or commit) is refused with the reason.
"""

from __future__ import annotations

from typing import Any

from ..checkpoints import index_state
from ..compaction.commit import revert_to_requested
from ..errors import HoodieError
from ..format.avro.models import write_container
from ..format.file_group.file_names import parse_base_file_name, parse_log_file_name
from ..format.log_file.log_block import HeaderKey
from ..format.log_file.reader import read_log_file
from ..format.table.config import TableConfig
from ..format.table.lock import TableLease
from ..format.timeline.active_timeline import Timeline
from ..format.timeline.instant import COMMIT_ACTIONS, COMPACTION, DELTA_COMMIT, LOG_COMPACTION, REPLACE_COMMIT, Instant
from ..format.write import rollback as rollbacks
from ..options import parse_table_service_options
from ..storage import Storage, join, storage_for

# actions after a completed delta commit that forbid rolling it back (they may build on its files)
_BUILDS_ON = (*COMMIT_ACTIONS, COMPACTION, LOG_COMPACTION)


class RollbackRefused(HoodieError):
    """The instant cannot be rolled back safely; the message says why."""


def _has_index_state(storage: Storage) -> bool:
    return bool(storage.list(index_state.INDEX_DIR, recursive=True))


def _files_of_completed(storage: Storage, timeline: Timeline, inst: Instant) -> list[str]:
    """Relative paths of the files a completed delta commit wrote, each checked to hold nothing of another instant."""
    ts = inst.timestamp
    later = [i for i in timeline.instants if i.timestamp > ts and i.action in _BUILDS_ON]
    if later:
        names = ", ".join(f"{i.timestamp} ({i.action}, {i.state})" for i in later)
        raise RollbackRefused(f"delta commit {ts} is not the last write of the table: {names} came after it")
    meta = timeline.read_commit_metadata(ts)
    files = set()
    for partition, stats in meta.partition_to_write_stats.items():
        for stat in stats:
            if not stat.path:
                continue
            rel = stat.path if "/" in stat.path or not partition else join(partition, stat.path)
            name = rel.rpartition("/")[2]
            base = parse_base_file_name(name)
            if base is not None and base.instant != ts:
                raise RollbackRefused(f"{rel}: a base file of instant {base.instant} in delta commit {ts}'s stats")
            if parse_log_file_name(name) is not None and storage.exists(rel):
                others = {b.header.get(HeaderKey.INSTANT_TIME) for b in read_log_file(storage, rel)} - {ts, None}
                if others:
                    raise RollbackRefused(
                        f"{rel} also holds log blocks of instant(s) {', '.join(sorted(others))}: rolling back {ts} "
                        "would need a rollback command block, which hoodie-stream does not write"
                    )
            files.add(rel)
            # the `.cdc` files its log files logged their changes in go with them
            files.update(p for p in stat.cdc_stats or {} if storage.exists(p))
    return sorted(files | set(rollbacks.files_of_instant(storage, ts)))


def _rollback_completed(storage: Storage, timeline: Timeline, inst: Instant) -> tuple[str, list[str]]:
    files = _files_of_completed(storage, timeline, inst)
    plan = {
        "instantToRollback": {"commitTime": inst.timestamp, "action": inst.action},
        "RollbackRequests": [
            {
                "partitionPath": rel.rpartition("/")[0],
                "fileId": "",
                "latestBaseInstant": inst.timestamp,
                "filesToBeDeleted": [storage.uri_of(rel)],
                "logBlocksToBeDeleted": {},
            }
            for rel in files
        ],
        "version": 1,
    }
    ts = timeline.create_new("rollback", write_container("HoodieRollbackPlan", plan))
    timeline.transition_to_inflight(ts, "rollback", b"")
    # the instant disappears first: a crash from here on leaves a pending rollback of a pending instant
    timeline.delete_instant_files(inst.timestamp, inst.action, only_pending=False)
    rollbacks._execute(storage, timeline, ts, plan)
    return ts, files


def _newest_rollback(timeline: Timeline) -> str | None:
    timeline.reload()
    done = timeline.completed(["rollback"])
    return done[-1].timestamp if done else None


def rollback(
    path: str, instant: str, options: dict[str, str] | None = None, storage_options: dict[str, str] | None = None
) -> dict[str, Any]:
    """Roll back `instant` (see the module docstring); returns what was done."""
    storage = storage_for(path, storage_options)
    _opts, lock_opts = parse_table_service_options(options)
    TableConfig.load(storage)
    with TableLease(storage, lock_opts, query="cli-rollback"):
        timeline = Timeline(storage)
        rollbacks.finish_pending_rollbacks(storage, timeline)
        timeline.reload()
        inst = timeline.get(instant)
        if inst is None:
            raise RollbackRefused(f"{storage.uri}: no instant {instant} on the active timeline")
        result: dict[str, Any] = {"instant": instant, "action": inst.action, "state": inst.state, "files": []}
        if inst.action in COMMIT_ACTIONS and not inst.is_completed:
            result["files"] = rollbacks.files_of_instant(storage, instant)
            index_state.remove_instant(storage, instant)  # before the instant leaves the timeline
            rollbacks.rollback_instant(storage, timeline, inst)
            result["rollback_instant"] = _newest_rollback(timeline)
            result["index_state"] = "files of the instant removed"
        elif inst.action == COMPACTION and inst.is_inflight:
            revert_to_requested(storage, timeline, instant)
            result["rollback_instant"] = None
            result["index_state"] = "unchanged"
            result["note"] = "the compaction was reverted to requested; its plan stays (run it with `compact`)"
        elif inst.action == DELTA_COMMIT and inst.is_completed:
            result["rollback_instant"], result["files"] = _rollback_completed(storage, timeline, inst)
            if _has_index_state(storage):
                index_state.remove_instant(storage, instant)
                index_state.write_latest(storage, "")  # not current: the next micro-batch rebuilds it
                result["index_state"] = "marked stale: the sink's next micro-batch rebuilds it"
            else:
                result["index_state"] = "none"
        elif inst.action == COMPACTION:
            raise RollbackRefused(f"compaction {instant} is only planned (requested): nothing to roll back")
        elif inst.is_completed and inst.action in (REPLACE_COMMIT, "commit"):
            raise RollbackRefused(
                f"{inst.action} {instant} is completed: only the last completed delta commit can be rolled back"
            )
        else:
            raise RollbackRefused(f"{inst.action} {instant} ({inst.state}) is not a write: it is not rolled back")
    return result


def rollback_text(result: dict[str, Any]) -> str:
    lines = [
        f"rolled back {result['action']} {result['instant']} ({result['state']})"
        + (f" with rollback instant {result['rollback_instant']}" if result.get("rollback_instant") else ""),
        f"  files deleted: {len(result['files'])}",
    ]
    lines += [f"    {f}" for f in result["files"]]
    lines.append(f"  index state: {result.get('index_state')}")
    if result.get("note"):
        lines.append(f"  {result['note']}")
    return "\n".join(lines)
