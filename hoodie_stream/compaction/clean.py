"""Cleaning: remove file slices nobody needs any more, with Hudi's clean plan and metadata.

Policies (`clean.policy`):
- KEEP_LATEST_COMMITS (`clean.retain_commits`): every completed commit among the last N can still be read (time
  travel, incremental windows): per file group, the slices newer than the earliest retained commit and the slice
  that was current at that commit are kept;
- KEEP_LATEST_BY_HOURS (`clean.retain_hours`): the same, the earliest retained commit being the oldest one of the
  last N hours;
- KEEP_LATEST_FILE_VERSIONS (`clean.retain_file_versions`): per file group, the N latest slices.
The latest slice of a file group, and every slice of a file group in a pending compaction, are always kept.
A clean goes requested (HoodieCleanerPlan) -> inflight -> completed (HoodieCleanMetadata); a clean a crash
interrupted is finished from its plan (deleting again is harmless).
"""

import time

from ..errors import HoodieStorageError
from ..format.avro.models import read_container, write_container
from ..format.file_group.fs_view import FileSystemView
from ..format.timeline.instant import Instant, instant_to_datetime
from ..storage import join, storage_for
from .plan import pending_file_groups

PLAN_VERSION = 2


def earliest_retained(timeline, opts, now=None):
    """The earliest commit every read must still be able to see, or None when nothing can be cleaned."""
    commits = timeline.commits_timeline()
    if opts.clean_policy == "KEEP_LATEST_COMMITS":
        if len(commits) <= opts.retain_commits:
            return None
        return commits[-opts.retain_commits]
    if opts.clean_policy == "KEEP_LATEST_BY_HOURS":
        limit = (time.time() if now is None else now) - opts.retain_hours * 3600
        recent = [c for c in commits if instant_to_datetime(c.timestamp).timestamp() >= limit]
        if not recent or recent[0] is commits[0]:
            return None
        return recent[0]
    return None


def files_to_clean(storage, timeline, opts, now=None):
    """({partition: [file names]}, earliest retained instant or None)."""
    view = FileSystemView(storage, timeline)
    busy = pending_file_groups(timeline)
    earliest = None
    if opts.clean_policy != "KEEP_LATEST_FILE_VERSIONS":
        earliest = earliest_retained(timeline, opts, now)
        if earliest is None:
            return {}, None
    doomed = {}
    for group in view.file_groups():
        if (group.partition, group.file_id) in busy:
            continue
        slices = view.slices(group)
        if len(slices) <= 1:
            continue
        if earliest is None:
            keep_from = len(slices) - opts.retain_file_versions
        else:
            # the newest slice whose base instant <= the earliest retained commit serves reads as of that commit
            at_or_before = [i for i, s in enumerate(slices) if s.base_instant <= earliest.timestamp]
            keep_from = at_or_before[-1] if at_or_before else 0
        keep_from = min(max(0, keep_from), len(slices) - 1)
        for s in slices[:keep_from]:
            # a slice's `.cdc` files go with it, as Hudi's cleaner removes them
            names = (
                ([s.base_file] if s.base_file else []) + s.log_file_names() + group.cdc_files.get(s.base_instant, [])
            )
            if names:
                doomed.setdefault(group.partition, []).extend(names)
    return doomed, earliest


def schedule_clean(storage, timeline, opts, now=None):
    """Write a clean plan when there is something to clean. Returns its instant or None."""
    storage = storage_for(storage)
    timeline.reload()
    if timeline.pending(["clean"]):
        return None
    doomed, earliest = files_to_clean(storage, timeline, opts, now)
    if not doomed:
        return None
    plan = {
        "earliestInstantToRetain": (
            {"timestamp": earliest.timestamp, "action": earliest.action, "state": "COMPLETED"} if earliest else None
        ),
        "lastCompletedCommitTimestamp": timeline.commits_timeline()[-1].timestamp,
        "policy": opts.clean_policy,
        "filesToBeDeletedPerPartition": {},
        "version": PLAN_VERSION,
        "filePathsToBeDeletedPerPartition": {
            p: [{"filePath": _path(storage, p, n), "isBootstrapBaseFile": False} for n in names]
            for p, names in doomed.items()
        },
        "partitionsToBeDeleted": [],
    }
    return timeline.create_new("clean", write_container("HoodieCleanerPlan", plan))


def _path(storage, partition, name):
    """A file's full path as Hudi records it in a clean plan (`file:` + the absolute path for a local table)."""
    uri = storage.uri_of(join(partition, name))
    return uri if "://" in uri else "file:" + uri


def execute_clean(storage, timeline, instant):
    """Run a planned clean: requested -> inflight -> delete the files -> completed with its metadata."""
    storage = storage_for(storage)
    started = time.time()
    timeline.reload()
    plan = read_container(timeline.read_bytes(Instant(instant, "clean", "requested")))
    inst = timeline.get(instant)
    if inst.is_requested:
        timeline.transition_to_inflight(instant, "clean", write_container("HoodieCleanerPlan", plan))
    partitions = {}
    total = 0
    for partition, infos in (plan.get("filePathsToBeDeletedPerPartition") or {}).items():
        ok, failed, patterns = [], [], []
        for info in infos:
            path = storage.relative(info["filePath"])
            name = path.rpartition("/")[2]
            patterns.append(name)
            try:
                storage.delete(path)  # False when an earlier, interrupted run of this clean deleted it
                ok.append(name)
            except (HoodieStorageError, OSError):
                failed.append(name)
        total += len(ok)
        partitions[partition] = {
            "partitionPath": partition,
            "policy": plan["policy"],
            "deletePathPatterns": patterns,
            "successDeleteFiles": ok,
            "failedDeleteFiles": failed,
            "isPartitionDeleted": False,
        }
    earliest = plan.get("earliestInstantToRetain")
    meta = {
        "startCleanTime": instant,
        "timeTakenInMillis": int((time.time() - started) * 1000),
        "totalFilesDeleted": total,
        "earliestCommitToRetain": earliest["timestamp"] if earliest else "",
        "lastCompletedCommitTimestamp": plan.get("lastCompletedCommitTimestamp") or "",
        "partitionMetadata": partitions,
        "version": PLAN_VERSION,
        "bootstrapPartitionMetadata": {},
    }
    timeline.complete(instant, "clean", write_container("HoodieCleanMetadata", meta))
    return total


def finish_pending_cleans(storage, timeline):
    done = []
    for inst in timeline.pending(["clean"]):
        execute_clean(storage, timeline, inst.timestamp)
        done.append(inst.timestamp)
    return done


def clean(storage, timeline, opts, now=None):
    """Plan and run a clean. Returns the number of files deleted."""
    storage = storage_for(storage)
    finish_pending_cleans(storage, timeline)
    instant = schedule_clean(storage, timeline, opts, now)
    return execute_clean(storage, timeline, instant) if instant else 0
