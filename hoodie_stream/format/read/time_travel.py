"""Which instants a time-travel or incremental query may reach, as Apache Hudi decides it
(TimelineUtils.validateTimestampAsOf, applied to `as.of.instant`; Hudi's incremental query reads the file slices as of
its end instant, so an end the cleaner has passed fails there too, on the first cleaned file)."""

import logging
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from ...errors import HoodieError
from ..avro.models import read_container
from ..file_group.file_names import parse_base_file_name, parse_log_file_name
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
    """Log a warning when time travel goes to before the table's first completed commit: the table was empty then
    and the query returns no rows (Hudi's time travel answers so too)."""
    commits = timeline.commits_timeline()
    if commits and as_of < commits[0].timestamp:
        logger.warning(
            "%s: time travel's %s %s is before %s, the first completed commit on the timeline: the query returns no rows",
            timeline.hoodie_dir,
            name,
            as_of,
            commits[0].timestamp,
        )


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


def incremental_instants(timeline, start: str | None, end: str | None) -> list:
    """The completed commit-like instants an incremental query over (start, end] reads. Layout 1 (table version 6):
    those whose instant time is in (start, end]. Layout 2 (versions 8, 9): Hudi 1.x reads by completion time, both
    ends included (IncrementalQueryAnalyzer, RangeType.CLOSED_CLOSED): those that completed in [start, end]. None
    is no bound."""
    commits = timeline.commits_timeline()
    if timeline.layout < 2:
        return [i for i in commits if (start is None or i.timestamp > start) and (end is None or i.timestamp <= end)]
    done = [(i.completion_time or i.timestamp, i) for i in commits]
    return [i for c, i in done if (start is None or c >= start) and (end is None or c <= end)]


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


def incremental_window(timeline, start: str | None, end: str | None) -> IncrementalWindow:
    """The window of an incremental query over (start, end] (parsed instant times; None: open). Layout 1: read as of
    `end` (or the latest commit), the records with commit times in (start, end]. Layout 2, as Hudi 1.x: read as of
    the window's last commit, the records its commits wrote."""
    window = incremental_instants(timeline, start, end)
    instants = frozenset(i.timestamp for i in window)
    if timeline.layout >= 2:
        return IncrementalWindow(instants, max(instants, default=None), start, True)
    commits = timeline.commits_timeline()
    return IncrementalWindow(instants, end or (commits[-1].timestamp if commits else None), start, False)


def check_incremental_window(timeline, start: str | None, end: str | None, name: str = "end") -> None:
    """Refuse an incremental window (start, end] (by completion time on layout 2: `incremental_instants`) that Hudi
    cannot read. Hudi's incremental query reads, of every file
    group the window's commits wrote, the latest file slice as of `end` made of the files those commits wrote
    (MergeOnReadIncrementalRelation: a file-system view of the commits' files), and fails on the first one a clean
    deleted; so is the window refused here, naming the file."""
    cleaned = cleaned_files(timeline)
    if not cleaned:
        return
    slices: dict[tuple[str, str], dict[str, list[str]]] = {}  # (partition, file id) -> {slice base instant: files}
    for inst in incremental_instants(timeline, start, end):
        for stat in timeline.read_commit_metadata(inst.timestamp).all_write_stats():
            file_name = (stat.path or "").rpartition("/")[2]
            base, log = parse_base_file_name(file_name), parse_log_file_name(file_name)
            slice_instant = base.instant if base else log.base_instant if log else None
            if slice_instant is not None:
                group = slices.setdefault((stat.partition_path or "", stat.file_id), {})
                group.setdefault(slice_instant, []).append(file_name)
    for (partition, _file_id), group in slices.items():
        # layout 2: a log file's name carries the commit that wrote it, not its slice: every file the window's
        # commits wrote counts (a cleaned one refuses the window rather than leaving rows out)
        files = group[max(group)] if timeline.layout < 2 else [f for fs in group.values() for f in fs]
        gone = [f for f in files if f in cleaned]
        if gone:
            raise HoodieTimeTravelError(
                f"{timeline.hoodie_dir}: the incremental window ({start}, {end}] reads {partition}/{gone[0]}, which a "
                f"clean deleted (the earliest commit retained: {earliest_retained(timeline)}); read from a later "
                f"{name} or retain more commits (clean.retain_commits)"
            )
