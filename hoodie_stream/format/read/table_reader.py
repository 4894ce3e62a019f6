"""TableReader: snapshot, read-optimized, incremental and time-travel reads of a Hudi table into Arrow, and the
file-slice merge every other reader (changelog, write-side before images) builds on. `HoodieTable`
(format/hoodie_table.py) adds the changelog and the views on top."""

import datetime
import json
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ...errors import HoodieError
from ...storage import Storage, storage_for
from ..avro.schema import META_FIELDS, avro_to_arrow_schema
from ..base_file.parquet import read_base_file
from ..file_group.fs_view import FileSlice, FileSystemView
from ..log_file.scanner import slice_versions
from ..record.keygen import KeyGenerator, make_key_generator
from ..record.merge import COMMIT_TIME_ORDERING, KEY, MergeMode, Version, merge, merge_mode
from ..table.config import TableConfig, timeline_layout
from ..timeline.active_timeline import Timeline
from ..timeline.archived import Archived, load_archived_timeline
from ..timeline.instant import parse_instant_time
from .time_travel import check_as_of, check_incremental, check_incremental_window, incremental_plan

# an instant a read names: an instant time or date-time text, a datetime or a date (instant.parse_instant_time)
InstantArg = str | datetime.datetime | datetime.date
QUERY_TYPES = ("snapshot", "read_optimized", "incremental")
_FILTER_OPS = {
    "=": pc.equal,
    "==": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


class TableReader:
    """A Hudi table on any storage, read through the project's own file-system view and merger (the reads; the public
    class is `HoodieTable`)."""

    def __init__(self, path: str | Storage, storage_options: Mapping[str, Any] | None = None) -> None:
        """`path`: the table's base path (a local path, a `file://` URI or an object store URI: `s3://`, `gs://`,
        `abfss://`...) or a `Storage` rooted at it; `storage_options`: the store's credentials and endpoint
        (hudi-rs / delta-rs key names), else taken from the environment."""
        self.storage = storage_for(path, storage_options)
        self.path = self.storage.uri
        self.config = TableConfig.load(self.storage)
        self.timeline = Timeline(self.storage, timeline_layout(self.config.props))
        self._keygen: KeyGenerator | None = None

    @property
    def meta_fields(self) -> bool:
        """False for tables written with hoodie.populate.meta.fields=false: keys come from the key generator."""
        return self.config.populate_meta_fields

    def keygen(self) -> KeyGenerator:
        if self._keygen is None:
            self._keygen = make_key_generator(self.config.props)
        return self._keygen

    def reload(self) -> "TableReader":
        self.timeline.reload()
        return self

    def archived_timeline(self) -> Archived:
        """The archived timeline: instants moved out of the active timeline, with their archived metadata
        (`.hoodie/archived/` on table version 6, the LSM history `.hoodie/timeline/history/` on 8 and 9)."""
        return load_archived_timeline(self.storage, self.config.props)

    def __repr__(self) -> str:
        """Path, table name, type and latest completed commit (of the timeline as last loaded); never the storage
        options, which hold credentials."""
        commits = self.timeline.commits_timeline()
        latest = commits[-1].timestamp if commits else None
        return (
            f"{type(self).__name__}({self.path!r}, name={self.config.table_name!r}, type={self.config.table_type}, "
            f"latest_commit={latest!r})"
        )

    # -- schema ---------------------------------------------------------------------------------------------
    def avro_schema(self, as_of: str | None = None) -> dict[str, Any]:
        """Data schema (no meta fields): from the latest completed commit that records one, else the create schema."""
        schema = self.timeline.latest_schema(as_of)
        if (
            not schema
            and as_of is not None
            and not [i for i in self.timeline.commits_timeline() if i.timestamp <= as_of]
        ):
            schema = self.timeline.latest_schema()  # before the active timeline (archived): Hudi takes the latest
        if schema:
            return json.loads(schema)
        create = self.config.create_schema
        if not create:
            raise HoodieError(f"{self.path}: the table has no schema (no commit records one, no create schema)")
        return json.loads(create) if isinstance(create, str) else create

    def arrow_schema(self, as_of: str | None = None, meta_fields: bool = True) -> pa.Schema:
        data = avro_to_arrow_schema(self.avro_schema(as_of))
        if not meta_fields:
            return data
        meta = [pa.field(name, pa.string()) for name in META_FIELDS]
        return pa.schema(meta + [f for f in data if f.name not in META_FIELDS])

    # -- reads ----------------------------------------------------------------------------------------------
    def read(
        self,
        query_type: str = "snapshot",
        as_of: InstantArg | None = None,
        start: InstantArg | None = None,
        end: InstantArg | None = None,
        columns: Sequence[str] | None = None,
        filters: Sequence[tuple[str, str, Any]] | None = None,
    ) -> pa.Table:
        """Read the table into one Arrow table with the five meta columns first.

        snapshot: the merged latest version of every record as of `as_of` (default: latest completed instant).
        read_optimized: base files only. incremental: the latest version (as of `end`) of the records written by
        instants in (start, end]. `as_of`, `start` and `end` take Hudi's instant forms (`instant.parse_instant_time`:
        `yyyyMMddHHmmssSSS`, `yyyy-MM-dd HH:mm:ss[.SSS]`, `yyyy-MM-dd`, ISO date-times); anything else is refused.
        As in Hudi, `as_of` must be earlier than the first incomplete commit, and neither `as_of` nor `end` may be
        before the earliest commit the last clean retained (`time_travel.HoodieTimeTravelError`); a table written
        without meta fields has no incremental query.
        """
        if query_type not in QUERY_TYPES:
            raise HoodieError(f"query_type must be one of {QUERY_TYPES}, got {query_type!r}")
        zone = self.config.timeline_timezone
        if query_type == "incremental":
            if as_of is not None:
                raise HoodieError("as_of applies to snapshot and read_optimized reads; use start/end for incremental")
            start, end = (
                None if t is None else parse_instant_time(t, name, zone, as_text=True)
                for t, name in ((start, "start"), (end, "end"))
            )
            check_incremental(self)
            check_incremental_window(self.timeline, start, end)
            table = self._read_incremental(start, end)
        else:
            if start is not None or end is not None:
                raise HoodieError("start/end apply to incremental reads only; use as_of for time travel")
            as_of = None if as_of is None else parse_instant_time(as_of, "as_of", zone)
            if as_of is not None:
                check_as_of(self.timeline, as_of)
            table = self._read_snapshot(as_of, read_optimized=query_type == "read_optimized")
        if not self.meta_fields:
            table = table.drop_columns([c for c in META_FIELDS if c in table.column_names])
        return _project(_filter(table, filters), columns)

    def read_file_groups(self, file_ids: AbstractSet[tuple[str, str]]) -> pa.Table:
        """The merged latest records of the file groups `{(partition path, file id)}`, meta columns first."""
        return self._read_snapshot(None, file_ids=set(file_ids))

    def _read_snapshot(self, as_of, read_optimized=False, file_ids=None, window=None):
        """Merged latest slices as of `as_of`; with `window` (a set of instants) only the base files and log
        blocks written by those instants take part, as hudi-rs reads incremental windows."""
        schema = self.arrow_schema(as_of)
        if not self.timeline.commits_timeline():
            return schema.empty_table()
        view = FileSystemView(self.storage, self.timeline, as_of)
        latest = view.latest_base_files if read_optimized else view.latest_slices
        # only the partitions of the file groups asked for are listed
        partitions = [None] if file_ids is None else sorted({p for p, _ in file_ids})
        slices = [fs for partition in partitions for fs in latest(partition)]
        # the window's instants the view counts as committed (archived ones too: CommittedInstants)
        committed = view.committed if window is None else frozenset(t for t in window if t in view.committed)
        tables = []
        for fs in slices:
            if file_ids is not None and (fs.partition, fs.file_id) not in file_ids:
                continue
            if window is None:
                tables.append(self.read_slice(fs, committed, schema))
                continue
            part = fs
            if fs.base_file and fs.base_instant not in window:
                part = FileSlice(fs.partition, fs.file_id, fs.base_instant, None, fs.log_files)
            tables.append(self.read_window_slice(part, committed, schema, (fs, view.committed)))
        if not tables:
            return schema.empty_table()
        return pa.concat_tables(tables)

    def read_slice(
        self,
        fs: FileSlice,
        committed: AbstractSet[str],
        schema: pa.Schema,
        keep_deletes: bool = False,
        keys: pa.Array | None = None,
    ) -> pa.Table:
        """Merged records of one file slice; log blocks count only when their instant is in `committed`. With `keys`
        (record keys), only those records are merged and returned."""
        versions = self.slice_versions(fs, committed, schema)
        if keys is not None:
            versions = [v.with_table(v.table.filter(pc.is_in(v.table[KEY], value_set=keys))) for v in versions]
        return self.merge_versions(versions, schema, keep_deletes)

    def read_window_slice(
        self,
        fs: FileSlice,
        committed: AbstractSet[str],
        schema: pa.Schema,
        whole: tuple[FileSlice, AbstractSet[str]] | None = None,
    ) -> pa.Table:
        """The merged records of an incremental window's part of a slice (`fs`: its base file only when a window
        instant wrote it, `committed`: the window's instants). A block of partial updates among them takes the
        columns it lacks from the versions before it: then `whole` (the slice, the instants committed as of the
        window's end) is merged instead; the caller keeps the window's records either way."""
        versions = self.slice_versions(fs, committed, schema)
        if whole is not None and any(v.columns is not None for v in versions):
            versions = self.slice_versions(*whole, schema)
        return self.merge_versions(versions, schema)

    def slice_versions(self, fs: FileSlice, committed: AbstractSet[str], schema: pa.Schema) -> list:
        """The merge Versions of one file slice: its base file's rows, then its log blocks whose instant is in
        `committed`."""
        versions = []
        if fs.base_file:
            base = Version(read_base_file(self.storage, fs.base_file_path), base=True)
            versions.append(base if self.meta_fields else self._with_generated_keys(base))
        return versions + self.log_versions(fs.log_file_paths, committed.__contains__, schema)

    def merge_versions(self, versions: list, schema: pa.Schema, keep_deletes: bool = False) -> pa.Table:
        """The merged records of `versions` by the table's merge rule."""
        mode, ordering = self.merge_rule(schema)
        return merge(versions, schema, mode, ordering, keep_deletes=keep_deletes)

    def merge_rule(self, schema: pa.Schema) -> tuple[str, str | None]:
        """(merge mode, ordering field) for records of `schema`: the table's (a `MergeMode` when it has a partial-update
        mode or merge properties), or commit-time ordering when the ordering field is not one of its columns."""
        mode, ordering = merge_mode(self.config.props, merge_properties=True)
        if ordering and ordering not in schema.names:
            return (mode.with_mode(COMMIT_TIME_ORDERING) if isinstance(mode, MergeMode) else COMMIT_TIME_ORDERING), None
        return mode, ordering

    def log_versions(self, log_paths: Sequence[str], counts: Callable[[str], bool], schema: pa.Schema) -> list:
        """The merge Versions of the blocks of `log_paths` whose instant `counts`, record keys filled in for a table
        written without meta fields."""
        _mode, ordering = self.merge_rule(schema)
        ordering_type = schema.field(ordering).type if ordering else None
        versions = slice_versions(self.storage, log_paths, counts, ordering, ordering_type)
        if not self.meta_fields:
            versions = [self._with_generated_keys(v) for v in versions]
        return versions

    def _with_generated_keys(self, version):
        """Fill the record key of a version written without meta fields from the table's key generator."""
        table = version.table
        if version.is_delete or table.num_rows == 0:
            return version
        if KEY in table.column_names and table[KEY].null_count == 0:
            return version
        keys = self.keygen().record_keys(table)
        if KEY in table.column_names:
            table = table.set_column(table.column_names.index(KEY), KEY, keys)
        else:
            table = table.append_column(KEY, keys)
        return version.with_table(table)

    def _read_incremental(self, start, end):
        """The latest version (as of the window's end) of the records the window's commits wrote
        (`time_travel.incremental_plan`: by instant time on table version 6, by completion time on 8 and 9, where
        the window takes the archived commits too)."""
        window, touched = incremental_plan(self.timeline, start, end)
        if not touched:
            return self.arrow_schema(window.as_of).empty_table()
        table = self._read_snapshot(window.as_of, file_ids=touched, window=set(window.instants))
        return table.filter(window.keep(table["_hoodie_commit_time"]))


def _project(table, columns):
    if columns is None:
        return table
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise HoodieError(f"unknown column(s) {missing}; the table has {table.column_names}")
    return table.select(columns)


def _filter(table, filters):
    """Apply (field, op, value) filters, as hudi-rs takes them; values are cast to the column type."""
    if not filters:
        return table
    mask = None
    for field, op, value in filters:
        if field not in table.column_names:
            raise HoodieError(f"filter on unknown column {field!r}")
        column = table[field]
        op = op.upper()
        if op in ("IN", "NOT IN"):
            values = pa.array(value if isinstance(value, (list, tuple)) else [value]).cast(column.type)
            cond = pc.is_in(column, value_set=values)
            if op == "NOT IN":
                cond = pc.invert(cond)
        elif op in _FILTER_OPS:
            cond = _FILTER_OPS[op](column, pa.scalar(value).cast(column.type))
        else:
            raise HoodieError(f"unsupported filter operator {op!r} on {field!r}")
        cond = pc.fill_null(cond, False)
        mask = cond if mask is None else pc.and_(mask, cond)
    return table.filter(mask)
