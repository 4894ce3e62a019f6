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


def ordering_field(props):
    """The table's ordering (precombine) field, or None: `hoodie.table.precombine.field`, or the name Hudi 1.x writes
    instead, also into version 6 tables, `hoodie.table.ordering.fields` (one field: several are refused by name)."""
    field = props.get("hoodie.table.precombine.field") or props.get("hoodie.table.ordering.fields") or None
    if field and "," in field:
        raise HoodieError(f"the table orders records by several fields ({field}); one ordering field is supported")
    return field


def merge_mode(props):
    """(mode, ordering field or None) from hoodie.properties-style props. A version 9 table's partial-update mode and
    merge properties (what Hudi 1.1 made of the partial-update and Debezium payloads: keep-the-old-value and delete
    markers) are refused, naming the key: records are merged whole here."""
    partial = (props.get("hoodie.table.partial.update.mode") or "").strip()
    if partial and partial.upper() != "NONE":
        raise HoodieError(
            f"the table merges partial updates (hoodie.table.partial.update.mode={partial}): not supported"
        )
    markers = sorted(k for k in props if k.startswith("hoodie.record.merge.property."))
    if markers:
        raise HoodieError(f"the table merges records with merge properties ({', '.join(markers)}): not supported")
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


def _deleted_flags(table, is_delete):
    n = table.num_rows
    if is_delete:
        return pa.array(np.ones(n, dtype=bool))
    if IS_DELETED in table.column_names:
        return pc.fill_null(table[IS_DELETED], False).combine_chunks()
    return pa.array(np.zeros(n, dtype=bool))


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
    stays the base even when it is empty: the later ones are then all contested."""
    if not any(v.table.num_rows for v in versions):
        return
    versions = versions[:1] + [v for v in versions[1:] if v.table.num_rows]
    laid = None
    if any(v.columns is not None for v in versions):
        versions, laid = _merge_partial(versions, schema, mode, ordering_field, keep_deletes)
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
        deleted = _deleted_flags(v.table, v.is_delete)
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


def split_base(base, touched, schema):
    """The base version (the first) split by `touched` (a boolean per row: a later version holds its key):
    (its rows no later version touches, aligned to `schema` and without its deleted rows, as merge_pieces yields
    them first; a Version of its touched rows, to merge with the later versions)."""
    table = base.table
    passed = pc.invert(touched)
    if not base.is_delete and IS_DELETED in table.column_names:
        passed = pc.and_not(passed, pc.fill_null(table[IS_DELETED], False))
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
    winner's schema comes from the winner, the others from the loser, the result having the columns of both."""
    if mode == EVENT_TIME_ORDERING:
        if newer.natural or older.natural:
            winner, loser = newer, older
        elif _order_key(older.order) > _order_key(newer.order):
            winner, loser = older, newer
        else:
            winner, loser = newer, older
    else:
        winner, loser = newer, older
    if winner.delete or loser.delete or winner.columns is None:
        return winner
    values = dict(loser.values)
    values.update((c, winner.values.get(c)) for c in winner.columns)
    columns = None if loser.columns is None else winner.columns | loser.columns
    order = values.get(ordering_field) if ordering_field else None
    return _Record(values, columns, False, False, order)


def _merge_partial(versions, schema, mode, ordering_field, keep_deletes):
    """(the versions without the keys any partial version holds, the merged rows of those keys): each key's log
    versions laid over one another in order (`lay_over`), then the result over its base version."""
    if mode == EVENT_TIME_ORDERING and ordering_field:
        for v in versions:
            if v.columns is not None and ordering_field not in v.columns:
                raise HoodieError(
                    f"a block of partial updates without the ordering field {ordering_field!r} (its columns: "
                    f"{sorted(v.columns)}): not supported"
                )
    keys = pc.unique(
        pa.chunked_array([v.table[KEY].cast(pa.string()) for v in versions if v.columns is not None]).combine_chunks()
    )
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
        deleted = _deleted_flags(table, v.is_delete).to_pylist()
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
