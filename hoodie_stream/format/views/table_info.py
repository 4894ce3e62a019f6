"""A table's timeline and file slices as Arrow tables, to analyse in a notebook or print from the CLI.

`commits(table)`: one row per instant of the active timeline (in its highest state), oldest first:

    instant             string     the instant time (yyyyMMddHHmmssSSS)
    action              string     commit, deltacommit, replacecommit, compaction (pending), clean, rollback ...
                                   (a completed compaction is a `commit` whose operation is `compact`, as in Hudi)
    state               string     requested, inflight or completed
    operation           string     the commit metadata's operationType, lower case (upsert, compact ...); null
                                   for instants that are not completed commits
    requested_time      timestamp  when the instant was requested: its instant time (in the table's timeline
                                   timezone, given in UTC)
    inflight_time       timestamp  modification time of its inflight file (null when absent or not listed)
    completed_time      timestamp  modification time of its completed file (null while pending)
    partitions_written  int64      partitions with a write stat
    files_written       int64      files written (base and log files: write stats with a path)
    log_files_written   int64      of which log files
    records_written     int64      records written (numWrites: inserts and updates)
    records_inserted    int64      numInserts
    records_updated     int64      numUpdateWrites
    records_deleted     int64      records deleted: numDeletes, less the old copies of moved keys it counts
    records_moved       int64      keys moved to another partition (global index: numDeletes counts the delete of
                                   each one's old copy, as Hudi does); from the sink's entry in the extra metadata,
                                   null for a commit that does not record it (another writer's)
    bytes_written       int64      totalWriteBytes
    batch_id            int64      the streaming batch id this commit recorded (the entry of
                                   `_hudi_streaming_sink_checkpoint` in the extra metadata that changed since the
                                   previous commit recording one); null otherwise
    writer              string     the streaming writer identifier of that entry

The figures columns are null for instants other than completed commit, delta commit and replace commit instants.

`file_slices(table)`: one row per file group, its latest file slice (as the snapshot read sees it):

    partition           string     partition path ("" for a non-partitioned table)
    file_id             string
    base_instant        string     the slice's base instant time
    base_file           string     base file name (null for a slice of log files only)
    base_file_size      int64      bytes (0 without a base file)
    log_files           int64      number of log files
    log_files_size      int64      bytes of the log files
    total_size          int64      base file and log files
"""

from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..file_group.file_names import parse_log_file_name
from ..file_group.fs_view import FileSystemView
from ..timeline.archived_timeline import ArchivedInstant
from ..timeline.commit_metadata import CommitMetadata
from ..timeline.instant import (
    COMMIT_ACTIONS,
    COMPLETED,
    COMPLETED_AS,
    INFLIGHT,
    REQUESTED,
    Instant,
    instant_to_datetime,
)

if TYPE_CHECKING:
    from ..read.table_reader import TableReader

# the extra-metadata key of Hudi's streaming sink checkpoint (checkpoints.batch_checkpoint.CHECKPOINT_KEY)
STREAMING_CHECKPOINT_KEY = "_hudi_streaming_sink_checkpoint"

_TIME = pa.timestamp("ms", tz="UTC")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
COMMITS_SCHEMA = pa.schema(
    [
        ("instant", pa.string()),
        ("action", pa.string()),
        ("state", pa.string()),
        ("operation", pa.string()),
        ("requested_time", _TIME),
        ("inflight_time", _TIME),
        ("completed_time", _TIME),
        ("partitions_written", pa.int64()),
        ("files_written", pa.int64()),
        ("log_files_written", pa.int64()),
        ("records_written", pa.int64()),
        ("records_inserted", pa.int64()),
        ("records_updated", pa.int64()),
        ("records_deleted", pa.int64()),
        ("records_moved", pa.int64()),
        ("bytes_written", pa.int64()),
        ("batch_id", pa.int64()),
        ("writer", pa.string()),
    ]
)
FILE_SLICES_SCHEMA = pa.schema(
    [
        ("partition", pa.string()),
        ("file_id", pa.string()),
        ("base_instant", pa.string()),
        ("base_file", pa.string()),
        ("base_file_size", pa.int64()),
        ("log_files", pa.int64()),
        ("log_files_size", pa.int64()),
        ("total_size", pa.int64()),
    ]
)
_FIGURES = [f.name for f in COMMITS_SCHEMA][7:16]


def commits(table: TableReader) -> pa.Table:
    """One row per instant of the table's active timeline (columns: this module's docstring)."""
    timeline = table.timeline
    mtimes = {f.name: f.mtime for f in table.storage.list(timeline.dir)}
    local_zone = str(table.config.timeline_timezone).upper() != "UTC"
    rows: dict[str, list[Any]] = {name: [] for name in COMMITS_SCHEMA.names}
    checkpoints: dict[str, str] = {}
    for inst in timeline.instants:
        meta = None
        if inst.state == COMPLETED and inst.action in COMMIT_ACTIONS:
            meta = timeline.read_commit_metadata(inst.timestamp)
        rows["instant"].append(inst.timestamp)
        rows["action"].append(inst.action)
        rows["state"].append(inst.state)
        rows["operation"].append(meta.operation_type.lower() if meta is not None else None)
        rows["requested_time"].append(_instant_time(inst.timestamp, local_zone))
        rows["inflight_time"].append(_file_time(mtimes, inst, INFLIGHT))
        if inst.completion_time is not None:  # layout 2 names it (table versions 8, 9)
            rows["completed_time"].append(_instant_time(inst.completion_time, local_zone))
        else:
            rows["completed_time"].append(_file_time(mtimes, inst, COMPLETED))
        for name, value in zip(_FIGURES, _figures(meta)):
            rows[name].append(value)
        writer, batch_id = _batch_of(meta, checkpoints)
        rows["batch_id"].append(batch_id)
        rows["writer"].append(writer)
    return pa.table(rows, schema=COMMITS_SCHEMA)


def archived_commits(table: TableReader) -> pa.Table:
    """One row per instant of the table's archived timeline (`.hoodie/archived/`, or the LSM history of table
    versions 8 and 9) in its highest state, oldest first, with the columns of `commits`: the inflight and completed
    times are the archived stateTransitionTime (the modification time its timeline file had; the LSM history keeps
    the completion time only), the figures those of the archived commit metadata."""
    archived = table.archived_timeline()
    rows: dict[str, list[Any]] = {name: [] for name in COMMITS_SCHEMA.names}
    checkpoints: dict[str, str] = {}
    highest: dict[tuple[str, str], ArchivedInstant] = {}
    times: dict[tuple[str, str, str], datetime.datetime | None] = {}
    for inst in archived.instants:
        action = COMPLETED_AS.get(inst.action, inst.action)
        highest[(inst.timestamp, action)] = inst  # instants come in state order
        times[(inst.timestamp, action, inst.state)] = _transition_time(inst.state_transition_time)
    local_zone = str(table.config.timeline_timezone).upper() != "UTC"
    for (ts, action), inst in sorted(highest.items()):
        meta = archived.commit_metadata(ts) if inst.state == COMPLETED and inst.action in COMMIT_ACTIONS else None
        rows["instant"].append(ts)
        rows["action"].append(inst.action)
        rows["state"].append(inst.state)
        rows["operation"].append(meta.operation_type.lower() if meta is not None else None)
        rows["requested_time"].append(_instant_time(ts, local_zone))
        rows["inflight_time"].append(times.get((ts, action, INFLIGHT)))
        if inst.completion_time is not None:
            rows["completed_time"].append(_instant_time(inst.completion_time, local_zone))
        else:
            rows["completed_time"].append(times.get((ts, action, COMPLETED)))
        for name, value in zip(_FIGURES, _figures(meta)):
            rows[name].append(value)
        writer, batch_id = _batch_of(meta, checkpoints)
        rows["batch_id"].append(batch_id)
        rows["writer"].append(writer)
    return pa.table(rows, schema=COMMITS_SCHEMA)


def _transition_time(text: str | None) -> datetime.datetime | None:
    """An archived stateTransitionTime (yyyyMMddHHmmssSSS, the writer's local time) as an aware datetime."""
    if not text or len(text) != 17 or not text.isdigit():
        return None
    try:
        local = datetime.datetime.strptime(text[:14], "%Y%m%d%H%M%S").replace(microsecond=int(text[14:]) * 1000)
    except ValueError:
        return None
    return local.astimezone(datetime.timezone.utc)


def file_slices(table: TableReader) -> pa.Table:
    """The latest file slice of every file group (columns: this module's docstring)."""
    rows: dict[str, list[Any]] = {name: [] for name in FILE_SLICES_SCHEMA.names}
    if table.timeline.commits_timeline():
        for fs in FileSystemView(table.storage, table.timeline).latest_slices():
            log_sizes = fs.log_sizes
            rows["partition"].append(fs.partition)
            rows["file_id"].append(fs.file_id)
            rows["base_instant"].append(fs.base_instant)
            rows["base_file"].append(fs.base_file)
            rows["base_file_size"].append(fs.base_size)
            rows["log_files"].append(len(log_sizes))
            rows["log_files_size"].append(sum(log_sizes))
            rows["total_size"].append(fs.file_size)
    return pa.table(rows, schema=FILE_SLICES_SCHEMA)


def _figures(meta: CommitMetadata | None) -> list[int | None]:
    """partitions, files, log files, records written / inserted / updated / deleted / moved, bytes of a commit."""
    if meta is None:
        return [None] * len(_FIGURES)
    stats = meta.all_write_stats()
    written = [s for s in stats if s.path]
    return [
        sum(1 for _, st in meta.partition_to_write_stats.items() if st),
        len(written),
        sum(1 for s in written if parse_log_file_name(s.file_name) is not None),
        sum(s.num_writes or 0 for s in stats),
        sum(s.num_inserts or 0 for s in stats),
        sum(s.num_update_writes or 0 for s in stats),
        meta.records_deleted,
        meta.records_moved,
        sum(s.total_write_bytes or 0 for s in stats),
    ]


def _batch_of(meta: CommitMetadata | None, previous: dict[str, str]) -> tuple[str | None, int | None]:
    """(writer, batch id) a commit recorded: the checkpoint entry that changed since the previous commit recording
    one (`previous`, updated in place); (None, None) when none or several changed."""
    if meta is None or STREAMING_CHECKPOINT_KEY not in meta.extra_metadata:
        return None, None
    try:
        entries = json.loads(meta.extra_metadata[STREAMING_CHECKPOINT_KEY])
    except ValueError:
        return None, None
    if not isinstance(entries, dict):
        return None, None
    changed = {k: v for k, v in entries.items() if previous.get(k) != v}
    previous.clear()
    previous.update(entries)
    if len(changed) != 1:
        return None, None
    writer, value = next(iter(changed.items()))
    try:
        return str(writer), int(value)
    except (TypeError, ValueError):
        return str(writer), None


def _instant_time(ts: str, local_zone: bool) -> datetime.datetime | None:
    """The instant time as an aware datetime (a LOCAL timeline's times are the machine's wall-clock times)."""
    try:
        dt = instant_to_datetime(ts)
    except ValueError:
        return None
    if dt is not None and local_zone:
        dt = dt.replace(tzinfo=None).astimezone(datetime.timezone.utc)
    return dt


def _file_time(mtimes: dict[str, float], inst: Instant, state: str) -> datetime.datetime | None:
    """Modification time of the instant's timeline file in `state` (a completed compaction's file is T.commit, its
    requested and inflight files T.compaction.*)."""
    if state == COMPLETED and inst.state != COMPLETED:
        return None
    if state == INFLIGHT and inst.state == REQUESTED:
        return None
    actions = {inst.action} | {a for a, done in COMPLETED_AS.items() if done == inst.action}
    for action in sorted(actions):
        mtime = mtimes.get(Instant(inst.timestamp, action, state).file_name)
        if mtime is not None:
            return _EPOCH + datetime.timedelta(milliseconds=int(mtime * 1000))  # the column's precision
    return None


__all__ = ["COMMITS_SCHEMA", "FILE_SLICES_SCHEMA", "archived_commits", "commits", "file_slices"]
