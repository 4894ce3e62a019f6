"""Which instants a time-travel or incremental query may reach, as Apache Hudi decides it
(TimelineUtils.validateTimestampAsOf, applied to `as.of.instant`; Hudi's incremental query reads the file slices as of
its end instant, so an end the cleaner has passed fails there too, on the first cleaned file)."""

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from ...errors import HoodieError
from ..avro.models import read_container
from ..file_group.file_names import parse_base_file_name, parse_log_file_name
from ..table.config import TableConfig
from ..timeline.archived import Archived, load_archived_timeline
from ..timeline.commit_metadata import CommitMetadata
from ..timeline.instant import CLEAN, COMMIT, COMMIT_ACTIONS

logger = logging.getLogger(__name__)


class HoodieTimeTravelError(HoodieError):
    """A query instant before what the cleaner retained, or at or after the first incomplete commit."""


def earliest_retained(timeline) -> str | None:
    """The earliest commit whose file slices the latest completed clean kept (its `earliestCommitToRetain`), else,
    after a clean that records none (a file-version policy), the first completed write instant; None when the
    table was never cleaned."""
    cleans = timeline.completed([CLEAN])
    if not cleans:
        return None
    meta = read_container(timeline.read_bytes(cleans[-1]))
    earliest = meta.get("earliestCommitToRetain") or ""
    if earliest:
        return earliest
    writes = timeline.completed((*COMMIT_ACTIONS, COMMIT))  # completed compactions are commits
    return writes[0].timestamp if writes else None


def check_as_of(timeline, as_of: str, name: str = "as_of") -> None:
    """Refuse a time-travel instant that Hudi refuses: at or after the first incomplete commit (a pending delta
    commit could still add to it), or before the earliest commit the cleaner retained (its files may be gone)."""
    pending = timeline.pending(COMMIT_ACTIONS)
    if pending and as_of >= pending[0].timestamp:
        raise HoodieTimeTravelError(
            f"{timeline.hoodie_dir}: time travel's {name} {as_of} must be earlier than the first incomplete commit "
            f"{pending[0].timestamp}"
        )
    check_not_cleaned(timeline, as_of, name)
    warn_before_first_commit(timeline, as_of, name)


def warn_before_first_commit(timeline, as_of: str, name: str = "as_of") -> None:
    """Log a warning when time travel goes to before the table's first completed commit, archived ones included: the
    table was empty then and the query returns no rows (Hudi's time travel answers so too)."""
    commits = timeline.commits_timeline()
    if commits and as_of < commits[0].timestamp and not _archived_commit_by(timeline, as_of):
        logger.warning(
            "%s: time travel's %s %s is before %s, the first completed commit on the timeline: the query returns no rows",
            timeline.hoodie_dir,
            name,
            as_of,
            commits[0].timestamp,
        )


def _archived_commit_by(timeline, as_of: str) -> bool:
    """Whether an archived commit is at or before `as_of` (time travel to it reads the table as it was then)."""
    return any(i.timestamp <= as_of for i in archived_loader(timeline)().completed(COMMIT_ACTIONS))


def check_not_cleaned(timeline, instant: str, name: str) -> None:
    earliest = earliest_retained(timeline)
    if earliest is not None and instant < earliest:
        raise HoodieTimeTravelError(
            f"{timeline.hoodie_dir}: {name} {instant} is before {earliest}, the earliest commit the cleaner retained; "
            f"the files of the table as of {instant} may be gone (retain more commits: clean.retain_commits)"
        )


def check_incremental(table) -> None:
    """Refuse an incremental query of a table written without meta fields, as Hudi does: without
    `_hoodie_commit_time` no record says which commit wrote it."""
    if not table.meta_fields:
        raise HoodieError(
            f"{table.path}: incremental queries are not supported on a table written without meta fields "
            f"(hoodie.populate.meta.fields=false): no record carries the commit that wrote it"
        )


def cleaned_files(timeline) -> set[str]:
    """Names of the files the completed cleans of the active timeline deleted."""
    names: set[str] = set()
    for inst in timeline.completed([CLEAN]):
        meta = read_container(timeline.read_bytes(inst))
        for partition in (meta.get("partitionMetadata") or {}).values():
            names.update(n.rpartition("/")[2] for n in partition.get("successDeleteFiles") or ())
    return names


# -- the commits a window chooses from: the one place that takes archived instants in ------------------------------
ArchivedLoader = Callable[[], Archived]
_ARCHIVED: OrderedDict[tuple[str, str | None], Archived] = OrderedDict()
_ARCHIVED_LOCK = threading.Lock()
_ARCHIVED_ENTRIES = 4


def archived_loader(timeline) -> ArchivedLoader:
    """Loads the archived timeline of `timeline`'s table (`load_archived_timeline`: `.hoodie/archived/` on layout 1,
    the LSM history on layout 2), the last few kept per table and active timeline start (archiving moves the start,
    so a kept one is never stale): a query's check and its read load it once."""

    def load() -> Archived:
        key = (timeline.storage.uri, timeline.timeline_start())
        with _ARCHIVED_LOCK:
            found = _ARCHIVED.get(key)
        if found is None:
            found = load_archived_timeline(timeline.storage, TableConfig.load(timeline.storage).props)
            with _ARCHIVED_LOCK:
                _ARCHIVED[key] = found
                while len(_ARCHIVED) > _ARCHIVED_ENTRIES:
                    _ARCHIVED.popitem(last=False)
        return found

    return load


class WindowCommits:
    """The completed commit-like instants an incremental window over (start, ...] chooses from, oldest first, with
    their commit metadata. As Hudi decides by table version:
    - layout 2 (versions 8, 9; Hudi 1.x's IncrementalQueryAnalyzer): the active timeline's and, when `start` is
      before it (or None), the archived ones of the LSM history too;
    - layout 1 (version 6; Hudi's MergeOnReadIncrementalRelation V1): the active timeline's only. A window starting
      in the archived part still returns the records of archived commits whose file groups an active commit of
      the window wrote (its rows are those with commit times in (start, end]), never those of file groups only
      archived commits wrote (Hudi 0.15 and 1.2 answer so; they read the whole table only with
      hoodie.datasource.read.incr.fallback.fulltablescan.enable)."""

    def __init__(self, timeline, start: str | None, archived: ArchivedLoader | None = None) -> None:
        self.timeline = timeline
        active = timeline.commits_timeline()
        self._active = {i.timestamp for i in active}
        self.archive: Archived | None = None
        if timeline.layout >= 2 and _before_active(timeline, active, start):
            self.archive = (archived or archived_loader(timeline))()
        old = [] if self.archive is None else self.archive.completed(COMMIT_ACTIONS)
        self.instants = sorted([i for i in old if i.timestamp not in self._active] + active, key=lambda i: i.timestamp)

    def is_archived(self, ts: str) -> bool:
        return ts not in self._active

    def metadata(self, ts: str) -> CommitMetadata:
        """The commit metadata of the window's instant `ts` (empty for an archived instant the archive holds none of)."""
        if ts in self._active:
            return self.timeline.read_commit_metadata(ts)
        meta = None if self.archive is None else self.archive.commit_metadata(ts)
        return meta if meta is not None else CommitMetadata()

    def window(self, start: str | None, end: str | None) -> list:
        """The instants of the window over (start, end]. Layout 1: those whose instant time is in (start, end].
        Layout 2: Hudi 1.x reads by completion time, both ends included (IncrementalQueryAnalyzer,
        RangeType.CLOSED_CLOSED): those that completed in [start, end], an archived one only when its instant time
        is at or after `start` too (as Hudi 1.2 answers). None is no bound."""
        if self.timeline.layout < 2:
            return [
                i
                for i in self.instants
                if (start is None or i.timestamp > start) and (end is None or i.timestamp <= end)
            ]
        done = [(i.completion_time or i.timestamp, i) for i in self.instants]
        return [
            i
            for c, i in done
            if (start is None or c >= start)
            and (end is None or c <= end)
            # Hudi 1.2 loads the archived instants from `start` on by instant time (the LSM history's time range):
            # an archived instant requested before `start` is left out even when it completed after it
            and (start is None or not self.is_archived(i.timestamp) or i.timestamp >= start)
        ]

    def file_groups(self, instants) -> set[tuple[str, str]]:
        """The (partition, file id) pairs the commits at `instants` (instant times) wrote."""
        return {
            (stat.partition_path or "", stat.file_id)
            for ts in sorted(instants)
            for stat in self.metadata(ts).all_write_stats()
        }


def _before_active(timeline, active, start: str | None) -> bool:
    """Whether a window from `start` may reach archived instants: no start, or one before the active timeline's
    first write instant and first completion."""
    if start is None:
        return True
    firsts = [timeline.timeline_start()] + [i.completion_time for i in active]
    first = min((t for t in firsts if t), default=None)
    return first is None or start < first


def incremental_instants(timeline, start: str | None, end: str | None, archived: ArchivedLoader | None = None) -> list:
    """The completed commit-like instants an incremental query over (start, end] reads (`WindowCommits`: by
    instant time on layout 1, by completion time on layout 2, archived ones included on layout 2)."""
    return WindowCommits(timeline, start, archived).window(start, end)


class IncrementalWindow(NamedTuple):
    """What an incremental query reads: the commits of the window (`instants`, their instant times), the snapshot
    its records are read as of (`as_of`), and which records it returns (`keep`)."""

    instants: frozenset
    as_of: str | None
    start: str | None
    by_completion: bool  # layout 2: the records the window's commits wrote; layout 1: commit times in (start, as_of]

    def keep(self, commit_times):
        """The mask of the rows (their `_hoodie_commit_time`) the query returns."""
        if self.by_completion:
            return pc.is_in(commit_times, value_set=pa.array(sorted(self.instants), pa.string()))
        keep = pc.less_equal(commit_times, self.as_of)
        return keep if self.start is None else pc.and_(keep, pc.greater(commit_times, self.start))

    def counted(self, committed) -> frozenset:
        """The window's instants that `committed` (a view's `CommittedInstants`: archived ones count) counts: the
        instants whose base files and log blocks the query reads."""
        return frozenset(ts for ts in self.instants if ts in committed)


def incremental_window(
    timeline, start: str | None, end: str | None, archived: ArchivedLoader | None = None
) -> IncrementalWindow:
    """The window of an incremental query over (start, end] (parsed instant times; None: open). Layout 1: read as of
    `end` (or the latest commit), the records with commit times in (start, end]. Layout 2, as Hudi 1.x: read as of
    the window's last commit, the records its commits wrote (archived commits among them)."""
    return incremental_plan(timeline, start, end, archived)[0]


def incremental_plan(
    timeline, start: str | None, end: str | None, archived: ArchivedLoader | None = None
) -> tuple[IncrementalWindow, set[tuple[str, str]]]:
    """The window of an incremental query over (start, end] (`incremental_window`) and the (partition, file id)
    pairs its commits wrote (from the archived commit metadata for archived ones): what a reader reads."""
    commits = WindowCommits(timeline, start, archived)
    instants = frozenset(i.timestamp for i in commits.window(start, end))
    if timeline.layout >= 2:
        window = IncrementalWindow(instants, max(instants, default=None), start, True)
    else:
        active = timeline.commits_timeline()
        window = IncrementalWindow(instants, end or (active[-1].timestamp if active else None), start, False)
    return window, commits.file_groups(instants)


def check_incremental_window(
    timeline, start: str | None, end: str | None, name: str = "end", archived: ArchivedLoader | None = None
) -> None:
    """Refuse an incremental window (start, end] (`WindowCommits.window`) that Hudi cannot read. Hudi's incremental
    query reads, of every file group the window's commits wrote, the latest file slice as of the window's end made
    of the files those commits wrote (a file-system view of the commits' files; the commits of the archived
    timeline among them on layout 2), and fails on the first file that is gone (Hudi 0.15 and 1.2: "File ...
    does not exist"); so is the window refused here, naming the file. A window open at its end reads the latest
    slices, which the cleaner never deletes."""
    commits = WindowCommits(timeline, start, archived)
    window = commits.window(start, end)
    cleaned = cleaned_files(timeline)
    reaches_archive = any(commits.is_archived(i.timestamp) for i in window)
    if not cleaned and not reaches_archive:
        return
    completion = {i.timestamp: i.completion_time or i.timestamp for i in commits.instants}
    slices: dict[tuple[str, str], dict[str, list[str]]] = {}  # (partition, file id) -> {slice base instant: files}
    logs: dict[tuple[str, str], list[tuple[str, str]]] = {}  # layout 2: (partition, file id) -> [(completion, file)]
    for inst in window:
        for stat in commits.metadata(inst.timestamp).all_write_stats():
            file_name = (stat.path or "").rpartition("/")[2]
            group_key = (stat.partition_path or "", stat.file_id)
            base, log = parse_base_file_name(file_name), parse_log_file_name(file_name)
            if base is not None:
                slices.setdefault(group_key, {}).setdefault(base.instant, []).append(file_name)
            elif log is not None and timeline.layout < 2:
                slices.setdefault(group_key, {}).setdefault(log.base_instant, []).append(file_name)
            elif log is not None:  # layout 2: a log file's name carries the delta commit that wrote it
                logs.setdefault(group_key, []).append((completion.get(inst.timestamp, inst.timestamp), file_name))
    listed: dict[str, set[str]] = {}
    for group_key in sorted(set(slices) | set(logs)):
        partition = group_key[0]
        group = slices.get(group_key, {})
        latest = max(group, default=None)
        files = list(group[latest]) if latest is not None else []
        # layout 2, as Hudi 1.x slices a file group: a log file joins the slice with the greatest base instant at or
        # before its commit's completion time (with no base file of the window's, the logs make one slice)
        files += [f for done, f in logs.get(group_key, ()) if latest is None or done >= latest]
        if reaches_archive and partition not in listed:
            listed[partition] = {info.name for info in timeline.storage.list(partition)}
        gone = [f for f in files if f in cleaned or (partition in listed and f not in listed[partition])]
        if gone:
            raise HoodieTimeTravelError(
                f"{timeline.hoodie_dir}: the incremental window ({start}, {end}] reads {partition}/{gone[0]}, which a "
                f"clean deleted (the earliest commit retained: {earliest_retained(timeline)}); read from a later "
                f"{name} or retain more commits (clean.retain_commits)"
            )
