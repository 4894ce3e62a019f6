"""The LSM timeline history (`.hoodie/timeline/history/`) of a layout-2 table (table versions 8 and 9, Hudi 1.x):
where archived instants go. Read and written as Hudi 1.2 reads and writes it.

The directory holds (measured on tables Hudi 1.2.0 archived, COW and MOR, table version 9):
- data files `<min>_<max>_<layer>.parquet`: min and max are the smallest and greatest instant time of the rows,
  layer 0 for an archiving run's file, layer L+1 for a file merging `hoodie.timeline.compaction.batch.size` (10)
  files of layer L (`compact_history`). One row per archived instant, `HoodieLSMTimelineInstant` (SCHEMA), ordered
  by instant time: instantTime, completionTime, action (the completed file's: `commit` for a compaction,
  `replacecommit` for a clustering), metadata (the completed file's bytes, an Avro container on layout 2; null when
  it is empty), plan (the clean plan of a clean, the compaction plan of a compaction, the requested then non-empty
  inflight file of a replace commit or clustering; null otherwise), version 1. Hudi writes them with parquet-avro
  (parquet-mr 1.13.1): one row group, GZIP, format 1.0 (v1 data pages), the key-value metadata `parquet.avro.schema`
  (SCHEMA) and `writer.model.name` = `avro`; the root group is `org.apache.hudi.avro.model.HoodieLSMTimelineInstant`,
  the strings annotated UTF8, `version` required int32.
- `manifest_<N>`: the files of snapshot N, Jackson's pretty JSON without a trailing newline
  (`{"files":[{"fileName":...,"fileLen":<bytes>}]}`); N starts at 1, one more per archiving run and per compaction.
- `_version_`: N of the latest snapshot as decimal text (no newline).
- Hudi's checksum files (`.<name>.crc`, Hadoop's local file system) beside them, which no reader needs.

Reading (`LSMHistory.load`): `_version_`, else (missing or unreadable) the greatest N of the `manifest_<N>` files
(`*.tmp` ignored); no snapshot is an empty history. Then `manifest_<N>`, then the files it lists whose name range
meets the time range asked for. An instant listed twice (an archiving run interrupted before its instants left the
active timeline, run again) is taken once, from the first file of the manifest that holds it.

Writing (`write_history_file`), Hudi's order: the parquet file (created whole), then `manifest_<N+1>` (the previous
files plus the new one), then `_version_` replaced by N+1. A crash before the manifest leaves a file no manifest
lists (readers do not see it; the next run writes it again); a crash before `_version_` leaves `manifest_<N+1>`
which readers do not take while `_version_` names N, and which the next run replaces.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import HoodieFormatError, HoodieObjectNotFoundError
from ...storage import Storage
from ..avro.models import read_container
from ..table.config import timeline_layout
from .archived_timeline import ArchivedInstant
from .commit_metadata import CommitMetadata
from .instant import CLEAN, CLUSTERING, COMMIT_ACTIONS, COMPACTION, COMPLETED, LOG_COMPACTION, REPLACE_COMMIT, Instant

HISTORY_PATH = "history"  # hoodie.timeline.history.path
VERSION_FILE = "_version_"
MANIFEST_PREFIX = "manifest_"
TEMP_SUFFIX = ".tmp"
FILE_PATTERN = re.compile(r"^(\d+)_(\d+)_(\d)\.parquet$")  # LSMTimeline.ARCHIVE_FILE_PATTERN
INSTANT_VERSION = 1  # LSMTimeline.LSM_TIMELINE_INSTANT_VERSION_1
COMPACTION_BATCH_SIZE = 10  # hoodie.timeline.compaction.batch.size
COMPACTION_MAX_BYTES = 1000 * 1024 * 1024  # hoodie.timeline.compaction.target.file.max.bytes
MANIFEST_RETAINED_VERSIONS = 3  # hoodie.timeline.manifest.retained.versions
CODEC = "gzip"  # hoodie.parquet.compression.codec, as Hudi writes the history

# the schema text as parquet-avro stores it in Hudi 1.2's files (`parquet.avro.schema`)
SCHEMA = (
    '{"type":"record","name":"HoodieLSMTimelineInstant","namespace":"org.apache.hudi.avro.model","fields":['
    '{"name":"instantTime","type":["null",{"type":"string","avro.java.string":"String"}],"default":null},'
    '{"name":"completionTime","type":["null",{"type":"string","avro.java.string":"String"}],"default":null},'
    '{"name":"action","type":["null",{"type":"string","avro.java.string":"String"}],"default":null},'
    '{"name":"metadata","type":["null","bytes"],"default":null},'
    '{"name":"plan","type":["null","bytes"],"default":null},'
    '{"name":"version","type":"int","default":1}]}'
)
ARROW_SCHEMA = pa.schema(
    [
        pa.field("instantTime", pa.string()),
        pa.field("completionTime", pa.string()),
        pa.field("action", pa.string()),
        pa.field("metadata", pa.binary()),
        pa.field("plan", pa.binary()),
        pa.field("version", pa.int32(), nullable=False),
    ]
)
_KEY_VALUE = {"parquet.avro.schema": SCHEMA, "writer.model.name": "avro"}
_TIME_COLUMNS = ["instantTime", "completionTime", "action"]


def history_dir(props: dict[str, str]) -> str:
    """The history directory (relative to the table root) of a layout-2 table's hoodie.properties-style props."""
    _layout, timeline_dir = timeline_layout(props)
    return f"{timeline_dir}/{(props.get('hoodie.timeline.history.path') or HISTORY_PATH).strip('/')}"


# -- names ----------------------------------------------------------------------------------------------------------
class HistoryFile(NamedTuple):
    """A data file's name and what it says: the instant time range of its rows and its layer."""

    name: str
    min_instant: str
    max_instant: str
    layer: int

    @classmethod
    def parse(cls, name: str) -> HistoryFile | None:
        m = FILE_PATTERN.match(name)
        return cls(name, m.group(1), m.group(2), int(m.group(3))) if m else None

    def overlaps(self, start: str | None, end: str | None) -> bool:
        """Whether the file may hold an instant in (start, end] (Hudi's TimeRangeFilter.hasOverlappingInRange)."""
        return (start is None or self.max_instant > start) and (end is None or self.min_instant <= end)


def history_file_name(min_instant: str, max_instant: str, layer: int = 0) -> str:
    return f"{min_instant}_{max_instant}_{layer}.parquet"


def manifest_version(name: str) -> int | None:
    """N of a `manifest_<N>` name; None for other names and `*.tmp`."""
    if not name.startswith(MANIFEST_PREFIX) or name.endswith(TEMP_SUFFIX):
        return None
    rest = name[len(MANIFEST_PREFIX) :]
    return int(rest) if rest.isdigit() else None


# -- snapshots ------------------------------------------------------------------------------------------------------
class ManifestEntry(NamedTuple):
    file_name: str
    file_len: int


def snapshot_versions(storage: Storage, directory: str) -> list[int]:
    """N of every `manifest_<N>` in the directory, ascending."""
    found = (manifest_version(info.name) for info in storage.list(directory))
    return sorted(v for v in found if v is not None)


def latest_snapshot_version(storage: Storage, directory: str) -> int:
    """The version `_version_` names; when it is missing or unreadable, the greatest manifest version; -1 when
    there is none (LSMTimeline.latestSnapshotVersion)."""
    try:
        text = storage.read(f"{directory}/{VERSION_FILE}").decode("utf-8").strip()
        if text.isdigit():
            return int(text)
    except (HoodieObjectNotFoundError, UnicodeDecodeError):
        pass
    return max(snapshot_versions(storage, directory), default=-1)


def read_manifest(storage: Storage, directory: str, version: int) -> list[ManifestEntry]:
    """The files of snapshot `version` (none for a version below 1 or an empty manifest file)."""
    if version < 1:
        return []
    path = f"{directory}/{MANIFEST_PREFIX}{version}"
    try:
        data = storage.read(path)
    except HoodieObjectNotFoundError:
        raise HoodieFormatError(f"{storage.uri_of(path)}: the history's snapshot {version} has no manifest") from None
    if not data.strip():
        return []
    try:
        files = json.loads(data.decode("utf-8")).get("files") or []
        return [ManifestEntry(str(f["fileName"]), int(f["fileLen"])) for f in files]
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise HoodieFormatError(f"{storage.uri_of(path)}: not a timeline history manifest: {e}") from None


def latest_manifest(storage: Storage, directory: str) -> tuple[int, list[ManifestEntry]]:
    version = latest_snapshot_version(storage, directory)
    return version, read_manifest(storage, directory, version)


def manifest_json(entries: Iterable[ManifestEntry]) -> bytes:
    """A manifest as Jackson's default pretty printer writes HoodieLSMTimelineManifest (Hudi's exact bytes)."""
    items = [
        f'{{\n    "fileName" : {json.dumps(e.file_name)},\n    "fileLen" : {int(e.file_len)}\n  }}' for e in entries
    ]
    body = "[ " + ", ".join(items) + " ]" if items else "[ ]"
    return f'{{\n  "files" : {body}\n}}'.encode()


# -- data files -----------------------------------------------------------------------------------------------------
def encode_history_file(rows: Sequence[dict[str, Any]]) -> bytes:
    """HoodieLSMTimelineInstant rows as a parquet file laid out as Hudi's parquet-avro writer lays it out."""
    table = pa.Table.from_pylist(list(rows), schema=ARROW_SCHEMA)
    out = io.BytesIO()
    with pq.ParquetWriter(
        out,
        ARROW_SCHEMA,
        compression=CODEC,
        version="1.0",
        data_page_version="1.0",
        use_dictionary=["action", "version"],
        write_statistics=["instantTime", "completionTime", "action", "version"],
        store_schema=False,  # no ARROW:schema: the key-value metadata is parquet-avro's alone
    ) as writer:
        writer.write_table(table, row_group_size=max(len(rows), 1))
        writer.add_key_value_metadata(_KEY_VALUE)
    return out.getvalue()


def read_history_file(storage: Storage, path: str, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The rows of one data file (all columns, or `columns`)."""
    try:
        table = pq.read_table(io.BytesIO(storage.read(path)), columns=list(columns) if columns else None)
    except HoodieObjectNotFoundError:
        raise HoodieFormatError(f"{storage.uri_of(path)}: listed by the history's manifest but missing") from None
    except (pa.ArrowException, OSError) as e:
        raise HoodieFormatError(f"{storage.uri_of(path)}: not a readable timeline history file: {e}") from None
    missing = [c for c in columns or ("instantTime",) if c not in table.column_names]
    if missing:
        raise HoodieFormatError(f"{storage.uri_of(path)}: not a HoodieLSMTimelineInstant file (no {missing[0]})")
    return table.to_pylist()


def lsm_instant(completed: Instant, files: dict[str, tuple[Instant, bytes]], completion_time: str) -> dict[str, Any]:
    """The HoodieLSMTimelineInstant of a completed instant from its timeline files ({state: (instant, content)}),
    as MetadataConversionUtils.createLSMTimelineInstant makes it; `completion_time` stands for a completed file
    without one in its name (Hudi takes its modification time)."""
    pending = files.get("requested") or files.get("inflight")
    pending_action = pending[0].action if pending else None
    requested = files.get("requested", (None, b""))[1] or None
    inflight = files.get("inflight", (None, b""))[1] or None
    plan = None
    if pending_action == CLEAN:
        plan = requested or inflight
    elif pending_action in (REPLACE_COMMIT, CLUSTERING):
        plan = inflight or requested
    elif pending_action in (COMPACTION, LOG_COMPACTION):
        plan = requested
    return {
        "instantTime": completed.timestamp,
        "completionTime": completed.completion_time or completion_time,
        "action": completed.action,
        "metadata": files.get(COMPLETED, (None, b""))[1] or None,
        "plan": plan,
        "version": INSTANT_VERSION,
    }


# -- writing --------------------------------------------------------------------------------------------------------
def _update_manifest(storage: Storage, directory: str, remove: Sequence[str], add: ManifestEntry) -> int:
    """Snapshot N+1 = snapshot N less `remove`, plus `add`: its manifest (a leftover of a crashed run replaced),
    then `_version_`. Returns N+1."""
    version, entries = latest_manifest(storage, directory)
    entries = [e for e in entries if e.file_name not in remove] + [add]
    new = max(version, 0) + 1
    path = f"{directory}/{MANIFEST_PREFIX}{new}"
    storage.delete(path)
    storage.create(path, manifest_json(entries))
    storage.write(f"{directory}/{VERSION_FILE}", str(new).encode())
    return new


def write_history_file(storage: Storage, directory: str, rows: Sequence[dict[str, Any]]) -> str | None:
    """Append archived instants (HoodieLSMTimelineInstant rows) to the history as one new layer-0 file, then a new
    snapshot listing it. Returns the file's path; None when there is nothing to write, or when the latest snapshot
    lists that file already (a run that committed it and crashed before deleting the instants' active files)."""
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r["instantTime"])
    name = history_file_name(rows[0]["instantTime"], rows[-1]["instantTime"], 0)
    path = f"{directory}/{name}"
    if storage.exists(path):
        if any(e.file_name == name for e in latest_manifest(storage, directory)[1]):
            return None
        storage.delete(path)  # written by a run that crashed before its manifest
    storage.make_dirs(directory)
    size = storage.create(path, encode_history_file(rows))
    _update_manifest(storage, directory, (), ManifestEntry(name, size))
    return path


def _compaction_candidates(files: list[ManifestEntry], batch_size: int, max_bytes: int) -> list[str]:
    """LSMTimelineWriter.getCandidateFiles: up to `batch_size` consecutive files (by name), stopping past
    `max_bytes`; a file that alone passes it is skipped."""
    candidates: list[str] = []
    total = 0
    for entry in files:
        total += entry.file_len
        candidates.append(entry.file_name)
        if len(candidates) >= batch_size:
            break
        if total > max_bytes:
            if len(candidates) < 2:
                total, candidates = 0, []
            else:
                break
    return candidates


def _compact_layer(storage: Storage, directory: str, layer: int, batch_size: int, max_bytes: int) -> str | None:
    _version, entries = latest_manifest(storage, directory)
    files = sorted(
        (e for e in entries if (f := HistoryFile.parse(e.file_name)) is not None and f.layer == layer),
        key=lambda e: e.file_name,
    )
    if len(files) < batch_size:
        return None
    candidates = _compaction_candidates(files, batch_size, max_bytes)
    if len(candidates) < 2:
        return None
    parsed = [HistoryFile.parse(n) for n in candidates]
    name = history_file_name(
        min(p.min_instant for p in parsed if p), max(p.max_instant for p in parsed if p), layer + 1
    )
    rows = [row for n in candidates for row in read_history_file(storage, f"{directory}/{n}")]
    path = f"{directory}/{name}"
    storage.delete(path)
    size = storage.create(path, encode_history_file(rows))
    _update_manifest(storage, directory, candidates, ManifestEntry(name, size))
    return name


def compact_history(
    storage: Storage,
    directory: str,
    batch_size: int = COMPACTION_BATCH_SIZE,
    max_bytes: int = COMPACTION_MAX_BYTES,
    retained_versions: int = MANIFEST_RETAINED_VERSIONS,
) -> list[str]:
    """LSMTimelineWriter.compactAndClean: while a layer holds `batch_size` files, merge its oldest ones into one
    file of the next layer (each merge a new snapshot); then keep the newest `retained_versions` (+ one per merge)
    snapshots and delete the other manifests, then the data files no kept manifest lists. Returns the new files."""
    made: list[str] = []
    layer = 0
    while (name := _compact_layer(storage, directory, layer, batch_size, max_bytes)) is not None:
        made.append(name)
        layer += 1
    clean_history(storage, directory, retained_versions + len(made))
    return made


def clean_history(storage: Storage, directory: str, keep: int) -> None:
    versions = snapshot_versions(storage, directory)
    if len(versions) <= keep:
        return
    kept = versions[len(versions) - keep :]
    live = {e.file_name for v in kept for e in read_manifest(storage, directory, v)}
    storage.delete_many(f"{directory}/{MANIFEST_PREFIX}{v}" for v in versions if v not in kept)
    storage.delete_many(
        info.path for info in storage.list(directory) if info.name.endswith(".parquet") and info.name not in live
    )


# -- reading --------------------------------------------------------------------------------------------------------
@dataclass
class LSMHistory:
    """The archived instants of a layout-2 table: one per instant time, all completed, oldest first, with the
    interface of the layout-1 `ArchivedTimeline` (`instants`, `completed`, `completed_times`, `commit_metadata`)."""

    records: dict[str, dict[str, Any]]  # instant time -> HoodieLSMTimelineInstant row
    path: str = ""  # the history directory's URI, for messages

    @classmethod
    def load(
        cls,
        storage: Storage,
        directory: str,
        start: str | None = None,
        end: str | None = None,
        columns: Sequence[str] | None = None,
    ) -> LSMHistory:
        """The instants of the latest snapshot with an instant time in (start, end] (None: unbounded), reading only
        the files whose name range meets it; `columns` (instantTime, completionTime and action are always read)
        leaves out the others (metadata and plan: the bulk of a file)."""
        cols = None if columns is None else list(dict.fromkeys(_TIME_COLUMNS + list(columns)))
        found: dict[str, dict[str, Any]] = {}
        for entry in latest_manifest(storage, directory)[1]:
            parsed = HistoryFile.parse(entry.file_name)
            if parsed is None:
                path = storage.uri_of(f"{directory}/{entry.file_name}")
                raise HoodieFormatError(f"{path}: not a timeline history file name (<min>_<max>_<layer>.parquet)")
            if not parsed.overlaps(start, end):
                continue
            for row in read_history_file(storage, f"{directory}/{entry.file_name}", cols):
                ts = row.get("instantTime")
                if ts and (start is None or ts > start) and (end is None or ts <= end):
                    found.setdefault(ts, row)
        return cls(dict(sorted(found.items())), storage.uri_of(directory))

    @property
    def instants(self) -> list[ArchivedInstant]:
        return [
            ArchivedInstant(ts, r.get("action") or "", COMPLETED, None, r.get("completionTime"))
            for ts, r in self.records.items()
        ]

    def completed(self, actions: Sequence[str] | None = None) -> list[ArchivedInstant]:
        return [i for i in self.instants if actions is None or i.action in actions]

    def completed_times(self) -> set[str]:
        return set(self.records)

    def completion_times(self) -> dict[str, str]:
        """{instant time: completion time} of the archived instants."""
        return {ts: r["completionTime"] for ts, r in self.records.items() if r.get("completionTime")}

    def record(self, ts: str) -> dict[str, Any] | None:
        return self.records.get(ts)

    def commit_metadata(self, ts: str) -> CommitMetadata | None:
        """CommitMetadata of the archived commit, delta commit or replace commit at `ts` (None when the history
        has none, or its row carries no metadata). Avro on layout 2; JSON for a legacy completed file (a table
        upgraded from version 6)."""
        row = self.records.get(ts)
        if row is None or row.get("action") not in COMMIT_ACTIONS or not row.get("metadata"):
            return None
        data = row["metadata"]
        try:
            if data.startswith(b"Obj\x01"):
                return CommitMetadata.from_avro(read_container(data))
            return CommitMetadata.from_json(data)
        except HoodieFormatError as e:
            raise HoodieFormatError(f"{self.path}: the metadata of archived instant {ts}: {e}") from None
