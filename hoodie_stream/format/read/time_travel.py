"""Which instants a time-travel or incremental query may reach, as Apache Hudi decides it
(TimelineUtils.validateTimestampAsOf, applied to `as.of.instant`; Hudi's incremental query reads the file slices as of
its end instant, so an end the cleaner has passed fails there too, on the first cleaned file)."""

import logging

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


def check_incremental_window(timeline, start: str | None, end: str | None, name: str = "end") -> None:
    """Refuse an incremental window (start, end] that Hudi cannot read. Hudi's incremental query reads, of every file
    group the window's commits wrote, the latest file slice as of `end` made of the files those commits wrote
    (MergeOnReadIncrementalRelation: a file-system view of the commits' files), and fails on the first one a clean
    deleted; so is the window refused here, naming the file."""
    cleaned = cleaned_files(timeline)
    if not cleaned:
        return
    slices: dict[tuple[str, str], dict[str, list[str]]] = {}  # (partition, file id) -> {slice base instant: files}
    for inst in timeline.commits_timeline():
        if (start is not None and inst.timestamp <= start) or (end is not None and inst.timestamp > end):
            continue
        for stat in timeline.read_commit_metadata(inst.timestamp).all_write_stats():
            file_name = (stat.path or "").rpartition("/")[2]
            base, log = parse_base_file_name(file_name), parse_log_file_name(file_name)
            slice_instant = base.instant if base else log.base_instant if log else None
            if slice_instant is not None:
                group = slices.setdefault((stat.partition_path or "", stat.file_id), {})
                group.setdefault(slice_instant, []).append(file_name)
    for (partition, _file_id), group in slices.items():
        gone = [f for f in group[max(group)] if f in cleaned]
        if gone:
            raise HoodieTimeTravelError(
                f"{timeline.hoodie_dir}: the incremental window ({start}, {end}] reads {partition}/{gone[0]}, which a "
                f"clean deleted (the earliest commit retained: {earliest_retained(timeline)}); read from a later "
                f"{name} or retain more commits (clean.retain_commits)"
            )
