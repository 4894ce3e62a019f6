"""Timeline archiving: move old instants from the active timeline to the archived timeline, choosing them as Hudi
0.15's HoodieTimelineArchiver (and Hudi 1.x's TimelineArchiverV2, the same rules) does for a table without a
metadata table. Table version 6 (timeline layout 1): from `.hoodie/` to `.hoodie/archived/`; versions 8 and 9
(layout 2): from `.hoodie/timeline/` to the LSM history `.hoodie/timeline/history/` (lsm_history.py).

Which instants (`instants_to_archive`):
- the bounds: `hoodie.keep.min.commits` / `hoodie.keep.max.commits`, raised as Hudi's ArchivalUtils raises them when
  the cleaner retains more: with an earliest commit to retain (CleanerUtils.getEarliestCommitToRetain under
  `clean.policy`, `clean.retain_commits`, `clean.retain_hours`), min becomes (completed commits after it) + 2 when
  that is larger, and max keeps its distance to min;
- completed commits, delta commits and replace commits (a completed compaction is a commit), only when more than max
  are active, oldest first, at most (count - min) of them, each older than: the first savepoint; the newest
  completed commit before the oldest pending write (any pending commit, delta commit, compaction, log compaction or
  replace commit); with the `num_commits` or `num_and_time` compaction trigger, the instant from which the last
  `compaction.delta_commits` delta commits since the last completed compaction stay (CompactionUtils
  .getOldestInstantToRetainForCompaction); and the replace commits the last clean still needs (ClusteringUtils);
- completed cleans and completed rollbacks, each action on its own: when more than max, the oldest (count - min).
Savepoints, restores and pending instants stay. Records go rollbacks first, then cleans, then commits (Hudi's order);
each instant's timeline files (requested, inflight, completed) are adjacent, in that order.

How (`archive`): the chosen instants' marker directories are deleted, their records written as one new archive file
(the next version, created whole or not at all), then their timeline files deleted: requested and inflight files
first, then completed files in ascending order, so that the active timeline stays a contiguous suffix. A run
interrupted by a crash is finished by the next one: an active instant whose completed record the archive holds
already (a crash before its files were deleted) is not written again, only deleted, the older leftovers first.
Then small archive files are merged (`hoodie.archive.merge.enable`, archive_merge.py); a merge a crash interrupted
is settled first.

Layout 2, as TimelineArchiverV2: the chosen instants, ordered by instant time, become one HoodieLSMTimelineInstant row
each (`lsm_history.lsm_instant`) in a new history file and snapshot (`write_history_file`); their marker directories
and timeline files are then deleted in the order above, and the history's layers compacted (`compact_history`:
`hoodie.timeline.compaction.batch.size`, `hoodie.timeline.manifest.retained.versions`). A chosen instant the latest
snapshot holds already, and any other active instant it holds (a run that crashed before deleting their files),
is not written again, only deleted.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence

from ..format.table.config import TableConfig
from ..format.table.markers import marker_dir
from ..format.timeline.active_timeline import Timeline
from ..format.timeline.archived_timeline import (
    archive_files,
    meta_entry,
    read_archive_keys,
    state_transition_time,
    write_archive_file,
)
from ..format.timeline.instant import (
    CLEAN,
    COMMIT,
    COMPACTION,
    COMPLETED,
    DELTA_COMMIT,
    INFLIGHT,
    LOG_COMPACTION,
    REPLACE_COMMIT,
    REQUESTED,
    ROLLBACK,
    SAVEPOINT,
    STATE_ORDER,
    Instant,
    format_instant,
    instant_to_datetime,
)
from ..format.timeline.lsm_history import LSMHistory, compact_history, history_dir, lsm_instant, write_history_file
from ..options import CompactionOptions
from ..storage import FileInfo, Storage, storage_for
from .archive_merge import finish_interrupted_merge, merge_small_archive_files
from .clean import clean

log = logging.getLogger(__name__)

WRITE_ACTIONS = (COMMIT, DELTA_COMMIT, COMPACTION, LOG_COMPACTION, REPLACE_COMMIT)  # Hudi's write timeline
COMPACTION_RETAINING_TRIGGERS = ("num_commits", "num_and_time")


# -- the bounds -------------------------------------------------------------------------------------------------
def earliest_commit_to_retain(timeline: Timeline, opts: CompactionOptions, now: float | None = None) -> Instant | None:
    """The earliest commit the cleaner policy retains, as Hudi's CleanerUtils.getEarliestCommitToRetain computes it
    from the cleaner options (not from clean metadata)."""
    completed = timeline.commits_timeline()
    if opts.clean_policy == "KEEP_LATEST_COMMITS":
        if len(completed) <= opts.retain_commits:
            return None
        nth = completed[len(completed) - opts.retain_commits]
        pending = [i for i in timeline.pending([COMMIT, DELTA_COMMIT, REPLACE_COMMIT])]
        if pending and nth.timestamp > pending[0].timestamp:
            before = [i for i in completed if i.timestamp < pending[0].timestamp]
            return before[-1] if before else None
        return nth
    if opts.clean_policy == "KEEP_LATEST_BY_HOURS":
        if completed:
            latest = instant_to_datetime(completed[-1].timestamp)
        else:
            latest = datetime.datetime.fromtimestamp(now or datetime.datetime.now().timestamp(), datetime.timezone.utc)
        if latest is None:
            return None
        bound = format_instant(latest - datetime.timedelta(hours=opts.retain_hours))
        return next((i for i in completed if i.timestamp >= bound), None)
    return None


def keep_bounds(timeline: Timeline, opts: CompactionOptions, now: float | None = None) -> tuple[int, int]:
    """(min, max) instants to keep (ArchivalUtils.getMinAndMaxInstantsToKeep)."""
    low, high = opts.keep_min_commits, opts.keep_max_commits
    ectr = earliest_commit_to_retain(timeline, opts, now)
    if ectr is not None:
        by_cleaning = sum(1 for i in timeline.commits_timeline() if i.timestamp > ectr.timestamp) + 2
        if low < by_cleaning:
            log.warning(
                "%s: hoodie.keep.min.commits=%d keeps fewer commits than the cleaner retains (from %s): archiving "
                "keeps %d and runs past %d",
                timeline.hoodie_dir,
                low,
                ectr.timestamp,
                by_cleaning,
                by_cleaning + high - low,
            )
            return by_cleaning, by_cleaning + high - low
    return low, high


# -- retention rules --------------------------------------------------------------------------------------------
def oldest_to_retain_for_compaction(timeline: Timeline, max_delta_commits: int) -> str | None:
    """From which instant the last `max_delta_commits` delta commits since the last completed compaction (of any
    state) stay, or the last compaction (the first delta commit) while there are fewer."""
    compactions = timeline.completed([COMMIT])
    last = compactions[-1].timestamp if compactions else None
    deltas = [
        i.timestamp for i in timeline.instants if i.action == DELTA_COMMIT and (last is None or i.timestamp > last)
    ]
    if last is None and not deltas:
        return None
    if len(deltas) < max_delta_commits:
        return last if last is not None else deltas[0]
    return deltas[len(deltas) - max_delta_commits]


def oldest_to_retain_for_clustering(timeline: Timeline) -> str | None:
    """The oldest replace commit the last completed clean may still need (ClusteringUtils)."""
    replaces = [i for i in timeline.instants if i.action == REPLACE_COMMIT]
    if not replaces:
        return None
    cleans = timeline.completed([CLEAN])
    oldest: str | None
    if cleans:
        plan = timeline.read_avro(Instant(cleans[-1].timestamp, CLEAN, REQUESTED))
        earliest = (plan.get("earliestInstantToRetain") or {}).get("timestamp") or cleans[-1].timestamp
        oldest = next((i.timestamp for i in replaces if i.timestamp >= earliest), None)
    else:
        oldest = replaces[0].timestamp
    inflight = [i for i in replaces if i.state == INFLIGHT]
    if inflight:
        before = [i.timestamp for i in timeline.commits_timeline() if i.timestamp < inflight[0].timestamp]
        if before and (oldest is None or oldest > before[-1]):
            oldest = before[-1]
    return oldest


def commit_instants_to_archive(timeline: Timeline, opts: CompactionOptions, low: int, high: int) -> list[Instant]:
    commits = timeline.commits_timeline()
    if len(commits) <= high:
        return []
    limits = []
    pending = [i for i in timeline.instants if i.action in WRITE_ACTIONS and i.state != COMPLETED]
    if pending:
        before = [i.timestamp for i in commits if i.timestamp < pending[0].timestamp]
        limits.append(before[-1] if before else pending[0].timestamp)
    savepoints = timeline.completed([SAVEPOINT])
    if savepoints:
        limits.append(savepoints[0].timestamp)
    if opts.trigger in COMPACTION_RETAINING_TRIGGERS:
        limits.append(oldest_to_retain_for_compaction(timeline, opts.delta_commits))
    limits.append(oldest_to_retain_for_clustering(timeline))
    bound = min((t for t in limits if t is not None), default=None)
    chosen = [i for i in commits if bound is None or i.timestamp < bound]
    return chosen[: len(commits) - low]


def clean_instants_to_archive(timeline: Timeline, low: int, high: int) -> list[Instant]:
    """Completed rollbacks, then completed cleans: of each action, the oldest (count - min) when over max."""
    out: list[Instant] = []
    for action in (ROLLBACK, CLEAN):
        done = timeline.completed([action])
        if len(done) > high:
            out += done[: len(done) - low]
    return out


def instants_to_archive(timeline: Timeline, opts: CompactionOptions, now: float | None = None) -> list[Instant]:
    """The completed instants an archiving run takes, in the order their records are written."""
    low, high = keep_bounds(timeline, opts, now)
    return clean_instants_to_archive(timeline, low, high) + commit_instants_to_archive(timeline, opts, low, high)


# -- the run ----------------------------------------------------------------------------------------------------
def _state_files(timeline: Timeline) -> dict[tuple[str, str], list[tuple[Instant, FileInfo]]]:
    """Every timeline file by (instant time, action group), in state order."""
    grouped: dict[tuple[str, str], list[tuple[Instant, FileInfo]]] = {}
    for info in timeline.storage.list(timeline.dir):
        inst = Instant.from_file_name(info.name, timeline.layout >= 2)
        if inst is not None:
            grouped.setdefault((inst.timestamp, inst.comparable_action), []).append((inst, info))
    for files in grouped.values():
        files.sort(key=lambda f: STATE_ORDER[f[0].state])
    return grouped


def _archived_leftovers(storage: Storage, folder: str, active: set[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The active instants (time, action of the completed file) whose completed record the archive holds, per
    archive file, oldest file first: runs that crashed before deleting them. Files are read newest first down to
    the first holding no active instant (a run deletes the leftovers of older files before its own instants, so
    only the newest files can hold any)."""
    found: list[list[tuple[str, str]]] = []
    for _version, info in reversed(archive_files(storage, folder)):
        keys = read_archive_keys(storage, info.path)
        hits = sorted({(ts, action) for ts, action, state in keys if state == COMPLETED and (ts, action) in active})
        if not hits:
            break
        found.insert(0, hits)
    return found


def archive(
    storage: Storage | str, timeline: Timeline, opts: CompactionOptions, now: float | None = None
) -> list[Instant]:
    """Archive what Hudi 0.15 would archive now (see the module docstring); returns the instants moved out of the
    active timeline (those a crashed run had archived included), in the order their files were deleted."""
    storage = storage_for(storage)
    timeline.reload()
    chosen = instants_to_archive(timeline, opts, now)
    if not chosen:  # what a crashed run left stays until the next run that archives (its instants are the oldest)
        return []
    props = TableConfig.load(storage).props
    if timeline.layout >= 2:
        return _archive_to_history(storage, timeline, opts, history_dir(props), chosen)
    folder = props.get("hoodie.archivelog.folder") or "archived"
    finish_interrupted_merge(storage, folder)
    by_key = {(i.timestamp, i.action): i for i in timeline.completed()}
    leftovers = _archived_leftovers(storage, folder, set(by_key))
    done = {key for hits in leftovers for key in hits}
    new = [i for i in chosen if (i.timestamp, i.action) not in done]
    if not new and not leftovers:
        return []
    files = _state_files(timeline)
    entries = []
    for inst in new:
        for state_inst, info in files.get((inst.timestamp, inst.comparable_action), []):
            content = storage.read(f"{timeline.dir}/{info.name}")
            entries.append(meta_entry(state_inst, content, info.mtime))
    path = write_archive_file(storage, entries, opts.archival_batch, folder)
    if path is not None:
        log.info("%s: archived %d instants into %s", timeline.hoodie_dir, len(new), storage.uri_of(path))
    moved: list[Instant] = []
    for group in [[by_key[k] for k in hits] for hits in leftovers] + [new]:
        _delete(timeline, files, group)
        moved += group
    if path is not None and opts.archive_merge:
        merge_small_archive_files(storage, folder, opts.archive_merge_files, opts.archive_merge_small_bytes)
    return moved


def _archive_to_history(
    storage: Storage, timeline: Timeline, opts: CompactionOptions, directory: str, chosen: list[Instant]
) -> list[Instant]:
    """Layout 2: the chosen instants into the LSM history, then out of the active timeline (module docstring)."""
    chosen = sorted(chosen, key=lambda i: i.timestamp)
    completed = timeline.completed()
    held = LSMHistory.load(storage, directory, end=completed[-1].timestamp, columns=()).completed_times()
    taken = {(i.timestamp, i.action) for i in chosen}
    leftovers = [i for i in completed if i.timestamp in held and (i.timestamp, i.action) not in taken]
    files = _state_files(timeline)
    rows = []
    for inst in chosen:
        if inst.timestamp in held:
            continue
        group = files.get((inst.timestamp, inst.comparable_action), [])
        contents = {
            state_inst.state: (state_inst, storage.read(f"{timeline.dir}/{info.name}")) for state_inst, info in group
        }
        done = next((info for state_inst, info in group if state_inst.state == COMPLETED), None)
        rows.append(lsm_instant(inst, contents, state_transition_time(done.mtime) if done else inst.timestamp))
    path = write_history_file(storage, directory, rows)
    if path is not None:
        log.info("%s: archived %d instants into %s", timeline.hoodie_dir, len(rows), storage.uri_of(path))
    moved = sorted(leftovers + chosen, key=lambda i: i.timestamp)
    _delete(timeline, files, moved)
    compact_history(
        storage,
        directory,
        opts.timeline_compaction_batch,
        opts.timeline_compaction_max_bytes,
        opts.timeline_manifest_retained,
    )
    return moved


def clean_and_archive(storage: Storage, opts: CompactionOptions, timeline: Timeline | None = None) -> int:
    """Clean, then archive the timeline when `hoodie.archive.automatic` (Hudi's post-commit order: the archiving
    run sees the clean's instant and the commits it retains). Returns the number of files the clean deleted."""
    timeline = timeline or Timeline(storage)
    deleted = clean(storage, timeline, opts)
    if opts.archive_automatic:
        archive(storage, timeline, opts)
    return deleted


def _delete(timeline: Timeline, files: dict, instants: Sequence[Instant]) -> None:
    """Delete the timeline files of archived instants: requested and inflight files, then completed files in
    ascending order (HUDI-7207: no hole in the active timeline)."""
    if not instants:
        return
    storage = timeline.storage
    for inst in instants:
        storage.delete_tree(marker_dir(inst.timestamp))
    groups = [files.get((i.timestamp, i.comparable_action), []) for i in instants]
    pending = [inst.file_name for group in groups for inst, _info in group if inst.state != COMPLETED]
    completed = sorted((inst.file_name for group in groups for inst, _info in group if inst.state == COMPLETED))
    timeline.delete_files(pending + completed)
