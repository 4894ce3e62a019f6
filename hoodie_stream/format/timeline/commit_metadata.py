"""HoodieCommitMetadata / HoodieWriteStat JSON, as Hudi's Jackson writer prints it."""

import dataclasses
import functools
import json
import re
from dataclasses import dataclass, field

from ...errors import HoodieFormatError
from ..avro.models import SCHEMAS, write_container

NULL_COMMIT = "null"
# extraMetadata entry of the sink's delta commits: how many of the write stats' numDeletes are the old copies of
# keys that moved partition (global index); numDeletes itself counts them, as Hudi's writers do
RECORDS_MOVED_KEY = "_hoodie_stream_records_moved"

# (attribute, JSON name, default) in Hudi's serialization order.
_STAT_FIELDS = [
    ("file_id", "fileId", ""),
    ("path", "path", None),
    ("cdc_stats", "cdcStats", None),
    ("prev_commit", "prevCommit", NULL_COMMIT),
    ("num_writes", "numWrites", 0),
    ("num_deletes", "numDeletes", 0),
    ("num_update_writes", "numUpdateWrites", 0),
    ("num_inserts", "numInserts", 0),
    ("total_write_bytes", "totalWriteBytes", 0),
    ("total_write_errors", "totalWriteErrors", 0),
    ("temp_path", "tempPath", None),
    ("partition_path", "partitionPath", None),
    ("total_log_records", "totalLogRecords", 0),
    ("total_log_files_compacted", "totalLogFilesCompacted", 0),
    ("total_log_size_compacted", "totalLogSizeCompacted", 0),
    ("total_updated_records_compacted", "totalUpdatedRecordsCompacted", 0),
    ("total_log_blocks", "totalLogBlocks", 0),
    ("total_corrupt_log_block", "totalCorruptLogBlock", 0),
    ("total_rollback_blocks", "totalRollbackBlocks", 0),
    ("file_size_in_bytes", "fileSizeInBytes", 0),
    ("min_event_time", "minEventTime", None),
    ("max_event_time", "maxEventTime", None),
    ("runtime_stats", "runtimeStats", None),
]
_DELTA_FIELDS = [
    ("log_version", "logVersion", 0),
    ("log_offset", "logOffset", 0),
    ("base_file", "baseFile", ""),
    ("log_files", "logFiles", None),
    ("records_stats", "recordsStats", None),
]
_KNOWN = {j for _, j, _ in _STAT_FIELDS + _DELTA_FIELDS}


@dataclass
class WriteStat:
    """HoodieWriteStat; with is_delta=True a HoodieDeltaWriteStat (log version/offset, base file, log files)."""

    file_id: str = ""
    path: str | None = None
    cdc_stats: dict | None = None
    prev_commit: str | None = NULL_COMMIT
    num_writes: int = 0
    num_deletes: int = 0
    num_update_writes: int = 0
    num_inserts: int = 0
    total_write_bytes: int = 0
    total_write_errors: int = 0
    temp_path: str | None = None
    partition_path: str | None = None
    total_log_records: int = 0
    total_log_files_compacted: int = 0
    total_log_size_compacted: int = 0
    total_updated_records_compacted: int = 0
    total_log_blocks: int = 0
    total_corrupt_log_block: int = 0
    total_rollback_blocks: int = 0
    file_size_in_bytes: int = 0
    min_event_time: int | None = None
    max_event_time: int | None = None
    runtime_stats: dict | None = None
    is_delta: bool = False
    log_version: int = 0
    log_offset: int = 0
    base_file: str = ""
    log_files: list = field(default_factory=list)
    records_stats: dict | None = field(default_factory=lambda: {"val": None})
    extra: dict = field(default_factory=dict)

    def to_dict(self):
        d = {j: getattr(self, a) for a, j, _ in _STAT_FIELDS}
        if self.is_delta:
            d.update((j, getattr(self, a)) for a, j, _ in _DELTA_FIELDS)
            if d["logFiles"] is None:
                d["logFiles"] = []
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d):
        if not isinstance(d, dict):
            raise HoodieFormatError(f"write stat is not a JSON object: {d!r}")
        is_delta = any(j in d for _, j, _ in _DELTA_FIELDS)
        kwargs = {a: d.get(j, default) for a, j, default in _STAT_FIELDS}
        if is_delta:
            kwargs.update({a: d.get(j, default) for a, j, default in _DELTA_FIELDS})
            if kwargs["log_files"] is None:
                kwargs["log_files"] = []
        extra = {k: v for k, v in d.items() if k not in _KNOWN}
        return cls(is_delta=is_delta, extra=extra, **kwargs)

    @property
    def records(self):
        """Records this stat wrote: updates and inserts plus deletes."""
        return (self.num_writes or 0) + (self.num_deletes or 0)

    @property
    def file_name(self):
        """The file this stat wrote (last path segment), or None."""
        return self.path.rsplit("/", 1)[-1] if self.path else None


@dataclass
class CommitMetadata:
    """HoodieCommitMetadata (HoodieReplaceCommitMetadata when partition_to_replace_file_ids is not None)."""

    partition_to_write_stats: dict = field(default_factory=dict)
    compacted: bool = False
    extra_metadata: dict = field(default_factory=dict)
    operation_type: str = "UNKNOWN"
    partition_to_replace_file_ids: dict | None = None

    @property
    def is_compaction(self) -> bool:
        """Whether the commit completed a compaction (its `compacted` flag, or a COMPACT / LOG_COMPACT operation)."""
        return bool(self.compacted) or str(self.operation_type).upper() in ("COMPACT", "LOG_COMPACT")

    def to_dict(self):
        d = {
            "partitionToWriteStats": {
                p: [s.to_dict() for s in stats] for p, stats in self.partition_to_write_stats.items()
            },
            "compacted": bool(self.compacted),
            "extraMetadata": dict(self.extra_metadata),
            "operationType": self.operation_type,
        }
        if self.partition_to_replace_file_ids is not None:
            d["partitionToReplaceFileIds"] = {p: list(ids) for p, ids in self.partition_to_replace_file_ids.items()}
        return d

    def to_json(self):
        """UTF-8 bytes of the Jackson pretty-printed JSON."""
        return jackson_pretty(self.to_dict()).encode("utf-8")

    @classmethod
    def from_dict(cls, d):
        if not isinstance(d, dict):
            raise HoodieFormatError("commit metadata is not a JSON object")
        stats = {
            p: [WriteStat.from_dict(s) for s in (lst or [])]
            for p, lst in (d.get("partitionToWriteStats") or {}).items()
        }
        replace = d.get("partitionToReplaceFileIds")
        return cls(
            stats,
            bool(d.get("compacted", False)),
            dict(d.get("extraMetadata") or {}),
            d.get("operationType") or "UNKNOWN",
            None if replace is None else dict(replace),
        )

    def to_avro(self):
        """The bytes of this metadata in a layout-2 timeline (table versions 8, 9): an Avro container of one
        HoodieCommitMetadata record, the JSON form's fields (each write stat's fields the Avro record has), as Hudi
        1.x's CommitMetadataSerDeV2 writes it. A replace commit's is refused (its Avro model is not written here)."""
        if self.partition_to_replace_file_ids is not None:
            raise HoodieFormatError("a replace commit's metadata is not written in Avro here")
        names = _avro_stat_fields()
        stats = {
            p: [{k: _avro_value(k, v) for k, v in s.to_dict().items() if k in names} for s in lst]
            for p, lst in self.partition_to_write_stats.items()
        }
        record = {
            "partitionToWriteStats": stats,
            "compacted": bool(self.compacted),
            "extraMetadata": {str(k): None if v is None else str(v) for k, v in self.extra_metadata.items()},
            "version": 1,
            "operationType": self.operation_type,
        }
        return write_container("HoodieCommitMetadata", record)

    @classmethod
    def from_avro(cls, record):
        """From the HoodieCommitMetadata (or HoodieReplaceCommitMetadata) Avro record of a layout-2 timeline: the
        JSON form's fields, every one nullable (a null is a field not given)."""
        if not isinstance(record, dict):
            raise HoodieFormatError("commit metadata is not an Avro record")
        d = {k: v for k, v in record.items() if v is not None}
        d["partitionToWriteStats"] = {
            p: [{k: v for k, v in stat.items() if v is not None} for stat in stats or []]
            for p, stats in (d.get("partitionToWriteStats") or {}).items()
        }
        return cls.from_dict(d)

    @classmethod
    def from_json(cls, data):
        if isinstance(data, (bytes, bytearray)):
            data = bytes(data).decode("utf-8")
        if not data.strip():
            return cls()
        try:
            d = json.loads(data)
        except ValueError as e:
            raise HoodieFormatError(f"commit metadata is not valid JSON: {e}") from None
        return cls.from_dict(d)

    @property
    def schema(self):
        """extraMetadata.schema (the writer's Avro schema JSON), or None."""
        return self.extra_metadata.get("schema") or None

    def all_write_stats(self):
        return [s for stats in self.partition_to_write_stats.values() for s in stats]

    @property
    def records_moved(self):
        """Keys the commit moved to another partition (the sink's RECORDS_MOVED_KEY entry); None when the commit
        does not say (a commit of another writer, or of an earlier version of the sink)."""
        value = self.extra_metadata.get(RECORDS_MOVED_KEY)
        try:
            return None if value is None else int(value)
        except (TypeError, ValueError):
            return None

    @property
    def records_deleted(self):
        """Records deleted: the write stats' numDeletes less the old copies of moved keys they count."""
        return sum(s.num_deletes or 0 for s in self.all_write_stats()) - (self.records_moved or 0)

    def file_ids(self):
        """{(partition, file id)} of every stat with a file id."""
        return {(p, s.file_id) for p, stats in self.partition_to_write_stats.items() for s in stats if s.file_id}

    def written_file_names(self):
        """{(partition, file name)} of every file written (stats with a path)."""
        return {(p, s.file_name) for p, stats in self.partition_to_write_stats.items() for s in stats if s.path}

    def with_stats(self, stats):
        """A copy whose write stats are `stats` grouped by partition path."""
        grouped = {}
        for s in stats:
            grouped.setdefault(s.partition_path or "", []).append(s)
        return dataclasses.replace(self, partition_to_write_stats=grouped)


_CONTROL = re.compile(r"\\u00([0-9a-f]{2})")


def _string(s):
    return _CONTROL.sub(lambda m: "\\u00" + m.group(1).upper(), json.dumps(s, ensure_ascii=False))


def _scalar(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, float):
        return repr(v) if v == v and v not in (float("inf"), float("-inf")) else _string(repr(v))
    return str(int(v))


def jackson_pretty(value, level=0):
    """JSON text as Jackson's DefaultPrettyPrinter writes it ("k" : v, 2-space objects, inline arrays)."""
    if isinstance(value, dict):
        if not value:
            return "{ }"
        pad = "  " * (level + 1)
        items = [f"{pad}{_string(str(k))} : {jackson_pretty(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[ ]"
        return "[ " + ", ".join(jackson_pretty(v, level) for v in value) + " ]"
    return _scalar(value)


@functools.cache
def _avro_stat_fields():
    """The field names of the HoodieWriteStat Avro record."""
    commit = json.loads(SCHEMAS["HoodieCommitMetadata"])
    stats = next(f for f in commit["fields"] if f["name"] == "partitionToWriteStats")
    record = next(t for t in stats["type"] if isinstance(t, dict))["values"]["items"]
    return {f["name"] for f in record["fields"]}


def _avro_value(name, value):
    """A write stat's JSON value in its Avro field: the runtime stats record with its three figures."""
    if name == "runtimeStats" and isinstance(value, dict):
        return {k: value.get(k) for k in ("totalScanTime", "totalCreateTime", "totalUpsertTime")}
    return value
