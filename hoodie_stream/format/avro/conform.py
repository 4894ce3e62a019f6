"""Arrow data made to match an Arrow schema: columns and struct fields by name, missing ones null, types cast."""

import pyarrow as pa

from ...errors import HoodieFormatError


def conform_table(table, schema):
    """Table in `schema`: columns by name, missing ones null, nested structs matched by name, types cast."""
    n = table.num_rows
    columns = []
    for f in schema:
        if f.name in table.column_names:
            columns.append(conform_array(table.column(f.name).combine_chunks(), f.type))
        else:
            columns.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def conform_array(arr, t):
    """Array cast to type t, matching struct fields by name (missing fields null) at any depth."""
    if arr.type.equals(t):
        return arr
    if pa.types.is_struct(t) and pa.types.is_struct(arr.type):
        names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
        children = [
            conform_array(arr.field(names.index(f.name)), f.type) if f.name in names else pa.nulls(len(arr), f.type)
            for f in t
        ]
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)
    if pa.types.is_map(t) and pa.types.is_map(arr.type):
        offs = arr.offsets
        keys = conform_array(arr.keys, t.key_type)
        items = conform_array(arr.items, t.item_type)
        mask = arr.is_null() if arr.null_count else None
        return pa.MapArray.from_arrays(offs, keys, items, type=t, mask=mask)
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
        pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)
    ):
        values = conform_array(arr.values, t.value_type)
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        mask = arr.is_null() if arr.null_count else None
        return cls.from_arrays(arr.offsets, values, type=t, mask=mask)
    try:
        return arr.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise HoodieFormatError(f"cannot read Avro data of type {arr.type} as {t}: {e}") from None
