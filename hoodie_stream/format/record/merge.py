"""Record merging by key, vectorized with Arrow.

Versions of a record arrive in write order: the base file first, then each log block in log order, and inside
a block in row order. Two merge modes, chosen from the table's payload class the way hudi-rs infers them:

- COMMIT_TIME_ORDERING: the last written version wins.
- EVENT_TIME_ORDERING: the greatest ordering (precombine) value wins; ties go to the later write. A delete without
  an ordering value wins by arrival: it removes every earlier version, and any later version beats it.

A version is a delete when it comes from a delete block or its `_hoodie_is_deleted` column is true.
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
    """One batch of record versions in write order: data rows, or deletes (key + optional ordering value)."""

    __slots__ = ("table", "is_delete")

    def __init__(self, table, is_delete=False):
        self.table = table
        self.is_delete = is_delete


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
    return untouched, Version(table.filter(touched), base.is_delete)


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
