"""Which instants a time-travel or incremental query may reach, as Apache Hudi decides it
(TimelineUtils.validateTimestampAsOf, applied to `as.of.instant`; Hudi's incremental query reads the file slices as of
its end instant, so an end the cleaner has passed fails there too, on the first cleaned file)."""

from ..errors import HoodieError
from .avro_models import read_container
from .instant import CLEAN, COMMIT, COMMIT_ACTIONS, COMPLETED, Instant


class HoodieTimeTravelError(HoodieError):
    """A query instant before what the cleaner retained, or at or after the first incomplete commit."""


def earliest_retained(timeline) -> str | None:
    """The earliest commit whose file slices the latest completed clean kept (its `earliestCommitToRetain`), else,
    after a clean that records none (a file-version policy), the first completed write instant; None when the
    table was never cleaned."""
    cleans = timeline.completed([CLEAN])
    if not cleans:
        return None
    meta = read_container(timeline.read_bytes(Instant(cleans[-1].timestamp, CLEAN, COMPLETED)))
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
