"""Upgrade a version 6 table to version 8 (Hudi 1.0's) or 9 (Hudi 1.1's and 1.2's), as Hudi's upgrade handlers do
(SevenToEightUpgradeHandler, EightToNineUpgradeHandler), only when asked (`hoodie-stream upgrade PATH --to 8|9`).

What changes:
- the timeline moves from `.hoodie/` to `.hoodie/timeline/` (timeline layout 2): a completed instant's file takes its
  completion time into its name (`<instant>_<completion>.<action>`; the completion time is the old file's
  modification time, as Hudi takes it, and never before the instant itself), commit and delta commit metadata go
  from JSON to Avro, the other files are copied as they are;
- hoodie.properties: the table and timeline layout versions, `hoodie.timeline.path`, `hoodie.table.initial.version`
  (6), the key generator's type, and the merge settings Hudi 1.x derives from the payload class (a merge-on-read
  table with an ordering field takes event-time ordering, `DefaultHoodieRecordPayload`, as Hudi's upgrade sets it);
  version 9 also moves the ordering field to `hoodie.table.ordering.fields` and a built-in payload class to
  `hoodie.table.legacy.payload.class`.
Data files are not touched.

Hudi rolls back failed writes and compacts every file group before upgrading a merge-on-read table: a version 6 log
file holds blocks of several delta commits, rolled-back ones included, which Hudi 1.x's readers no longer check
against the timeline. Here the table must already be so (refused otherwise, naming what to run): no pending instant,
no log file in a latest file slice. Also refused, naming why: a replace commit (its Avro model is not written here),
an archived timeline (not converted to Hudi 1.x's LSM history), a metadata table.

Crash safety: the new timeline files are written first (a version 6 reader does not look in `.hoodie/timeline/`),
then hoodie.properties is changed by Hudi's backup protocol (the switch), then the old timeline files are deleted; a
run that finds the table already at the version asked deletes what an interrupted run left in `.hoodie/`.
"""

from __future__ import annotations

import datetime
from typing import Any

from ...errors import HoodieError
from ...storage import storage_for
from ..file_group import fs_view
from ..file_group.fs_view import FileSystemView
from ..table.config import HOODIE_DIR, METADATA_TABLE_DIR, TableConfig, modify_properties
from ..table.versions import NOT_READ_AT_9, TABLE_VERSION, TIMELINE_PATH, version_properties
from ..timeline import active_timeline
from ..timeline.active_timeline import Timeline
from ..timeline.archived_timeline import archive_files, state_transition_time
from ..timeline.commit_metadata import CommitMetadata
from ..timeline.instant import COMMIT, COMPLETED, DELTA_COMMIT, REPLACE_COMMIT, Instant, format_instant

VERSIONS = (8, 9)
TIMELINE_DIR = f"{HOODIE_DIR}/{TIMELINE_PATH}"


class UpgradeRefused(HoodieError):
    """The table is not upgraded, and nothing was changed: the message says why and what to do."""


def upgrade(path, to: int, storage_options=None) -> dict[str, Any]:
    """Upgrade the version 6 table at `path` to version `to` (8 or 9), or a version 8 table to 9; the caller holds
    the writer lease. Returns what was done: the instants moved, the properties changed, the old files deleted."""
    if to not in VERSIONS:
        raise UpgradeRefused(f"a table is upgraded to version 8 or 9, not {to!r}")
    storage = storage_for(path, storage_options)
    config = TableConfig.load(storage)
    if config.version == to:
        return {"table": storage.uri, "version": to, "instants": 0, "properties": {}, "deleted": _delete_old(storage)}
    if config.version > to:
        raise UpgradeRefused(f"{storage.uri}: the table is at version {config.version}; it is not downgraded to {to}")
    if config.version == 8:  # EightToNine: the properties only (the timeline keeps layout 2)
        _check_payload(storage, config)
        updates, deletes = version_properties(config.props, to)
        modify_properties(storage, updates, deletes)
        return {"table": storage.uri, "version": to, "instants": 0, "properties": {**updates, **dict.fromkeys(deletes)}}
    if str(config.version) != TABLE_VERSION:
        raise UpgradeRefused(f"{storage.uri}: table version {config.version} is not upgraded (versions 6 and 8 are)")
    timeline = Timeline(storage)
    _check(storage, config, timeline, to)
    utc = str(config.timeline_timezone).upper() == "UTC"
    moved = 0
    for info in storage.list(HOODIE_DIR):
        inst = Instant.from_file_name(info.name)
        if inst is None:
            continue
        data = storage.read(f"{HOODIE_DIR}/{info.name}")
        if inst.state == COMPLETED:
            done = (
                format_instant(datetime.datetime.fromtimestamp(info.mtime, datetime.timezone.utc))
                if utc
                else state_transition_time(info.mtime)  # the local time zone's, as Hudi formats a modification time
            )
            inst = inst._replace(completion_time=max(done, inst.timestamp))
        if inst.action in (COMMIT, DELTA_COMMIT) and data.strip():
            data = CommitMetadata.from_json(data).to_avro()  # Hudi 1.x's timeline holds commit metadata in Avro
        storage.write(f"{TIMELINE_DIR}/{inst.file_name}", data)
        moved += 1
    updates, deletes = _properties(config, to)
    modify_properties(storage, updates, deletes)
    active_timeline.invalidate(storage.uri)  # this process's caches of the table: its timeline moved
    fs_view.invalidate(storage.uri)
    return {
        "table": storage.uri,
        "version": to,
        "instants": moved,
        "properties": {**updates, **dict.fromkeys(deletes)},
        "deleted": _delete_old(storage),
    }


def _check(storage, config, timeline, to):
    pending = timeline.pending()
    if pending:
        names = ", ".join(f"{i.timestamp} ({i.action}, {i.state})" for i in pending)
        raise UpgradeRefused(
            f"{storage.uri}: pending instants {names}: let them finish (`hoodie-stream compact PATH --run` runs pending "
            "compactions) or roll them back (`hoodie-stream rollback PATH INSTANT`), then upgrade"
        )
    if timeline.completed([REPLACE_COMMIT]):
        raise UpgradeRefused(f"{storage.uri}: the table has replace commits; their upgrade is not supported")
    if archive_files(storage, config.props.get("hoodie.archivelog.folder") or "archived"):
        raise UpgradeRefused(
            f"{storage.uri}: the table has an archived timeline (.hoodie/archived), which would have to become Hudi "
            "1.x's LSM history; its upgrade is not supported"
        )
    if storage.exists(f"{METADATA_TABLE_DIR}/{HOODIE_DIR}/hoodie.properties"):
        raise UpgradeRefused(
            f"{storage.uri}: the table has a metadata table; write to it with a sink or compact it with "
            "`hoodie-stream compact PATH` (both remove it), then upgrade"
        )
    with_logs = [s for s in FileSystemView(storage, timeline).latest_slices() if s.log_files]
    if with_logs:
        first = with_logs[0]
        raise UpgradeRefused(
            f"{storage.uri}: {len(with_logs)} file group(s) have log files in their latest slice (e.g. "
            f"{first.partition or '<root>'}/{first.file_id}); compact them first, as Hudi does before an upgrade: "
            "`hoodie-stream compact PATH`"
        )
    if to >= 9:
        _check_payload(storage, config)


def _check_payload(storage, config):
    payload = config.props.get("hoodie.compaction.payload.class") or ""
    if payload in NOT_READ_AT_9:
        raise UpgradeRefused(
            f"{storage.uri}: payload class {payload} becomes merge properties or a partial-update mode at version 9, "
            "which hoodie-stream does not read; upgrade to 8"
        )


def _properties(config, to):
    """(keys set, keys removed) of hoodie.properties, as Hudi's upgrade handlers change them."""
    return version_properties(config.props, to, initial=TABLE_VERSION)


def _delete_old(storage) -> int:
    """Delete the layout-1 timeline files left in `.hoodie/` (the upgraded table's timeline is in
    `.hoodie/timeline/`); returns how many."""
    old = [f"{HOODIE_DIR}/{info.name}" for info in storage.list(HOODIE_DIR) if Instant.from_file_name(info.name)]
    for path in old:
        storage.delete(path)
    return len(old)
