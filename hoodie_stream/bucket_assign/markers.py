"""Partial updates by marker (`hoodie.write.partial.update.mode=IGNORE_MARKERS`): a string, binary or array column
whose value is the marker (Debezium's `__debezium_unavailable_value` for an unchanged TOASTed PostgreSQL column, in
the form the connector gives columns of that type) keeps the value the table holds for the key. Resolved at write
time, so every reader sees the real value:

- inside a micro-batch, when a key's versions are pre-combined, a marker in the winner takes the value of the key's
  latest earlier version in the batch that has one (`fill_runs`);
- a marker still left in a version of a key the table holds takes the stored value, read from the key's file group
  (its latest merged slice as of the committed instants; `fill_stored`).

A marker in a key the table does not hold stays as it is (there is nothing to keep).
"""

import hashlib
import json
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..chain.columns import KEY

HEX = "hex:"
# the placeholders Debezium's PostgreSQL connector gives unchanged TOASTed geometry and geography columns (whatever
# the configured placeholder): SRID 4326 points far outside any real coordinates, as WKB in a (wkb, srid) struct,
# and a point (x, y) struct of io.debezium.data.geometry.Point
GEOMETRY_WKB = bytes.fromhex("0101000020E6100000000000FC83D797C1000000FC83D797C1")
GEOGRAPHY_WKB = bytes.fromhex("0101000020E61000000C21E7FDFF7F66401842CEFBFF7F5640")
POINT_XY = -99999999.0


class FieldsMarker(dict):
    """The marker of a struct column: a struct whose named fields hold these values (its other fields any)."""

    def __repr__(self):
        return f"FieldsMarker({dict.__repr__(self)})"


class EntryMarker(tuple):
    """The marker of a map column: a map holding this one (key, value) entry."""

    def __repr__(self):
        return f"EntryMarker{tuple.__repr__(self)}"


def column_markers(schema, marker):
    """((column, marker value), ...) of the string, binary and array columns of an Arrow schema, the marker as
    Debezium's PostgreSQL connector puts it in a column of that type: its text for strings, its bytes for binaries
    (`hex:<octets>` gives them in hex; strings then compare with their UTF-8); for arrays a list: of the text
    (text[]) or of the name-based UUID of the bytes (uuid[]: a column may hold either, both are markers), of the bytes
    (bytea[]), or of each byte as a number (int[] and bigint[]); for hstore the map {text: text} (a string map
    column, `hstore.handling.mode=map`) or its JSON text (a string column, the default `json` mode); for geometry
    and geography the fixed SRID 4326 WKB points (a struct with `wkb` and `srid`), for a point x = y = -99999999."""
    if marker.startswith(HEX):
        raw = bytes.fromhex(marker[len(HEX) :])
        text = raw.decode("utf-8", errors="replace")
    else:
        raw, text = marker.encode("utf-8"), marker
    out = []
    for f in schema:
        if f.name.startswith("_hoodie_"):
            continue
        if _is_text(f.type):
            out += [(f.name, text), (f.name, json.dumps({text: text}, separators=(",", ":")))]
        elif pa.types.is_map(f.type):
            if _is_text(f.type.key_type) and _is_text(f.type.item_type):
                out.append((f.name, EntryMarker((text, text))))
        elif pa.types.is_struct(f.type):
            names = {f.type.field(i).name: f.type.field(i).type for i in range(f.type.num_fields)}
            if pa.types.is_floating(names.get("x", pa.null())) and pa.types.is_floating(names.get("y", pa.null())):
                out.append((f.name, FieldsMarker(x=POINT_XY, y=POINT_XY)))  # a point (it may carry wkb, srid too)
            elif _is_bytes(names.get("wkb")) and pa.types.is_integer(names.get("srid", pa.null())):
                out += [(f.name, FieldsMarker(wkb=GEOMETRY_WKB, srid=4326))]
                out += [(f.name, FieldsMarker(wkb=GEOGRAPHY_WKB, srid=4326))]
        elif _is_bytes(f.type):
            out.append((f.name, raw))
        elif pa.types.is_list(f.type) or pa.types.is_large_list(f.type):
            item = f.type.value_type
            if _is_text(item):
                out += [(f.name, [text]), (f.name, [str(_name_uuid(raw))])]
            elif _is_bytes(item):
                out.append((f.name, [raw]))
            elif pa.types.is_int32(item) or pa.types.is_int64(item):
                out.append((f.name, [b - 256 if b > 127 else b for b in raw]))  # Java's signed bytes
    return tuple(out)


def batch_markers(schema, options):
    """The markers of a micro-batch (an Arrow schema) under the sink's options: `column_markers` with
    hoodie.write.partial.update.mode=IGNORE_MARKERS, none otherwise."""
    if options.partial_update_mode != "IGNORE_MARKERS":
        return ()
    return column_markers(schema, options.partial_custom_marker)


def _is_text(t):
    return t is not None and (pa.types.is_string(t) or pa.types.is_large_string(t))


def _is_bytes(t):
    return t is not None and (pa.types.is_binary(t) or pa.types.is_large_binary(t))


def _name_uuid(raw):
    """Java's UUID.nameUUIDFromBytes: the MD5 of the bytes as a version 3 UUID."""
    return uuid.UUID(bytes=hashlib.md5(raw, usedforsecurity=False).digest(), version=3)


def marked(column, value):
    """Boolean numpy mask of the values equal to the marker (a list marker: of the lists equal to it)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(value, FieldsMarker):
        mask = column.is_valid().to_numpy(zero_copy_only=False)
        for name, item in value.items():
            child = pc.struct_field(column, name)
            mask &= _equal(child, item)
        return mask
    if isinstance(value, EntryMarker):
        lengths = np.diff(column.offsets.to_numpy(zero_copy_only=False))
        mask = (lengths == 1) & column.is_valid().to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(mask)
        if len(rows):
            entries = column.take(pa.array(rows))  # a new array: its keys and items are one per row
            key, item = value
            mask[rows] = _equal(entries.keys, key) & _equal(entries.items, item)
        return mask
    if not isinstance(value, list):
        return _equal(column, value)
    mask = pc.fill_null(pc.equal(pc.list_value_length(column), len(value)), False).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(mask)
    if not len(rows):
        return mask
    candidates = column.take(pa.array(rows))
    same = np.ones(len(rows), bool)
    for i, item in enumerate(value):
        element = pc.list_element(candidates, i)
        same &= pc.fill_null(pc.equal(element, pa.scalar(item, element.type)), False).to_numpy(zero_copy_only=False)
    mask[rows] = same
    return mask


def _equal(column, value):
    """Boolean numpy mask of the values equal to `value` (null: not equal)."""
    return pc.fill_null(pc.equal(column, pa.scalar(value, column.type)), False).to_numpy(zero_copy_only=False)


def column_masks(table, markers):
    """{column: boolean numpy mask of its values equal to one of its markers} of the marked columns in `table`."""
    masks = {}
    for name, value in markers:
        if name in table.column_names:  # (a column may have several markers: uuid[] or text[], a string or hstore)
            masks[name] = masks[name] | marked(table[name], value) if name in masks else marked(table[name], value)
    return masks


def fill_runs(table, ends, markers):
    """`table` sorted by key then arrival (runs of one key, `ends` the last row of each run): the rows at `ends`
    with each marker replaced by the latest earlier value of the run that is not the marker."""
    winners = table.take(pa.array(ends))
    starts = np.concatenate([[0], np.asarray(ends[:-1]) + 1]) if len(ends) else np.zeros(0, np.int64)
    for name, mask in column_masks(table, markers).items():
        if not mask[ends].any():
            continue
        positions = np.where(mask, -1, np.arange(table.num_rows))
        latest = np.maximum.accumulate(positions)  # the last unmarked row up to each row
        source = latest[ends]
        usable = mask[ends] & (source >= starts)
        take = np.where(usable, source, ends)
        column = table[name].combine_chunks()
        winners = winners.set_column(winners.column_names.index(name), name, column.take(pa.array(take)))
    return winners


def fill_stored(table, found, old_partitions, old_files, markers, read_file_groups):
    """Markers left in rows of keys the table holds (`found`, with their file group) replaced by the stored
    values; `read_file_groups({(partition, file id)})` gives the merged latest records of those file groups."""
    if isinstance(found, (pa.Array, pa.ChunkedArray)):
        found = pc.fill_null(found, False).to_numpy(zero_copy_only=False)
    need = np.zeros(table.num_rows, bool)
    masks = column_masks(table, markers)
    for mask in masks.values():
        need |= mask
    need &= np.asarray(found, bool)
    if not need.any():
        return table
    rows = np.flatnonzero(need)
    groups = set(
        zip(pc.take(old_partitions, pa.array(rows)).to_pylist(), pc.take(old_files, pa.array(rows)).to_pylist())
    )
    stored = read_file_groups(groups)
    keys = table[KEY].combine_chunks()
    at = pc.index_in(keys, value_set=stored[KEY].combine_chunks()).to_numpy(zero_copy_only=False)
    present = ~np.isnan(at) if at.dtype.kind == "f" else np.ones(len(at), bool)
    index = np.where(present, np.nan_to_num(at, nan=0), 0).astype(np.int64) if at.dtype.kind == "f" else at
    for name, mask in masks.items():
        replace = mask & need & present
        if not replace.any() or name not in stored.column_names:
            continue
        values = stored[name].combine_chunks().take(pa.array(np.where(replace, index, 0)))
        column = table[name].combine_chunks()
        if not values.type.equals(column.type):
            values = values.cast(column.type)
        table = table.set_column(table.column_names.index(name), name, pc.if_else(pa.array(replace), values, column))
    return table
