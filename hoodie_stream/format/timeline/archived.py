"""The archived timeline of a table, by its timeline layout: the one place that chooses between layout 1's
`.hoodie/archived/` (archived_timeline.py, table version 6) and layout 2's LSM history under
`.hoodie/timeline/history/` (lsm_history.py, table versions 8 and 9). Both answer the same questions: `instants`,
`completed(actions)`, `completed_times()`, `commit_metadata(ts)`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from ...storage import Storage
from ..table.config import timeline_layout
from .archived_timeline import ARCHIVE_FOLDER, ArchivedInstant, ArchivedTimeline
from .commit_metadata import CommitMetadata
from .lsm_history import LSMHistory, history_dir


class Archived(Protocol):
    """What readers ask an archived timeline, of either layout."""

    @property
    def instants(self) -> list[ArchivedInstant]: ...

    def completed(self, actions: Sequence[str] | None = None) -> list[ArchivedInstant]: ...

    def completed_times(self) -> set[str]: ...

    def commit_metadata(self, ts: str) -> CommitMetadata | None: ...


def load_archived_timeline(storage: Storage, props: Mapping[str, str]) -> Archived:
    """The archived instants of the table whose hoodie.properties are `props`."""
    layout, _timeline_dir = timeline_layout(props)
    if layout >= 2:
        return LSMHistory.load(storage, history_dir(dict(props)))
    return ArchivedTimeline.load(storage, props.get("hoodie.archivelog.folder") or ARCHIVE_FOLDER)
