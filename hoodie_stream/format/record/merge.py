"""Record merging by key, vectorized with Arrow.

Versions of a record arrive in write order: the base file first, then each log block in log order, and inside
a block in row order. Two merge modes, chosen from the table's payload class the way hudi-rs infers them:

- COMMIT_TIME_ORDERING: the last written version wins.
- EVENT_TIME_ORDERING: the greatest ordering (precombine) value wins; ties go to the later write. A delete without
  an ordering value wins by arrival: it removes every earlier version, and any later version beats it.

A version is a delete when it comes from a delete block or its `_hoodie_is_deleted` column is true.

Partial updates (a log block with IS_PARTIAL, written by Hudi 1.x's MERGE INTO: its schema holds the meta fields and
a subset of the data columns) are merged as Hudi 1.2's file group reader merges them: the log records of a key are
merged with each other first, in log order, then the result with the base file's record. Of two records, the one
the mode prefers wins (the newer one under commit-time ordering; the greater ordering value, ties to the newer, under
event-time ordering); every column the winner's schema has is taken from the winner, the others from the loser, and
the result's schema is the union of both. A delete on either side is merged as whole records are (`lay_over`).
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import HoodieError
from ..util.runs import run_ends

KEY = "_hoodie_record_key"
IS_DELETED = "_hoodie_is_deleted"
COMMIT_TIME_ORDERING = "COMMIT_TIME_ORDERING"
EVENT_TIME_ORDERING = "EVENT_TIME_ORDERING"

_SEQ = "__hs_seq"
_DEL = "__hs_del"
_NATURAL = "__hs_natural"

COMMIT_TIME_PAYLOADS = {
    "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload",
    "org.apache.hudi.common.model.OverwriteNonDefaultsWithLatestAvroPayload",
}
EVENT_TIME_PAYLOADS = {
    "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
    "org.apache.hudi.common.model.EventTimeAvroPayload",
    "org.apache.hudi.common.model.PartialUpdateAvroPayload",
}


PARTIAL_UPDATE_MODE = "hoodie.table.partial.update.mode"
IGNORE_DEFAULTS = "IGNORE_DEFAULTS"
FILL_UNAVAILABLE = "FILL_UNAVAILABLE"
MERGE_PROPERTY = "hoodie.record.merge.property."
DELETE_FIELD = "hoodie.payload.delete.field"
DELETE_MARKER = "hoodie.payload.delete.marker"
UNAVAILABLE_VALUE = "hoodie.write.partial.update.unavailable.value"


class MergeMode(str):
    """A merge mode (COMMIT_TIME_ORDERING or EVENT_TIME_ORDERING, equal to that string) with what a version 9 table's
    hoodie.properties adds to it: `partial` (None, IGNORE_DEFAULTS or FILL_UNAVAILABLE: which columns of the winning
    record keep the losing record's value), `unavailable` (FILL_UNAVAILABLE's marker value) and `delete_field` /
    `delete_marker` (a record whose `delete_field` holds `delete_marker` is a delete)."""

    partial: str | None
    unavailable: str | None
    delete_field: str | None
    delete_marker: str | None

    def __new__(cls, mode, partial=None, unavailable=None, delete_field=None, delete_marker=None):
        self = super().__new__(cls, mode)
        self.partial = partial
        self.unavailable = unavailable
        self.delete_field = delete_field
        self.delete_marker = delete_marker
        return self

    def with_mode(self, mode):
        """The same merge properties under `mode`."""
        return MergeMode(mode, self.partial, self.unavailable, self.delete_field, self.delete_marker)


def _props_of(mode):
    """(partial mode, unavailable value, delete field, delete marker) of a mode (a plain string: none)."""
    if isinstance(mode, MergeMode):
        return mode.partial, mode.unavailable, mode.delete_field, mode.delete_marker
    return None, None, None, None


def ordering_field(props):
    """The table's ordering (precombine) field, or None: `hoodie.table.precombine.field`, or the name Hudi 1.x writes
    instead, also into version 6 tables, `hoodie.table.ordering.fields` (one field: several are refused by name)."""
    field = props.get("hoodie.table.precombine.field") or props.get("hoodie.table.ordering.fields") or None
    if field and "," in field:
        raise HoodieError(
            f"the table orders records by several fields (hoodie.table.ordering.fields={field}): one ordering field "
            "is supported"
        )
    return field


def merge_mode(props, merge_properties=False):
    """(mode, ordering field or None) from hoodie.properties-style props.

    A version 9 table's partial-update mode and merge properties (what Hudi 1.1 made of the partial-update, Debezium
    and DMS payloads): with `merge_properties` (the readers and compaction) the mode is a `MergeMode` carrying
    them: `hoodie.table.partial.update.mode` IGNORE_DEFAULTS or FILL_UNAVAILABLE, and the merge properties
    `hoodie.record.merge.property.hoodie.payload.delete.field` / `.delete.marker` and
    `...hoodie.write.partial.update.unavailable.value`; any other value or merge property is refused, naming the key.
    Without it (the writers) a table with any of them is refused."""
    partial = (props.get(PARTIAL_UPDATE_MODE) or "").strip().upper() or None
    if partial == "NONE":
        partial = None
    extra = {k[len(MERGE_PROPERTY) :]: v for k, v in props.items() if k.startswith(MERGE_PROPERTY)}
    if not merge_properties:
        if partial:
            raise HoodieError(f"the table merges partial updates ({PARTIAL_UPDATE_MODE}={partial}): not supported")
        if extra:
            keys = ", ".join(sorted(MERGE_PROPERTY + k for k in extra))
            raise HoodieError(f"the table merges records with merge properties ({keys}): not supported")
    if partial not in (None, IGNORE_DEFAULTS, FILL_UNAVAILABLE):
        raise HoodieError(f"unknown partial update mode ({PARTIAL_UPDATE_MODE}={partial}): not supported")
    unknown = sorted(MERGE_PROPERTY + k for k in extra if k not in (DELETE_FIELD, DELETE_MARKER, UNAVAILABLE_VALUE))
    if unknown:
        raise HoodieError(f"the table merges records with merge properties ({', '.join(unknown)}): not supported")
    delete_field, delete_marker = extra.get(DELETE_FIELD) or None, extra.get(DELETE_MARKER) or None
    if (delete_field is None) != (delete_marker is None):
        raise HoodieError(
            f"the table has only one of {MERGE_PROPERTY}{DELETE_FIELD} and {MERGE_PROPERTY}{DELETE_MARKER}"
        )
    unavailable = extra.get(UNAVAILABLE_VALUE)
    ordering = ordering_field(props)
    explicit = props.get("hoodie.record.merge.mode")
    if explicit in (COMMIT_TIME_ORDERING, EVENT_TIME_ORDERING):
        mode = explicit
    else:
        payload = props.get("hoodie.compaction.payload.class") or props.get("hoodie.datasource.write.payload.class")
        if payload in COMMIT_TIME_PAYLOADS:
            mode = COMMIT_TIME_ORDERING
        elif payload in EVENT_TIME_PAYLOADS or (payload is None and ordering):
            mode = EVENT_TIME_ORDERING
        else:
            mode = COMMIT_TIME_ORDERING
    if mode == EVENT_TIME_ORDERING and not ordering:
        mode = COMMIT_TIME_ORDERING
    if partial or delete_field or unavailable is not None:
        mode = MergeMode(
            mode, partial, unavailable if partial == FILL_UNAVAILABLE else None, delete_field, delete_marker
        )
    return mode, ordering


class Version:
    """One batch of record versions in write order: data rows, or deletes (key + optional ordering value).
    `columns`: for a block of partial updates, the names of the columns its schema has (None: whole records);
    `base`: the rows of a base file (merged after the log records of their key when partial updates take part)."""

    __slots__ = ("table", "is_delete", "columns", "base")

    def __init__(self, table, is_delete=False, columns=None, base=False):
        self.table = table
        self.is_delete = is_delete
        self.columns = None if columns is None else frozenset(columns)
        self.base = base

    def with_table(self, table):
        """The same kind of Version holding `table`."""
        return Version(table, self.is_delete, self.columns, self.base)


def delete_version(keys, partitions, ordering_values, ordering_field, ordering_type):
    """A Version of delete-block entries; None ordering values mean 'natural order'."""
    columns = {KEY: pa.array(keys, pa.string()), "_hoodie_partition_path": pa.array(partitions, pa.string())}
    if ordering_field:
        columns[ordering_field] = pa.array(ordering_values, ordering_type or None)
    return Version(pa.table(columns), is_delete=True)


def _deleted_flags(table, is_delete, mode=None):
    """Whether each row of a version is a delete: a delete block's, `_hoodie_is_deleted` true, or (a `MergeMode`
    with a delete field) the delete field's value, as a string, equal to the delete marker."""
    n = table.num_rows
    if is_delete:
        return pa.array(np.ones(n, dtype=bool))
    flags = None
    if IS_DELETED in table.column_names:
        flags = pc.fill_null(table[IS_DELETED], False).combine_chunks()
    _partial, _unavailable, field, marker = _props_of(mode)
    if field and field in table.column_names:
        column = table[field]
        if not pa.types.is_string(column.type):
            column = column.cast(pa.string())
        marked = pc.fill_null(pc.equal(column, pa.scalar(marker, pa.string())), False).combine_chunks()
        flags = marked if flags is None else pc.or_(flags, marked)
    return pa.array(np.zeros(n, dtype=bool)) if flags is None else flags


def merge(versions, schema, mode=COMMIT_TIME_ORDERING, ordering_field=None, keep_deletes=False):
    """Merge versions into one row per key, in `schema` (deleted keys dropped unless keep_deletes).

    With keep_deletes the result has a boolean column `__hs_del` marking deleted keys (used by compaction and
    incremental reads).
    """
    pieces = list(merge_pieces(versions, schema, mode, ordering_field, keep_deletes))
    if not pieces:
        empty = schema.empty_table()
        return empty.append_column(_DEL, pa.array([], pa.bool_())) if keep_deletes else empty
    return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)


def merge_pieces(versions, schema, mode=COMMIT_TIME_ORDERING, ordering_field=None, keep_deletes=False):
    """merge(), as the tables whose concatenation is its result, each yielded as soon as it is known: first the
    rows of the first version (the base file) that no later version touches, passed straight through, then the
    winners of the contested keys. A caller can write the first while the second is worked out. The first version
    stays the base even when it is empty: the later ones are then all contested.

    Under a `MergeMode` with a partial-update mode, the keys of which some version has a value to fill (a null
    under IGNORE_DEFAULTS, the unavailable value under FILL_UNAVAILABLE) are merged as partial updates are
    (`lay_over`); the others whole."""
    if not any(v.table.num_rows for v in versions):
        return
    versions = versions[:1] + [v for v in versions[1:] if v.table.num_rows]
    laid = None
    fill = _fill_keys(versions, schema, mode) if len(versions) > 1 else None
    if fill is not None or any(v.columns is not None for v in versions):
        versions, laid = _merge_partial(versions, schema, mode, ordering_field, keep_deletes, fill)
    yield from _merge_whole(versions, schema, mode, ordering_field, keep_deletes)
    if laid is not None and laid.num_rows:
        yield laid


def _merge_whole(versions, schema, mode, ordering_field, keep_deletes):
    """merge_pieces of versions of whole records."""
    parts = []
    offset = 0
    for v in versions:
        t = _align(v.table, schema)
        n = t.num_rows
        seq = pa.array(np.arange(offset, offset + n, dtype=np.int64))
        offset += n
        deleted = _deleted_flags(v.table, v.is_delete, mode)
        if v.is_delete and ordering_field and mode == EVENT_TIME_ORDERING:
            natural = pc.is_null(t[ordering_field]).combine_chunks()
        else:
            natural = pa.array(np.full(n, v.is_delete and mode == EVENT_TIME_ORDERING, dtype=bool))
        parts.append(t.append_column(_SEQ, seq).append_column(_DEL, deleted).append_column(_NATURAL, natural))
    contested = parts[0]
    if len(parts) > 1:
        first, rest = parts[0], pa.concat_tables(parts[1:])
        touched = pc.is_in(first[KEY], value_set=pc.unique(rest[KEY]))
        passed = pc.invert(touched) if keep_deletes else pc.and_not(pc.invert(touched), first[_DEL])
        yield _finish(first.filter(passed), keep_deletes)
        contested = pa.concat_tables([first.filter(touched), rest])
    winners = _pick(contested, mode, ordering_field)
    if not keep_deletes and pc.any(winners[_DEL]).as_py():
        winners = winners.filter(pc.invert(winners[_DEL]))
    yield _finish(winners, keep_deletes)


def split_base(base, touched, schema, mode=None):
    """The base version (the first) split by `touched` (a boolean per row: a later version holds its key):
    (its rows no later version touches, aligned to `schema` and without its deleted rows, as merge_pieces yields
    them first; a Version of its touched rows, to merge with the later versions)."""
    table = base.table
    passed = pc.invert(touched)
    if not base.is_delete:
        passed = pc.and_not(passed, _deleted_flags(table, False, mode))
    untouched = _align(table.filter(passed), schema) if not base.is_delete else schema.empty_table()
    return untouched, base.with_table(table.filter(touched))


def _finish(table, keep_deletes):
    return table.drop_columns([_SEQ, _NATURAL] if keep_deletes else [_SEQ, _NATURAL, _DEL])


def _pick(table, mode, ordering_field):
    """The last version per key after sorting by the mode's precedence."""
    if table.num_rows == 0:
        return table
    if mode == EVENT_TIME_ORDERING:
        table = _drop_before_natural_deletes(table)
        # A surviving natural delete sorts first inside its key: any later version beats it, alone it wins.
        sort_keys = [
            (KEY, "ascending"),
            (_NATURAL, "descending"),
            (ordering_field, "ascending", "at_start"),
            (_SEQ, "ascending"),
        ]
    else:
        sort_keys = [(KEY, "ascending"), (_SEQ, "ascending")]
    order = pc.sort_indices(table, sort_keys=[k if len(k) == 3 else (*k, "at_start") for k in sort_keys])
    keys = pc.take(table[KEY], order).combine_chunks()
    return table.take(pc.take(order, pa.array(run_ends(keys))))


def _drop_before_natural_deletes(table):
    """Remove every version that precedes the last natural-order delete of its key."""
    natural = table[_NATURAL]
    if not pc.any(natural).as_py():
        return table
    cutoffs = table.filter(natural).group_by(KEY).aggregate([(_SEQ, "max")])
    narrow = table.select([KEY, _SEQ]).append_column("__hs_row", pa.array(np.arange(table.num_rows)))
    joined = narrow.join(cutoffs, keys=KEY, join_type="left outer")
    keep = pc.greater_equal(joined[_SEQ], pc.fill_null(joined[_SEQ + "_max"], -1))
    rows = np.sort(joined.filter(keep)["__hs_row"].to_numpy())
    return table.take(pa.array(rows))


def _align(table, schema):
    """Cast/reorder a version table to `schema`; missing columns become nulls, extra ones are dropped."""
    columns = []
    for f in schema:
        if f.name in table.column_names:
            col = table[f.name]
            if col.type != f.type:
                col = col.cast(f.type)
            columns.append(col)
        else:
            columns.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=pa.schema([pa.field(f.name, f.type) for f in schema]))


# -- partial updates ---------------------------------------------------------------------------------------------
class _Record:
    """One version of a key in the merge of partial updates: its values (column -> value), the columns it has (None:
    all), whether it is a delete, a delete without ordering value (wins by arrival), and its ordering value."""

    __slots__ = ("values", "columns", "delete", "natural", "order")

    def __init__(self, values, columns, delete, natural, order):
        self.values = values
        self.columns = columns
        self.delete = delete
        self.natural = natural
        self.order = order


def _order_key(value):
    return (0, 0) if value is None else (1, value)


def lay_over(older, newer, mode, ordering_field=None):
    """The merge of two versions of a key (`_Record`s, `newer` written after `older`), as Hudi 1.2 merges once a
    partial update takes part. The winner: under event-time ordering a delete without ordering value wins over the
    older record and loses to the newer one, else the greater ordering value wins, ties to the newer record; under
    commit-time ordering the newer record. A delete on either side: the winner whole. Else every column of the
    winner's schema comes from the winner, the others from the loser, the result having the columns of both.
    A whole winner under a `MergeMode`'s partial-update mode (Hudi 1.2's PartialUpdateHandler): each of its columns
    holding null (IGNORE_DEFAULTS: Spark's nullable columns default to null) or, if a string or binary column,
    the unavailable value (FILL_UNAVAILABLE) takes the loser's value; the winner keeps its ordering value."""
    if mode == EVENT_TIME_ORDERING:
        if newer.natural or older.natural:
            winner, loser = newer, older
        elif _order_key(older.order) > _order_key(newer.order):
            winner, loser = older, newer
        else:
            winner, loser = newer, older
    else:
        winner, loser = newer, older
    if winner.delete or loser.delete:
        return winner
    if winner.columns is None:
        return _fill(winner, loser, mode)
    values = dict(loser.values)
    values.update((c, winner.values.get(c)) for c in winner.columns)
    columns = None if loser.columns is None else winner.columns | loser.columns
    order = values.get(ordering_field) if ordering_field else None
    return _Record(values, columns, False, False, order)


def _fill(winner, loser, mode):
    """`winner` with its values to fill (`lay_over`) taken from `loser`."""
    partial, unavailable, _field, _marker = _props_of(mode)
    if partial == IGNORE_DEFAULTS:
        fills = [c for c, v in winner.values.items() if v is None]
    elif partial == FILL_UNAVAILABLE and unavailable is not None:
        marks = (unavailable, unavailable.encode())
        fills = [c for c, v in winner.values.items() if isinstance(v, (str, bytes)) and v in marks]
    else:
        return winner
    if not fills:
        return winner
    values = dict(winner.values)
    values.update((c, loser.values.get(c)) for c in fills)
    return _Record(values, None, False, False, winner.order)


def _fill_keys(versions, schema, mode):
    """Under a `MergeMode` with a partial-update mode, the keys of the later versions (as strings) of which a row of
    any version has a value to fill in a column not null in every version (`lay_over`); else None (also when
    there are none)."""
    partial, unavailable, _field, _marker = _props_of(mode)
    if partial is None or (partial == FILL_UNAVAILABLE and unavailable is None):
        return None
    rows = [v.table for v in versions if not v.is_delete and v.columns is None]
    if partial == IGNORE_DEFAULTS:
        names = [
            f.name
            for f in schema
            if f.name != KEY
            and any(f.name in t.column_names for t in rows)
            and any(t[f.name].null_count < t.num_rows for t in rows if f.name in t.column_names)
        ]
    else:
        names = [
            f.name
            for f in schema
            if pa.types.is_string(f.type) or pa.types.is_large_string(f.type) or pa.types.is_binary(f.type)
        ]
    found = []
    for t in rows:
        mask = None
        for name in names:
            if name not in t.column_names:
                continue
            column = t[name]
            if partial == IGNORE_DEFAULTS:
                hit = pc.is_null(column)
            else:
                mark = unavailable if not pa.types.is_binary(column.type) else unavailable.encode()
                hit = pc.fill_null(pc.equal(column, pa.scalar(mark, column.type)), False)
            mask = hit if mask is None else pc.or_(mask, hit)
        if mask is not None and pc.any(mask).as_py():
            found.append(t[KEY].filter(mask).cast(pa.string()))
    if not found:
        return None
    later = pa.chunked_array([v.table[KEY].cast(pa.string()) for v in versions[1:]], pa.string())
    keys = pc.unique(pa.chunked_array(found, pa.string()).combine_chunks())
    keys = keys.filter(pc.is_in(keys, value_set=pc.unique(later.combine_chunks())))
    return keys if len(keys) else None


def _merge_partial(versions, schema, mode, ordering_field, keep_deletes, fill=None):
    """(the versions without the keys any partial version holds (or `fill` holds: keys to merge by `lay_over` for a
    partial-update mode), the merged rows of those keys): each key's log versions laid over one another in order
    (`lay_over`), then the result over its base version."""
    if mode == EVENT_TIME_ORDERING and ordering_field:
        for v in versions:
            if v.columns is not None and ordering_field not in v.columns:
                raise HoodieError(
                    f"a block of partial updates without the ordering field {ordering_field!r} (its columns: "
                    f"{sorted(v.columns)}): not supported"
                )
    held_keys = [v.table[KEY].cast(pa.string()) for v in versions if v.columns is not None]
    if fill is not None:
        held_keys.append(pa.chunked_array([fill], pa.string()))
    keys = pc.unique(pa.chunked_array(held_keys, pa.string()).combine_chunks())
    rest, bases, logs = [], {}, {}
    names = schema.names
    for v in versions:
        key_column = v.table[KEY].cast(pa.string())
        held = pc.is_in(key_column, value_set=keys)
        rest.append(v.with_table(v.table.filter(pc.invert(held))))
        if not pc.any(held).as_py():
            continue
        table = v.table.filter(held)
        aligned = _align(table, schema)
        deleted = _deleted_flags(table, v.is_delete, mode).to_pylist()
        has = v.columns if v.columns is not None else frozenset(names)
        for row, delete in zip(aligned.to_pylist(), deleted):
            order = row.get(ordering_field) if ordering_field else None
            natural = v.is_delete and mode == EVENT_TIME_ORDERING and order is None
            values = row if v.columns is None else {c: row[c] for c in names if c in has}
            record = _Record(values, v.columns, delete, natural, order)
            held_by = bases if v.base else logs
            key = row[KEY]
            held_by[key] = lay_over(held_by[key], record, mode, ordering_field) if key in held_by else record
    rows, flags = [], []
    for key in sorted(set(bases) | set(logs)):
        record = logs.get(key)
        if key in bases:
            record = bases[key] if record is None else lay_over(bases[key], record, mode, ordering_field)
        if record.delete and not keep_deletes:
            continue
        rows.append({c: record.values.get(c) for c in names})
        flags.append(record.delete)
    out_schema = pa.schema([pa.field(f.name, f.type) for f in schema])
    laid = pa.Table.from_pylist(rows, schema=out_schema)
    if keep_deletes:
        laid = laid.append_column(_DEL, pa.array(flags, pa.bool_()))
    return rest, laid
