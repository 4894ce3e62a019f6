"""The archived timeline (`.hoodie/archived/`) of a layout-1 table, as Hudi 0.14/0.15 write and read it.

An archive file `.commits_.archive.<version>_1-0-1` is a Hudi log file (log_block.py) of AVRO_DATA blocks whose one
header entry is SCHEMA, the exact `HoodieArchivedMetaEntry` schema text of Hudi 0.15.0 (resources/), holding at most
`hoodie.commits.archival.batch` records each. A record stands for one timeline file of an archived instant (its
requested, inflight or completed file; the files of one instant adjacent, in that order) and carries, besides the
instant time, action, state and the file's modification time (`stateTransitionTime`), that file's content converted
as Hudi's MetadataConversionUtils converts it (`meta_entry`). A higher version holds newer instants: each archiving
run writes one new file with the next version; files are never rewritten, but small ones are merged into a new
file of the next version (compaction/archive_merge.py).

Readers (`ArchivedTimeline`) take every record of every file, so an instant archived twice (a run interrupted
after its file was written) is listed once.
"""

from __future__ import annotations

import datetime
import functools
import io
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, NamedTuple, cast

import fastavro
import pyarrow as pa

from ...errors import HoodieFormatError
from ...storage import FileInfo, Storage, storage_for
from ..avro.encoder import encode_records
from ..avro.models import read_container
from ..avro.schema import avro_to_arrow_schema
from ..log_file.data_block import avro_data_content, avro_record_bounds
from ..log_file.log_block import BlockType, HeaderKey, LogBlock
from ..log_file.reader import read_log_file
from ..log_file.writer import write_log_file
from .active_timeline import HOODIE_DIR
from .commit_metadata import CommitMetadata, WriteStat
from .instant import (
    CLEAN,
    COMMIT,
    COMPACTION,
    COMPLETED,
    LOG_COMPACTION,
    REPLACE_COMMIT,
    ROLLBACK,
    STATE_ORDER,
    Instant,
)

ARCHIVE_FOLDER = "archived"  # hoodie.archivelog.folder
ARCHIVE_PREFIX = ".commits_.archive."
WRITE_TOKEN = "1-0-1"  # HoodieLogFormat.UNKNOWN_WRITE_TOKEN: the token of every archive file
BATCH_SIZE = 10  # hoodie.commits.archival.batch: records per block
ROLLING_STAT = "ROLLING_STAT"  # the extra metadata key Hudi's conversion adds, empty
_VERSION = re.compile(r"^\.commits_\.archive\.([0-9]+)")
SCHEMA: str = resources.files(__package__).joinpath("resources/HoodieArchivedMetaEntry.avsc").read_text("utf-8")
ARROW_SCHEMA = avro_to_arrow_schema(SCHEMA)
# HoodieWriteStat (Avro) fields: (Avro name, WriteStat attribute); totalLogFiles has no POJO getter: always null
_AVRO_STAT = [
    ("fileId", "file_id"),
    ("path", "path"),
    ("prevCommit", "prev_commit"),
    ("numWrites", "num_writes"),
    ("numDeletes", "num_deletes"),
    ("numUpdateWrites", "num_update_writes"),
    ("totalWriteBytes", "total_write_bytes"),
    ("totalWriteErrors", "total_write_errors"),
    ("partitionPath", "partition_path"),
    ("totalLogRecords", "total_log_records"),
    ("totalLogFiles", None),
    ("totalUpdatedRecordsCompacted", "total_updated_records_compacted"),
    ("numInserts", "num_inserts"),
    ("totalLogBlocks", "total_log_blocks"),
    ("totalCorruptLogBlock", "total_corrupt_log_block"),
    ("totalRollbackBlocks", "total_rollback_blocks"),
    ("fileSizeInBytes", "file_size_in_bytes"),
]


def archive_dir(folder: str = ARCHIVE_FOLDER) -> str:
    return f"{HOODIE_DIR}/{folder or ARCHIVE_FOLDER}"


def archive_file_name(version: int) -> str:
    return f"{ARCHIVE_PREFIX}{version}_{WRITE_TOKEN}"


def archive_version(name: str) -> int | None:
    """The version of an archive file name (Hudi counts a `.commits_.archive*` name without one as 0); None for
    other files."""
    if not name.startswith(ARCHIVE_PREFIX[:-1]):
        return None
    m = _VERSION.match(name)
    return int(m.group(1)) if m else 0


def archive_files(storage: Storage, folder: str = ARCHIVE_FOLDER) -> list[tuple[int, FileInfo]]:
    """(version, file) of every archive file, oldest version first."""
    found = []
    for info in storage.list(archive_dir(folder)):
        version = archive_version(info.name)
        if version is not None and not info.name.endswith(".crc"):
            found.append((version, info))
    return sorted(found, key=lambda vi: (vi[0], vi[1].name))


# -- records ----------------------------------------------------------------------------------------------------
def state_transition_time(mtime: float) -> str:
    """A file modification time as Hudi formats it (yyyyMMddHHmmssSSS, the local time zone)."""
    dt = datetime.datetime.fromtimestamp(mtime)
    return dt.strftime("%Y%m%d%H%M%S") + f"{dt.microsecond // 1000:03d}"


def avro_commit_metadata(meta: CommitMetadata) -> dict[str, Any]:
    """A commit's metadata as the Avro HoodieCommitMetadata Hudi archives (MetadataConversionUtils.convertCommitMetadata:
    write stats reduced to the Avro fields, `totalLogFiles` and `version` null, COMPACT for a compaction, an empty
    ROLLING_STAT extra)."""
    stats = {
        partition: [{avro: (None if attr is None else getattr(s, attr)) for avro, attr in _AVRO_STAT} for s in lst]
        for partition, lst in meta.partition_to_write_stats.items()
    }
    extra = {str(k): None if v is None else str(v) for k, v in meta.extra_metadata.items()}
    extra[ROLLING_STAT] = ""
    return {
        "partitionToWriteStats": stats,
        "extraMetadata": extra,
        "version": None,
        "operationType": "COMPACT" if meta.compacted else meta.operation_type,
    }


def avro_replace_metadata(meta: CommitMetadata) -> dict[str, Any]:
    out = avro_commit_metadata(meta)
    out["partitionToReplaceFileIds"] = {p: list(ids) for p, ids in (meta.partition_to_replace_file_ids or {}).items()}
    return out


def commit_metadata_of(avro: dict[str, Any]) -> CommitMetadata:
    """CommitMetadata of an archived Avro HoodieCommitMetadata (or HoodieReplaceCommitMetadata)."""
    stats = {
        partition: [
            WriteStat.from_dict({k: v for k, v in s.items() if v is not None and k != "totalLogFiles"})
            for s in lst or []
        ]
        for partition, lst in (avro.get("partitionToWriteStats") or {}).items()
    }
    operation = avro.get("operationType") or "UNKNOWN"
    replace = avro.get("partitionToReplaceFileIds")
    return CommitMetadata(
        stats, operation == "COMPACT", dict(avro.get("extraMetadata") or {}), operation, replace and dict(replace)
    )


def meta_entry(instant: Instant, content: bytes, mtime: float) -> dict[str, Any]:
    """The HoodieArchivedMetaEntry of one timeline file (`instant` names the file: a completed compaction is
    Instant(T, "commit", "completed")), as MetadataConversionUtils.createMetaWrapper builds it."""
    action, state = instant.action, instant.state
    entry: dict[str, Any] = {
        "commitTime": instant.timestamp,
        "actionType": action,
        "version": None,
        "actionState": state.upper(),
        "stateTransitionTime": state_transition_time(mtime),
    }
    if state == COMPLETED and not content:
        return entry  # an empty completed file (a crash on a file system without atomic writes)
    if action == CLEAN:
        entry["hoodieCleanMetadata" if state == COMPLETED else "hoodieCleanerPlan"] = read_container(content)
    elif action in (COMMIT, "deltacommit"):
        entry["hoodieCommitMetadata"] = avro_commit_metadata(CommitMetadata.from_json(content))
    elif action == REPLACE_COMMIT:
        if state == COMPLETED:
            entry["hoodieReplaceCommitMetadata"] = avro_replace_metadata(CommitMetadata.from_json(content))
        elif content and state == "inflight":
            entry["HoodieInflightReplaceMetadata"] = avro_commit_metadata(CommitMetadata.from_json(content))
        elif content:
            entry["hoodieRequestedReplaceMetadata"] = read_container(content)
    elif action == ROLLBACK:
        if state == COMPLETED:
            entry["hoodieRollbackMetadata"] = read_container(content)
    elif action in (COMPACTION, LOG_COMPACTION):
        if state == "requested":
            entry["hoodieCompactionPlan"] = read_container(content)
    elif action == "savepoint":
        entry["hoodieSavePointMetadata"] = read_container(content)
    else:
        raise HoodieFormatError(f"instant {instant}: action {action!r} cannot be archived")
    return entry


# -- writing ------------------------------------------------------------------------------------------------------
def encode_archive_blocks(entries: Sequence[dict[str, Any]], batch_size: int = BATCH_SIZE) -> list[LogBlock]:
    """AVRO_DATA blocks of `batch_size` records (the last one of the remainder), header SCHEMA only."""
    if not entries:
        return []
    table = pa.Table.from_pylist(list(entries), schema=ARROW_SCHEMA)
    buffer, offsets = encode_records(table, SCHEMA)
    header = {HeaderKey.SCHEMA: SCHEMA}
    return [
        LogBlock(BlockType.AVRO_DATA, dict(header), avro_data_content(buffer, offsets[i : i + batch_size + 1]))
        for i in range(0, len(entries), batch_size)
    ]


def write_archive_file(
    storage: Storage | str,
    entries: Sequence[dict[str, Any]],
    batch_size: int = BATCH_SIZE,
    folder: str = ARCHIVE_FOLDER,
) -> str | None:
    """Write `entries` as a new archive file, the version after the newest one (created if absent: never over
    another file; the file appears whole or not at all). Returns its path, or None when there is nothing to write."""
    storage = storage_for(storage)
    if not entries:
        return None
    versions = [v for v, _ in archive_files(storage, folder)]
    path = f"{archive_dir(folder)}/{archive_file_name(max(versions, default=0) + 1)}"
    storage.make_dirs(archive_dir(folder))
    write_log_file(storage, path, encode_archive_blocks(entries, batch_size))
    return path


# -- reading ------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _parsed_schema(text: str) -> Any:
    return fastavro.parse_schema(json.loads(text))


def decode_archive_block(block: LogBlock) -> list[dict[str, Any]]:
    """The records of one AVRO_DATA block of an archive file, with the block's writer schema. (Record by record with
    fastavro: a block holds a few deeply nested records, which the vectorized decoder of data blocks, made for many
    flat ones, took ~30 ms each for.)"""
    schema = _parsed_schema(block.header[HeaderKey.SCHEMA])
    starts, ends = avro_record_bounds(block.content)
    view = memoryview(block.content)
    return [_record(view[a:b], schema) for a, b in zip(starts, ends)]


def _record(data: memoryview, writer: Any, reader: Any = None) -> dict[str, Any]:
    return cast(dict[str, Any], fastavro.schemaless_reader(io.BytesIO(data), writer, reader))


# the reader schema of `read_archive_keys`: a record's instant alone (fastavro skips the other fields)
_KEYS_SCHEMA = {
    "type": "record",
    "name": "HoodieArchivedMetaEntry",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": name, "type": ["null", "string"], "default": None}
        for name in ("commitTime", "actionType", "actionState")
    ],
}


def read_archive_keys(storage: Storage, path: str) -> list[tuple[str, str, str]]:
    """(instant time, action, state) of each record of one archive file, in order, without building its records
    (a merged archive file of 20 MB holds thousands of nested commit metadata records)."""
    reader = fastavro.parse_schema(_KEYS_SCHEMA)
    out: list[tuple[str, str, str]] = []
    for block in read_log_file(storage, path):
        if block.block_type != BlockType.AVRO_DATA:
            continue
        writer = _parsed_schema(block.header[HeaderKey.SCHEMA])
        view = memoryview(block.content)
        for a, b in zip(*avro_record_bounds(block.content)):
            key = _key(_record(view[a:b], writer, reader))
            if key is not None:
                out.append(key)
    return out


def read_archive_file(storage: Storage, path: str) -> list[dict[str, Any]]:
    """The records of one archive file in order; corrupt blocks (a torn tail) and other block types are skipped, as
    Hudi's loaders skip them."""
    out: list[dict[str, Any]] = []
    for block in read_log_file(storage, path):
        if block.block_type == BlockType.AVRO_DATA:
            out += decode_archive_block(block)
    return out


def read_archive_records(storage: Storage | str, folder: str = ARCHIVE_FOLDER) -> list[dict[str, Any]]:
    """Every record of every archive file, oldest version first."""
    storage = storage_for(storage)
    out: list[dict[str, Any]] = []
    for _version, info in archive_files(storage, folder):
        out += read_archive_file(storage, info.path)
    return out


class ArchivedInstant(NamedTuple):
    """One archived timeline file: the instant (action and state as the active timeline names them) and the
    modification time its file had (`stateTransitionTime`, yyyyMMddHHmmssSSS; layout 1). An instant of a layout-2
    history (lsm_history.py) is completed, with its completion time and no modification time."""

    timestamp: str
    action: str
    state: str
    state_transition_time: str | None
    completion_time: str | None = None

    @property
    def instant(self) -> Instant:
        return Instant(self.timestamp, self.action, self.state, self.completion_time)


def _key(record: dict[str, Any]) -> tuple[str, str, str] | None:
    ts, action, state = record.get("commitTime"), record.get("actionType"), record.get("actionState") or "COMPLETED"
    if not ts or not action:
        return None
    return ts, action, state.lower()


@dataclass
class ArchivedTimeline:
    """The instants of a table's archived timeline: one per (time, action, state), oldest first."""

    records: dict[tuple[str, str, str], dict[str, Any]]

    @classmethod
    def load(cls, storage: Storage | str, folder: str = ARCHIVE_FOLDER) -> ArchivedTimeline:
        return cls.of(read_archive_records(storage, folder))

    @classmethod
    def of(cls, records: Iterable[dict[str, Any]]) -> ArchivedTimeline:
        found: dict[tuple[str, str, str], dict[str, Any]] = {}
        for record in records:
            key = _key(record)
            if key is not None:
                found[key] = record  # a later file's copy (an instant archived again) replaces the earlier
        return cls(found)

    @property
    def instants(self) -> list[ArchivedInstant]:
        keys = sorted(self.records, key=lambda k: (k[0], STATE_ORDER.get(k[2], 3), k[1]))
        return [ArchivedInstant(*k, self.records[k].get("stateTransitionTime")) for k in keys]

    def completed(self, actions: Sequence[str] | None = None) -> list[ArchivedInstant]:
        return [i for i in self.instants if i.state == COMPLETED and (actions is None or i.action in actions)]

    def completed_times(self) -> set[str]:
        """Instant times with a completed record."""
        return {ts for ts, _action, state in self.records if state == COMPLETED}

    def record(self, ts: str, action: str, state: str = COMPLETED) -> dict[str, Any] | None:
        return self.records.get((ts, action, state))

    def commit_metadata(self, ts: str) -> CommitMetadata | None:
        """CommitMetadata of the archived completed commit, delta commit or replace commit at `ts` (None when the
        archive has none, or its record carries no metadata)."""
        for action, field in (
            (COMMIT, "hoodieCommitMetadata"),
            ("deltacommit", "hoodieCommitMetadata"),
            (REPLACE_COMMIT, "hoodieReplaceCommitMetadata"),
        ):
            record = self.records.get((ts, action, COMPLETED))
            if record is not None and record.get(field) is not None:
                return commit_metadata_of(record[field])
        return None
