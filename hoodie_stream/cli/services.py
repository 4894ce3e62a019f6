"""`compact` and `clean` (`compaction/offline.py`, under the writer lease), with a progress bar over their steps
in a terminal and a JSON report: the lines they print, and the instants they scheduled and completed."""

from __future__ import annotations

from typing import Any

from ..compaction.offline import clean_table, compact_table
from ..format.table.config import TableConfig
from ..format.timeline.active_timeline import Timeline
from ..storage import storage_for
from .progress import progress


def _instants(path: str, storage_options: dict[str, str] | None) -> dict[str, set[str]]:
    storage = storage_for(path, storage_options)
    TableConfig.load(storage)  # a location that holds no table is refused as compact_table/clean_table refuse it
    timeline = Timeline(storage)
    return {
        "pending_compactions": {i.timestamp for i in timeline.pending(["compaction"])},
        "completed_compactions": {
            i.timestamp
            for i in timeline.completed(["commit"])
            if timeline.read_commit_metadata(i.timestamp).is_compaction
        },
        "cleans": {i.timestamp for i in timeline.completed(["clean"])},
    }


def compact(
    path: str,
    schedule: bool,
    run: bool,
    clean_after: bool,
    options: dict[str, str],
    storage_options: dict[str, str] | None,
    show_progress: bool | None = None,
    echo: Any = None,
) -> dict[str, Any]:
    """Schedule and/or run compactions (both when neither is asked). `echo(line)` gets each report line as it
    comes (the text output); returns the lines and the compactions scheduled and completed."""
    if not schedule and not run:
        schedule = run = True
    before = _instants(path, storage_options)
    steps = compact_table(
        path,
        schedule=schedule,
        run=run,
        clean_after=clean_after,
        options=options,
        storage_options=storage_options,
    )
    lines = []
    for line in progress(steps, "compact", enabled=show_progress):
        lines.append(line)
        if echo is not None:
            echo(line)
    after = _instants(path, storage_options)
    return {
        "table": storage_for(path, storage_options).uri,
        "scheduled": sorted(
            (after["pending_compactions"] | after["completed_compactions"])
            - before["pending_compactions"]
            - before["completed_compactions"]
        ),
        "completed": sorted(after["completed_compactions"] - before["completed_compactions"]),
        "pending": sorted(after["pending_compactions"]),
        "cleans": sorted(after["cleans"] - before["cleans"]),
        "messages": lines,
    }


def clean(
    path: str, options: dict[str, str], storage_options: dict[str, str] | None, show_progress: bool | None = None
) -> dict[str, Any]:
    """Run the cleaner once; returns the files removed and the clean instant."""
    before = _instants(path, storage_options)["cleans"]
    removed = 0
    for _ in progress([None], "clean", total=1, enabled=show_progress):
        removed = clean_table(path, options, storage_options)
    return {
        "table": storage_for(path, storage_options).uri,
        "files_deleted": removed,
        "cleans": sorted(_instants(path, storage_options)["cleans"] - before),
    }
