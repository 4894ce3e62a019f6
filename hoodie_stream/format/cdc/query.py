"""The changelog (CDC) query of a Hudi table, Hudi's RFC-51 CDC query: every change the data-changing commits of a
window (start, end] made, as rows `op` (i, u, d), `ts_ms` (the commit's instant time, as Hudi gives it), `before`
and `after` (the record before and after the change, as JSON text; null for an insert's before and a delete's
after).

Table config (hoodie.properties, set when the table is created): `hoodie.table.cdc.enabled` (default false) and
`hoodie.table.cdc.supplemental.logging.mode` (OP_KEY_ONLY, DATA_BEFORE, DATA_BEFORE_AFTER; default
DATA_BEFORE_AFTER; any case, written upper-case, only when CDC is enabled), as Hudi's HoodieTableConfig has them.

How the changes are found, as Hudi 0.15's CDC reader finds them for a merge-on-read table (HoodieCDCExtractor), for
every completed commit, delta commit or replace commit of the window whose operation changes data (upsert, insert,
delete, bulk insert, insert overwrite...; not compaction nor clustering), and every file group it wrote or replaced:
- changes its writes logged in `.cdc` files (every write stat of the group names one in cdcStats) in a
  DATA_BEFORE_AFTER table are taken as they are (Hudi's AS_IS case; `format/cdc/logger.py` writes them);
- any other change is inferred: the file group's records before that commit (its file slice as of the previous
  instant: base file and the log blocks of the earlier commits) against its records after it (the same with the
  commit's own base file or log blocks merged in). A key only after is an insert, a key only before a delete, a key
  in both whose record changed an update; a key a commit wrote but whose record did not change (an update that lost
  to a greater ordering value, a delete of a missing key) is no change. Hudi's LOG_FILE, BASE_FILE_INSERT,
  BASE_FILE_DELETE and REPLACE_COMMIT cases all come out of this one rule, as do the changes a merge handle logged
  in the other two modes. `.cdc` files are never read as data.

`before` and `after` are JSON text (`format/cdc/json_images.py`): logged images carry the data fields, inferred ones the
whole record, meta fields first, as Hudi renders the records of log files (Avro's JSON text:
`{"_hoodie_commit_time": "2024...", "id": 1, "name": "a"}`), except a DATA_BEFORE merge handle's before image, which
Hudi takes from its `.cdc` file (data fields); dates as days and timestamps as their stored integer, as in Avro. The
flat form (`flat=True`) gives instead the row itself as typed columns after `op` and `ts_ms`: the after image of
inserts and updates, the before image of deletes.

Order: by instant, then partition and file group, then key; Hudi promises no order.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import HoodieConfigError, HoodieError
from ..avro.schema import HOODIE_FIELDS
from ..file_group.fs_view import FileSlice, FileSystemView
from ..log_file.log_block import BlockType
from ..log_file.reader import read_log_file
from ..log_file.scanner import block_records
from ..read.time_travel import HoodieTimeTravelError, cleaned_files, earliest_retained
from ..record.merge import KEY, Version, merge
from .json_images import json_rows

if TYPE_CHECKING:
    from ..read.table_reader import TableReader

CDC_ENABLED = "hoodie.table.cdc.enabled"
LOGGING_MODE = "hoodie.table.cdc.supplemental.logging.mode"
LOGGING_MODES = ("OP_KEY_ONLY", "DATA_BEFORE", "DATA_BEFORE_AFTER")
DEFAULT_LOGGING_MODE = "DATA_BEFORE_AFTER"
# WriteOperationType.isDataChange: the operations whose commits a CDC query reads
DATA_CHANGE_OPERATIONS = frozenset(
    {
        "INSERT",
        "UPSERT",
        "UPSERT_PREPPED",
        "DELETE",
        "DELETE_PREPPED",
        "BULK_INSERT",
        "DELETE_PARTITION",
        "INSERT_OVERWRITE",
        "INSERT_OVERWRITE_TABLE",
        "BOOTSTRAP",
    }
)
INSERT, UPDATE, DELETE = "i", "u", "d"
FILE_NAME = "_hoodie_file_name"
DELETED = "__hs_del"  # merge(keep_deletes=True): whether the winning version of a key is a delete
CDC_SCHEMA = pa.schema([("op", pa.string()), ("ts_ms", pa.string()), ("before", pa.string()), ("after", pa.string())])


def logging_mode(value: Any, name: str = LOGGING_MODE) -> str:
    """A supplemental logging mode in Hudi's spelling (upper case), or a clear error naming `name`."""
    mode = str(value).strip().upper()
    if mode not in LOGGING_MODES:
        raise HoodieConfigError(f"option {name!r} must be one of {', '.join(LOGGING_MODES)} (any case), got {value!r}")
    return mode


def cdc_enabled(props: dict) -> bool:
    return str(props.get(CDC_ENABLED, "false")).strip().lower() == "true"


def table_logging_mode(props: dict) -> str | None:
    """The table's supplemental logging mode, None when CDC is not enabled."""
    if not cdc_enabled(props):
        return None
    return logging_mode(props.get(LOGGING_MODE) or DEFAULT_LOGGING_MODE)


def check_cdc_table(table: TableReader) -> None:
    """Refuse a changelog read of a table created without CDC, as Hudi does, naming the option; and of a table of
    version 8 or 9, whose changelog this project does not read."""
    if table.timeline.layout >= 2:
        raise HoodieError(
            f"{table.path}: changelog (CDC) reads of table version {table.config.version} (Hudi 1.x) are not "
            "supported; snapshot, time-travel and incremental reads are"
        )
    if not cdc_enabled(table.config.props):
        raise HoodieError(
            f"It isn't a CDC hudi table on {table.path}: a changelog (CDC) query needs a table created with "
            f"{CDC_ENABLED}=true (hoodie.properties has {CDC_ENABLED}={table.config.props.get(CDC_ENABLED, 'false')})"
        )


@dataclass(frozen=True)
class GroupState:
    """A file group as of an instant: its latest file slice then (None: no slice, no records) and the instants
    whose log blocks count; `logged`: the `.cdc` files (DATA_BEFORE_AFTER) in which the writes of the instant to
    the group logged their changes, None when they logged none (the changes are then inferred)."""

    as_of: str | None
    file_slice: FileSlice | None
    committed: AbstractSet[str]
    logged: tuple[str, ...] | None = None


@dataclass(frozen=True)
class GroupChanges:
    """The changes to read of one file group: its state before the first data-changing instant of the window that
    wrote or replaced it, then its state after each such instant, oldest first. Planned on the driver from the
    timeline; read anywhere from the slices named (`group_changes`)."""

    partition: str
    file_id: str
    states: tuple[GroupState, ...]
    mode: str = DEFAULT_LOGGING_MODE  # the table's supplemental logging mode


def read_changes(table: TableReader, start: str | None, end: str | None, flat: bool = False) -> pa.Table:
    """The changes of the data-changing commits in (start, end] (start None: from the first commit; end None: to
    the last completed one): CDC_SCHEMA rows, or with `flat` the rows themselves after `op` and `ts_ms`."""
    schema = table.arrow_schema(end)
    tables = [group_changes(table, plan, schema, flat) for plan in plan_changes(table, start, end)]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return changes_schema(schema, flat).empty_table()
    result = pa.concat_tables(tables)
    return result.take(pc.sort_indices(result["ts_ms"])) if len(tables) > 1 else result


def changes_schema(schema: pa.Schema, flat: bool) -> pa.Schema:
    """The schema of a changelog read of a table whose records have `schema`."""
    if flat:
        return pa.schema([pa.field("op", pa.string()), pa.field("ts_ms", pa.string()), *schema])
    return CDC_SCHEMA


def plan_changes(table: TableReader, start: str | None, end: str | None) -> list[GroupChanges]:
    """The file groups the data-changing commits of (start, end] wrote or replaced, by partition and file id, each
    with the slices to read its states from."""
    check_cdc_table(table)
    timeline = table.timeline
    plans: dict[tuple[str, str], list[str | None]] = {}  # group -> [previous instant, its window instants...]
    logged: dict[tuple[str | None, tuple[str, str]], tuple[str, ...]] = {}  # (instant, group) -> its `.cdc` files
    mode = table_logging_mode(table.config.props) or DEFAULT_LOGGING_MODE
    cleaned = cleaned_files(timeline)
    previous = None
    for inst in timeline.commits_timeline():
        ts = inst.timestamp
        if end is not None and ts > end:
            break
        if start is None or ts > start:
            meta = timeline.read_commit_metadata(ts)
            if str(meta.operation_type).upper() in DATA_CHANGE_OPERATIONS:
                stats = [s for s in meta.all_write_stats() if s.file_id]
                if cleaned:
                    _check_not_cleaned(table, stats, cleaned, start, end)
                groups = {(s.partition_path or "", s.file_id) for s in stats}
                replaced: set[tuple[str, str]] = set()
                for partition, ids in (meta.partition_to_replace_file_ids or {}).items():
                    replaced.update((partition, fid) for fid in ids)
                groups |= replaced
                if mode != "OP_KEY_ONLY":  # .cdc files with images
                    logged.update(_logged_files(ts, stats, groups - replaced))
                for group in groups:
                    plans.setdefault(group, [previous]).append(ts)
        previous = ts
    # the slices of every (instant, group) wanted, one file-system view per instant
    wanted: dict[str, set[tuple[str, str]]] = {}
    for group, instants in plans.items():
        for ts in instants:
            if ts is not None:
                wanted.setdefault(ts, set()).add(group)
    found: dict[tuple[str | None, tuple[str, str]], GroupState] = {}
    for ts in sorted(wanted):
        view = FileSystemView(table.storage, timeline, ts)
        groups = wanted[ts]
        for partition in sorted({p for p, _ in groups}):
            for fs in view.latest_slices(partition):
                if (partition, fs.file_id) in groups:
                    found[(ts, (partition, fs.file_id))] = GroupState(
                        ts, fs, view.committed, logged.get((ts, (partition, fs.file_id)))
                    )
    empty = frozenset[str]()
    return [
        GroupChanges(
            partition,
            file_id,
            tuple(
                found.get((ts, (partition, file_id)))
                or GroupState(ts, None, empty, logged.get((ts, (partition, file_id))))
                for ts in instants
            ),
            mode,
        )
        for (partition, file_id), instants in sorted(plans.items())
    ]


def _check_not_cleaned(table, stats, cleaned, start, end):
    """Refuse a window whose commits' files (data, `.cdc`) a clean deleted, naming the first (Hudi's CDC query fails
    on it too)."""
    for s in stats:
        for path in [s.path, *(s.cdc_stats or {})]:
            if path and path.rpartition("/")[2] in cleaned:
                raise HoodieTimeTravelError(
                    f"{table.path}: the changelog window ({start}, {end}] reads {path}, which a clean deleted (the "
                    f"earliest commit retained: {earliest_retained(table.timeline)}); read from a later start or "
                    "retain more commits (clean.retain_commits)"
                )


def _logged_files(ts, stats, groups):
    """{(ts, group): its `.cdc` files} of the groups every write stat of which names `.cdc` files (cdcStats)."""
    out: dict[tuple[str | None, tuple[str, str]], tuple[str, ...]] = {}
    by_group: dict[tuple[str, str], list] = {}
    for s in stats:
        by_group.setdefault((s.partition_path or "", s.file_id), []).append(s)
    for group in groups:
        group_stats = by_group.get(group, [])
        if group_stats and all(s.cdc_stats for s in group_stats):
            out[(ts, group)] = tuple(p for s in group_stats for p in sorted(s.cdc_stats))
    return out


def group_changes(table: TableReader, plan: GroupChanges, schema: pa.Schema, flat: bool = False) -> pa.Table:
    """The changes of one file group, instant by instant: its records after each instant against those before it
    (the previous state's: the instants between two of the group's wrote nothing to it).

    A state whose slice only adds log files to the previous state's (same base file, the earlier log files
    unchanged) is the previous state with the new files' blocks merged in: the previous state keeps its deleted
    keys for that (a delete with an ordering value still beats a later, smaller one, as in the slice's own merge).
    Any other state (a compaction's new base file, a base file the instant wrote) is read from its slice."""
    out = changes_schema(schema, flat)
    tables = []
    previous = plan.states[0]
    before = None  # the records of `previous`, read when a state's changes are inferred
    for state in plan.states[1:]:
        if state.logged is not None and plan.mode == DEFAULT_LOGGING_MODE:  # both images logged: taken as they are
            tables.append(_logged_changes(table, plan.partition, state, schema, flat).cast(out))
            previous, before = state, None
            continue
        if before is None:
            before = _state_records(table, previous, schema)
        touched = None  # the keys the instant's blocks hold: only they can change (None: any)
        if _foldable(previous, state):
            after, touched = _merged(table, before, previous, state, schema)
        else:
            after = _state_records(table, state, schema)
        old_live, new_live = live(before, touched), live(after, touched)
        # DATA_BEFORE: Hudi takes the before image from the .cdc file, which holds the data fields only
        bare_before = state.logged is not None
        for ts, op, rows, old in diff(state.as_of, old_live, new_live):
            piece = _flat(op, ts, rows) if flat else _cdc_rows(op, ts, rows, old, bare_before)
            tables.append(piece.cast(out))
        previous, before = state, after
    return pa.concat_tables(tables) if tables else out.empty_table()


def _logged_changes(table: TableReader, partition: str, state: GroupState, schema: pa.Schema, flat: bool) -> pa.Table:
    """The changes of a state's `.cdc` files (DATA_BEFORE_AFTER records: op, ts_ms, before, after): as Hudi reads
    them, the images with the data fields only; in the flat form the row's columns, the meta fields filled where
    known (commit time, record key from the key generator, partition path)."""
    records = logged_records(table, state.logged or ())
    ts = state.as_of or ""
    n = records.num_rows
    if not flat:
        return pa.table(
            {
                "op": records["op"],
                "ts_ms": pa.array([ts] * n, pa.string()),
                "before": _json_images(records["before"]),
                "after": _json_images(records["after"]),
            }
        )
    pieces = []
    for op in (INSERT, UPDATE, DELETE):
        picked = records.filter(pc.equal(records["op"], op))
        if not picked.num_rows:
            continue
        image = picked["before" if op == DELETE else "after"].combine_chunks()
        rows = pa.Table.from_arrays(image.flatten(), names=[f.name for f in image.type])
        columns = {}
        for field in schema:
            if field.name in rows.column_names:
                columns[field.name] = rows[field.name].cast(field.type)
            elif field.name == "_hoodie_commit_time":
                columns[field.name] = pa.array([ts] * rows.num_rows, field.type)
            elif field.name == KEY:
                columns[field.name] = table.keygen().record_keys(rows).cast(field.type)
            elif field.name == "_hoodie_partition_path":
                columns[field.name] = pa.array([partition] * rows.num_rows, field.type)
            else:
                columns[field.name] = pa.nulls(rows.num_rows, field.type)
        pieces.append(_flat(op, ts, pa.table(columns, schema=schema)))
    return pa.concat_tables(pieces) if pieces else changes_schema(schema, True).empty_table()


def logged_records(table: TableReader, paths: tuple[str, ...] | list[str]) -> pa.Table:
    """The CDC records of `.cdc` files (their CDC_DATA blocks, decoded with the blocks' own schema)."""
    tables = []
    for path in paths:
        for block in read_log_file(table.storage, path):
            if block.block_type != BlockType.CDC_DATA:
                continue
            tables.append(block_records(block))
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return (
            pa.table({"op": pa.array([], pa.string())})
            .append_column("before", pa.nulls(0))
            .append_column("after", pa.nulls(0))
        )
    return pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]


def _json_images(images: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each image of a CDC record's struct column as JSON text (null for a missing one)."""
    if isinstance(images, pa.ChunkedArray):
        images = images.combine_chunks()
    if pa.types.is_null(images.type) or not len(images):
        return pa.nulls(len(images), pa.string())
    rows = pa.Table.from_arrays(images.flatten(), names=[f.name for f in images.type])
    return pc.if_else(images.is_valid(), json_rows(rows), pa.scalar(None, pa.string()))


def _state_records(table: TableReader, state: GroupState, schema: pa.Schema) -> pa.Table:
    """The merged records of a state's slice, deleted keys kept (marked in DELETED)."""
    if state.file_slice is None:
        return no_records(schema)
    return table.read_slice(state.file_slice, state.committed, schema, keep_deletes=True)


def _foldable(old: GroupState, new: GroupState) -> bool:
    """Whether `new`'s records are `old`'s with blocks of more instants merged in: the same base file, and every log
    file of `old`'s slice in `new`'s (a listing holds the log files of later instants too: the instants whose
    blocks count tell the states apart)."""
    a, b = old.file_slice, new.file_slice
    if a is None or b is None or a.base_file != b.base_file or a.partition != b.partition:
        return False
    return {lf.name for lf in a.log_files} <= {lf.name for lf in b.log_files}


def _merged(
    table: TableReader, before: pa.Table, old: GroupState, new: GroupState, schema: pa.Schema
) -> tuple[pa.Table, pa.Array]:
    """`before` (`old`'s records with DELETED) with the blocks of the instants that count in `new` and not in `old`
    merged in, and the keys of those blocks."""

    def counts(instant):
        return instant in new.committed and instant not in old.committed

    paths = new.file_slice.log_file_paths if new.file_slice is not None else []
    added = table.log_versions(paths, counts, schema)
    return fold(table, before, added, schema), version_keys(added)


def fold(table: TableReader, before: pa.Table, added: list[Version], schema: pa.Schema) -> pa.Table:
    """A file group's records `before` (with DELETED: deleted keys kept, so a delete's ordering value still counts)
    with the versions `added` (log blocks, `HoodieTable.log_versions`) merged in, with DELETED."""
    deleted = before[DELETED]
    versions = [
        Version(before.filter(pc.invert(deleted)).drop_columns([DELETED])),
        Version(before.filter(deleted).drop_columns([DELETED]), is_delete=True),
    ]
    return merge(versions + added, schema, *table.merge_rule(schema), keep_deletes=True)


def version_keys(versions: list[Version]) -> pa.Array:
    """The distinct record keys of merge versions."""
    keys = [v.table[KEY] for v in versions if v.table.num_rows]
    return pc.unique(pa.chunked_array(keys, pa.string())) if keys else pa.array([], pa.string())


def live(records: pa.Table, keys: pa.Array | None = None) -> pa.Table:
    """The records of a state (with DELETED) that are not deleted, only those of `keys` when given."""
    out = records.filter(pc.invert(records[DELETED])).drop_columns([DELETED])
    return out if keys is None else out.filter(pc.is_in(out[KEY], value_set=keys))


def no_records(schema: pa.Schema) -> pa.Table:
    """The state of a file group without records (with DELETED)."""
    return schema.empty_table().append_column(DELETED, pa.array([], pa.bool_()))


def diff(ts, before, after):
    """(ts, op, rows, before rows) for the inserts, updates and deletes between two states of one file group."""
    after_known = pc.is_in(after[KEY], value_set=before[KEY])
    before_kept = pc.is_in(before[KEY], value_set=after[KEY])
    inserts = after.filter(pc.invert(after_known))
    deletes = before.filter(pc.invert(before_kept))
    old = _by_key(before.filter(before_kept))
    new = _by_key(after.filter(after_known))
    changed = _rows_differ(old, new)
    if inserts.num_rows:
        yield ts, INSERT, _by_key(inserts), None
    if len(changed) and pc.any(changed).as_py():
        yield ts, UPDATE, new.filter(changed), old.filter(changed)
    if deletes.num_rows:
        yield ts, DELETE, _by_key(deletes), None


def _by_key(table: pa.Table) -> pa.Table:
    return table.take(pc.sort_indices(table[KEY])) if table.num_rows > 1 else table


def _rows_differ(a: pa.Table, b: pa.Table) -> pa.Array:
    """Whether each row of `a` differs from the row of `b` at the same place (same schema), nulls included; the file
    name is not compared (a compaction rewrites it, and changes no record)."""
    differ = pa.array(np.zeros(a.num_rows, dtype=bool))
    for name in a.column_names:
        if name == FILE_NAME:
            continue
        x, y = a[name], b[name]
        try:
            ne = pc.fill_null(pc.not_equal(x, y), False)
            one_null = pc.xor(pc.is_null(x), pc.is_null(y))
            col = pc.or_(ne, one_null)
        except pa.ArrowNotImplementedError:  # nested types: compared as Python values
            col = pa.array([u != v for u, v in zip(x.to_pylist(), y.to_pylist(), strict=True)], pa.bool_())
        differ = pc.or_(differ, col)
    return differ


def _cdc_rows(op, ts, rows, before, bare_before=False) -> pa.Table:
    """JSON rows of changes; `bare_before`: before images without the meta fields."""
    n = rows.num_rows
    none = pa.nulls(n, pa.string())

    def bare(t):
        return t.drop_columns([c for c in HOODIE_FIELDS if c in t.column_names]) if bare_before else t

    if op == INSERT:
        before_json, after_json = none, json_rows(rows)
    elif op == DELETE:
        before_json, after_json = json_rows(bare(rows)), none
    else:
        before_json, after_json = json_rows(bare(before)), json_rows(rows)
    return pa.table(
        {
            "op": pa.array([op] * n, pa.string()),
            "ts_ms": pa.array([ts] * n, pa.string()),
            "before": before_json,
            "after": after_json,
        }
    )


def _flat(op: str, ts: str, rows: pa.Table) -> pa.Table:
    n = rows.num_rows
    out = rows.add_column(0, "ts_ms", pa.array([ts] * n, pa.string()))
    return out.add_column(0, "op", pa.array([op] * n, pa.string()))
