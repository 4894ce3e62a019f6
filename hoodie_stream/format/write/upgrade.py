"""Upgrade a version 6 table to version 8 (Hudi 1.0's) or 9 (Hudi 1.1's and 1.2's), as Hudi's upgrade handlers do
(SevenToEightUpgradeHandler, EightToNineUpgradeHandler), only when asked (`hoodie-stream upgrade PATH --to 8|9`).

What changes:
- the timeline moves from `.hoodie/` to `.hoodie/timeline/` (timeline layout 2): a completed instant's file takes its
  completion time into its name (`<instant>_<completion>.<action>`; the completion time is the old file's
  modification time, as Hudi takes it, and never before the instant itself), commit and delta commit metadata go
  from JSON to Avro, the other files are copied as they are;
- the archived timeline (`.hoodie/archived/`, version 6's) is converted into the LSM history
  (`.hoodie/timeline/history/`) as Hudi's LegacyArchivedMetaEntryReader and MetadataConversionUtils convert it
  (`_history_rows`): one HoodieLSMTimelineInstant per archived instant, completion time = the completed record's
  `stateTransitionTime` (never before the instant), metadata = the completed record's metadata (commit metadata in
  the Avro model of a layout-2 commit file), plan = the compaction plan of a compaction (Hudi's conversion takes no
  plan for a clean or a replace commit); written in batches of `hoodie.commits.archival.batch` (10) instants, the
  history compacted after each (`compact_history`). `.hoodie/archived/` is kept, as Hudi keeps it (no Hudi 1.x
  reader looks at it);
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
a metadata table.

Crash safety: the new timeline files and the history are written first (a version 6 reader does not look in
`.hoodie/timeline/`; a rerun before the switch starts the history again), then hoodie.properties is changed by
Hudi's backup protocol (the switch), then the old timeline files are deleted; a run that finds the table already at the version asked deletes what an interrupted run left in `.hoodie/`.
"""

from __future__ import annotations

import datetime
import functools
import io
import json
from typing import Any

import fastavro

from ...errors import HoodieError
from ...storage import storage_for
from ..avro.models import write_container
from ..file_group import fs_view
from ..file_group.fs_view import FileSystemView
from ..table.config import HOODIE_DIR, METADATA_TABLE_DIR, TableConfig, modify_properties
from ..table.versions import NOT_READ_AT_9, TABLE_VERSION, TIMELINE_PATH, version_properties
from ..timeline import active_timeline
from ..timeline.active_timeline import Timeline
from ..timeline.archived_timeline import ARCHIVE_FOLDER, SCHEMA, ArchivedTimeline, state_transition_time
from ..timeline.commit_metadata import CommitMetadata
from ..timeline.instant import (
    CLEAN,
    CLUSTERING,
    COMMIT,
    COMPACTION,
    COMPLETED,
    DELTA_COMMIT,
    LOG_COMPACTION,
    REPLACE_COMMIT,
    ROLLBACK,
    Instant,
    format_instant,
)
from ..timeline.lsm_history import HISTORY_PATH, INSTANT_VERSION, compact_history, write_history_file

VERSIONS = (8, 9)
TIMELINE_DIR = f"{HOODIE_DIR}/{TIMELINE_PATH}"
HISTORY_DIR = f"{TIMELINE_DIR}/{HISTORY_PATH}"  # Hudi's upgrade writes `timeline/history` whatever the properties say
ARCHIVAL_BATCH = 10  # hoodie.commits.archival.batch
# the field of a HoodieArchivedMetaEntry holding an action's details (LegacyArchivedMetaEntryReader.getMetadataKey)
METADATA_KEY = {
    CLEAN: "hoodieCleanMetadata",
    COMMIT: "hoodieCommitMetadata",
    DELTA_COMMIT: "hoodieCommitMetadata",
    ROLLBACK: "hoodieRollbackMetadata",
    "savepoint": "hoodieSavePointMetadata",
    COMPACTION: "hoodieCompactionPlan",
    LOG_COMPACTION: "hoodieCompactionPlan",
    REPLACE_COMMIT: "hoodieReplaceCommitMetadata",
    CLUSTERING: "hoodieReplaceCommitMetadata",
    "indexing": "hoodieIndexCommitMetadata",
}


class UpgradeRefused(HoodieError):
    """The table is not upgraded, and nothing was changed: the message says why and what to do."""


def upgrade(path, to: int, storage_options=None, batch: int = ARCHIVAL_BATCH) -> dict[str, Any]:
    """Upgrade the version 6 table at `path` to version `to` (8 or 9), or a version 8 table to 9; the caller holds
    the writer lease. `batch`: archived instants per history file (`hoodie.commits.archival.batch`). Returns what
    was done: the instants moved, the archived instants converted, the properties changed, the old files deleted."""
    if to not in VERSIONS:
        raise UpgradeRefused(f"a table is upgraded to version 8 or 9, not {to!r}")
    storage = storage_for(path, storage_options)
    config = TableConfig.load(storage)
    if config.version == to:
        deleted = _delete_old(storage)
        return {"table": storage.uri, "version": to, "instants": 0, "archived": 0, "properties": {}, "deleted": deleted}
    if config.version > to:
        raise UpgradeRefused(f"{storage.uri}: the table is at version {config.version}; it is not downgraded to {to}")
    if config.version == 8:  # EightToNine: the properties only (the timeline keeps layout 2)
        _check_payload(storage, config)
        updates, deletes = version_properties(config.props, to)
        modify_properties(storage, updates, deletes)
        properties = {**updates, **dict.fromkeys(deletes)}
        return {"table": storage.uri, "version": to, "instants": 0, "archived": 0, "properties": properties}
    if str(config.version) != TABLE_VERSION:
        raise UpgradeRefused(f"{storage.uri}: table version {config.version} is not upgraded (versions 6 and 8 are)")
    timeline = Timeline(storage)
    _check(storage, config, timeline, to)
    history = _history_rows(storage, config.props.get("hoodie.archivelog.folder") or ARCHIVE_FOLDER)
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
    _write_history(storage, history, batch)
    updates, deletes = _properties(config, to)
    modify_properties(storage, updates, deletes)
    active_timeline.invalidate(storage.uri)  # this process's caches of the table: its timeline moved
    fs_view.invalidate(storage.uri)
    return {
        "table": storage.uri,
        "version": to,
        "instants": moved,
        "archived": len(history),
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


# -- the archived timeline into the LSM history ---------------------------------------------------------------------
def _history_rows(storage, folder: str) -> list[dict[str, Any]]:
    """The HoodieLSMTimelineInstant rows of the archived timeline in `.hoodie/<folder>/`, oldest first, as Hudi's
    upgrade makes them (LegacyArchivedMetaEntryReader.readInstant, ActiveActionWithDetails,
    MetadataConversionUtils.createLSMTimelineInstant). Refused, before anything is written, when an archived
    instant has no completed record (Hudi's conversion fails on it)."""
    archived = ArchivedTimeline.load(storage, folder)  # an instant archived twice: once
    groups: dict[str, dict[str, dict[str, Any]]] = {}
    for (ts, _action, state), record in archived.records.items():
        groups.setdefault(ts, {})[state] = record
    rows = []
    for ts, states in sorted(groups.items()):
        completed = states.get(COMPLETED)
        if completed is None:
            raise UpgradeRefused(
                f"{storage.uri}: archived instant {ts} has no completed record in .hoodie/{folder}/; it is not "
                "converted into Hudi 1.x's LSM history"
            )
        pending = states.get("requested") or states.get("inflight")
        pending_action = pending.get("actionType") if pending else None
        plan = None
        if pending_action == CLEAN:
            plan = _details(states.get("requested"))  # hoodieCleanMetadata of the requested record: none
        elif pending_action in (REPLACE_COMMIT, CLUSTERING):
            plan = _details(states.get("inflight")) or _details(states.get("requested"))  # none either
        elif pending_action in (COMPACTION, LOG_COMPACTION):
            plan = _details(states.get("requested"))
        done = completed.get("stateTransitionTime") or ts
        rows.append(
            {
                "instantTime": ts,
                "completionTime": max(done, ts),
                "action": completed.get("actionType"),
                "metadata": _details(completed),
                "plan": plan,
                "version": INSTANT_VERSION,
            }
        )
    return rows


def _details(record: dict[str, Any] | None) -> bytes | None:
    """The details Hudi's upgrade takes from an archived record: the Avro record of its action's field as an Avro
    container file (HoodieAvroUtils.avroToFileBytes); None when the field is null. Commit metadata is written with
    the HoodieCommitMetadata schema of a layout-2 commit file, the others with their archived schema."""
    if record is None:
        return None
    key = METADATA_KEY.get(record.get("actionType") or "")
    value = record.get(key) if key else None
    if value is None:
        return None
    if key == "hoodieCommitMetadata":
        return write_container("HoodieCommitMetadata", value)
    out = io.BytesIO()
    fastavro.writer(out, _archived_schema(key), [value], codec="null")
    return out.getvalue()


@functools.cache
def _archived_schema(field: str) -> Any:
    """The parsed schema of a HoodieArchivedMetaEntry field's record type, with the named types it refers to (defined
    earlier in the entry's schema) written out in it."""
    entry = json.loads(SCHEMA)
    defined: dict[str, Any] = {}

    def collect(t: Any) -> None:
        if isinstance(t, list):
            for x in t:
                collect(x)
        elif isinstance(t, dict):
            if t.get("type") in ("record", "enum", "fixed"):
                defined.setdefault(t["name"], t)
            for f in t.get("fields", []):
                collect(f["type"])
            for k in ("items", "values"):
                collect(t.get(k))

    collect(entry)
    seen: set[str] = set()

    def inline(t: Any) -> Any:
        if isinstance(t, str):
            if t in defined and t not in seen:
                return inline(defined[t])
            return t
        if isinstance(t, list):
            return [inline(x) for x in t]
        if not isinstance(t, dict):
            return t
        out = dict(t)
        if t.get("type") in ("record", "enum", "fixed"):
            seen.add(t["name"])
        if "fields" in t:
            out["fields"] = [{**f, "type": inline(f["type"])} for f in t["fields"]]
        for k in ("items", "values"):
            if k in t:
                out[k] = inline(t[k])
        return out

    union = next(f["type"] for f in entry["fields"] if f["name"] == field)
    record = next(t for t in union if isinstance(t, dict))
    schema = {**inline(record), "namespace": entry.get("namespace", "org.apache.hudi.avro.model")}
    return fastavro.parse_schema(schema)


def _write_history(storage, rows: list[dict[str, Any]], batch: int) -> None:
    """The rows into `.hoodie/timeline/history/`, `batch` instants a file, the history compacted after each file (as
    SevenToEightUpgradeHandler.upgradeToLSMTimeline). What an interrupted run left there is deleted first: a version
    6 table has no history."""
    storage.delete_many(info.path for info in storage.list(HISTORY_DIR, recursive=True))
    batch = max(batch, 1)
    for i in range(0, len(rows), batch):
        write_history_file(storage, HISTORY_DIR, rows[i : i + batch])
        compact_history(storage, HISTORY_DIR)
