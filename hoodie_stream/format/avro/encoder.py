"""Vectorized Avro binary (schemaless) encoding of Arrow tables.

encode_records: each field of the record schema becomes one or more per-row byte pieces built with numpy
(varint/zigzag, union branch bytes, IEEE floats, decimals) or Arrow (string/bytes data); Arrow's
binary_join_element_wise then concatenates the pieces of every row in C++. Arrays and maps encode their
items the same way and join them per row with binary_join (one block per non-empty array, as Java writes).
Output equals fastavro.schemaless_writer byte for byte.

Vectorized shapes: null, boolean, int, long, float, double, string, bytes, fixed, enum, decimal (fixed or
bytes), date, time-millis/micros, timestamp-millis/micros/nanos (and local-), record, array, map, and unions
of null with one type. Unions with several non-null branches (and Arrow union columns) go through fastavro
record by record.
"""

import io

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import HoodieFormatError
from .schema import NotVectorizable, avro_type_to_arrow, parse_avro_schema, schema_kind, split_union, vectorizable

EMPTY = pa.scalar(b"", pa.large_binary())
_U64 = np.uint64


def encode_records(table, avro_schema):
    """Avro binary of every row of `table` under the record schema: (bytes, int64 offsets of n+1).

    Columns are matched to schema fields by name; a nullable field missing from the table is written null.
    """
    schema = parse_avro_schema(avro_schema)
    n = table.num_rows
    offsets = np.zeros(n + 1, np.int64)
    if n == 0:
        return b"", offsets
    if not vectorizable(schema):
        return _encode_fastavro(table, schema)
    try:
        pieces = []
        for f in schema["fields"]:
            name = f["name"]
            col = table.column(name).combine_chunks() if name in table.column_names else pa.nulls(n)
            pieces += _pieces(col, f["type"], None, name)
    except NotVectorizable:
        return _encode_fastavro(table, schema)
    if not pieces:
        return b"", offsets
    rec = pc.binary_join_element_wise(*pieces, EMPTY) if len(pieces) > 1 else pieces[0]
    offs = np.frombuffer(rec.buffers()[1], np.int64, n + 1, rec.offset * 8)
    data = rec.buffers()[2]
    start, end = int(offs[0]), int(offs[-1])
    return data.to_pybytes()[start:end] if (start or end != data.size) else data.to_pybytes(), offs - start


def _valid(arr):
    if arr.null_count == 0:
        return np.ones(len(arr), bool)
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), bool)
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _pieces(arr, s, present, path):
    """Per-row byte pieces (list of LargeBinaryArray) of `arr` under schema `s`.

    present: bool mask of rows that carry a value of this field at all (None = every row); rows outside it
    (inside a null parent) produce no bytes.
    """
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_union(arr.type):
        raise NotVectorizable(path)
    n = len(arr)
    valid = _valid(arr)
    if present is not None:
        valid &= present
    nullable, branches = split_union(s)
    if isinstance(s, list):
        if len(branches) > 1:
            raise NotVectorizable(path)
        rows = present if present is not None else np.ones(n, bool)
        if not nullable and (rows & ~valid).any():
            raise HoodieFormatError(f"field {path}: null value for non-nullable union {s}")
        null_b = 2 * s.index("null") if nullable else 0
        if not branches:
            return [_matrix_piece([_lead(np.zeros(n, bool), rows, 0, null_b)])]
        lead = _lead(valid, rows, 2 * s.index(branches[0]), null_b)
        return _typed(arr, branches[0], valid, lead, path)
    if s == "null":
        return []
    rows = present if present is not None else np.ones(n, bool)
    if (rows & ~valid).any():
        raise HoodieFormatError(f"field {path}: null value for non-nullable type {s}")
    return _typed(arr, s, valid, None, path)


def _lead(valid, rows, value_b, null_b):
    """Segment of one union branch byte for every present row."""
    mat = np.where(valid, np.uint8(value_b), np.uint8(null_b)).astype(np.uint8)[:, None]
    return mat, rows[:, None]


def _matrix_piece(segments):
    """LargeBinaryArray from segments (matrix (n, w) uint8, keep mask (n, w)) laid side by side per row."""
    mats = [m for m, _ in segments]
    keeps = [k for _, k in segments]
    mat = mats[0] if len(mats) == 1 else np.hstack(mats)
    keep = keeps[0] if len(keeps) == 1 else np.hstack([np.broadcast_to(k, m.shape) for m, k in segments])
    keep = np.broadcast_to(keep, mat.shape)
    n = mat.shape[0]
    lengths = keep.sum(axis=1, dtype=np.int64)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = mat.reshape(-1) if keep.all() else mat[keep]
    data = np.ascontiguousarray(data)
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _varint_segment(u, valid):
    """Segment of unsigned varints (uint64 values) for the rows in `valid`."""
    n = len(u)
    top = int(u[valid].max()) if valid.any() else 0
    width = max(1, (top.bit_length() + 6) // 7)
    nbytes = np.ones(n, np.int64)
    for k in range(1, width):
        nbytes += (u >> _U64(7 * k)) != 0
    mat = np.empty((n, width), np.uint8)
    for k in range(width):
        b = ((u >> _U64(7 * k)) & _U64(0x7F)).astype(np.uint8)
        if k < width - 1:
            b |= (nbytes > k + 1).astype(np.uint8) << np.uint8(7)
        mat[:, k] = b
    keep = (np.arange(width) < nbytes[:, None]) & valid[:, None]
    return mat, keep


def zigzag(v):
    v = v.astype(np.int64, copy=False)
    return ((v << np.int64(1)) ^ (v >> np.int64(63))).view(_U64)


def _typed(arr, s, valid, lead, path):
    kind, logical = schema_kind(s)
    segs = [lead] if lead is not None else []
    n = len(arr)
    if kind in ("int", "long"):
        segs.append(_varint_segment(zigzag(_int_values(arr, s, path)), valid))
        return [_matrix_piece(segs)]
    if kind in ("float", "double"):
        dtype = np.float32 if kind == "float" else np.float64
        vals = _numpy(arr, path, 0.0, (pa.types.is_floating, pa.types.is_integer)).astype(dtype)
        mat = vals.view(np.uint8).reshape(n, dtype().itemsize)
        segs.append((mat, valid[:, None]))
        return [_matrix_piece(segs)]
    if kind == "boolean":
        vals = _numpy(arr, path, False, (pa.types.is_boolean,)).astype(np.uint8)
        segs.append((vals[:, None], valid[:, None]))
        return [_matrix_piece(segs)]
    if kind == "enum":
        idx = pc.index_in(_cast(arr, pa.string(), path), value_set=pa.array(s["symbols"]))
        if (idx.is_null().to_numpy(zero_copy_only=False) & valid).any():
            raise HoodieFormatError(f"field {path}: value not among enum symbols {s['symbols']}")
        segs.append(_varint_segment(zigzag(idx.fill_null(0).to_numpy(zero_copy_only=False)), valid))
        return [_matrix_piece(segs)]
    if logical == "decimal" and kind in ("fixed", "bytes"):
        segs += _decimal_segments(arr, s, valid, path)
        return [_matrix_piece(segs)]
    if kind == "fixed":
        if not pa.types.is_fixed_size_binary(arr.type) or arr.type.byte_width != s["size"]:
            arr = _cast(arr, pa.binary(s["size"]), path)
        size = s["size"]
        raw = np.frombuffer(arr.buffers()[1], np.uint8, n * size, arr.offset * size) if n else np.zeros(0, np.uint8)
        segs.append((raw.reshape(n, size), valid[:, None]))
        return [_matrix_piece(segs)]
    if kind in ("string", "bytes"):
        data = _cast(arr, pa.large_binary(), path).fill_null(b"")
        lengths = pc.binary_length(data).to_numpy(zero_copy_only=False)
        segs.append(_varint_segment(zigzag(lengths), valid))
        return [_matrix_piece(segs), data]
    if kind in ("record", "error"):
        return _record_pieces(arr, s, valid, segs, path)
    if kind in ("array", "map"):
        return _collection_pieces(arr, s, valid, segs, path)
    if kind == "null":
        return [_matrix_piece(segs)] if segs else []
    raise NotVectorizable(path)


def _cast(arr, t, path):
    if arr.type == t:
        return arr
    try:
        return arr.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise HoodieFormatError(f"field {path}: cannot write Arrow {arr.type} as {t}: {e}") from None


def _numpy(arr, path, fill, checks):
    if pa.types.is_null(arr.type):
        return np.full(len(arr), fill)
    if not any(c(arr.type) for c in checks):
        raise HoodieFormatError(f"field {path}: Arrow type {arr.type} does not fit this Avro type")
    if arr.null_count:
        arr = arr.fill_null(fill)
    return arr.to_numpy(zero_copy_only=False)


_UNIT_SCALE = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_LOGICAL_NS = {
    "timestamp-millis": 1_000_000,
    "local-timestamp-millis": 1_000_000,
    "timestamp-micros": 1_000,
    "local-timestamp-micros": 1_000,
    "timestamp-nanos": 1,
    "local-timestamp-nanos": 1,
    "time-millis": 1_000_000,
    "time-micros": 1_000,
}


def _int_values(arr, s, path):
    """int64 numpy values of an int/long column (temporal types converted to the logical unit)."""
    t = arr.type
    logical = schema_kind(s)[1]
    if pa.types.is_null(t):
        return np.zeros(len(arr), np.int64)
    if pa.types.is_timestamp(t) or pa.types.is_time(t):
        raw = arr.view(pa.int64() if t.bit_width == 64 else pa.int32()).fill_null(0)
        raw = raw.to_numpy(zero_copy_only=False).astype(np.int64)
        have, want = _UNIT_SCALE[t.unit], _LOGICAL_NS.get(logical, _UNIT_SCALE[t.unit])
        return raw * (have // want) if have >= want else np.floor_divide(raw, want // have)
    if pa.types.is_date32(t):
        return arr.view(pa.int32()).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_date64(t):
        return np.floor_divide(arr.view(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), 86_400_000)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return _cast(arr, pa.int64(), path).fill_null(0).to_numpy(zero_copy_only=False)
    raise HoodieFormatError(f"field {path}: Arrow type {t} does not fit Avro {s}")


def _decimal_segments(arr, s, valid, path):
    """Big-endian two's complement: `size` bytes for fixed; fastavro's minimal length for bytes."""
    scale = s.get("scale", 0)
    if not pa.types.is_decimal(arr.type) or arr.type.scale != scale:
        arr = _cast(arr, pa.decimal128(38, scale) if s["precision"] <= 38 else pa.decimal256(76, scale), path)
    n, width = len(arr), arr.type.byte_width
    raw = np.frombuffer(arr.buffers()[1], np.uint8, n * width, arr.offset * width).reshape(n, width)
    be = raw[:, ::-1]
    if s["type"] == "fixed":
        size = s["size"]
        if size < width:
            sign = np.where(be[:, width - size] >= 0x80, np.uint8(0xFF), np.uint8(0))
            if ((be[:, : width - size] != sign[:, None]).any(axis=1) & valid).any():
                raise HoodieFormatError(f"field {path}: decimal value does not fit fixed({size})")
            return [(be[:, width - size :], valid[:, None])]
        pad = np.where(be[:, :1] >= 0x80, np.uint8(0xFF), np.uint8(0))
        return [(np.hstack([np.repeat(pad, size - width, axis=1), be]), valid[:, None])]
    negative = be[:, 0] >= 0x80
    # bytes needed = (bit_length(|x|) + 8) // 8, computed from the magnitude's big-endian bytes
    absval = _abs_be(be, negative)
    nonzero = absval != 0
    first = np.where(nonzero.any(axis=1), nonzero.argmax(axis=1), width)
    top = absval[np.arange(n), np.minimum(first, width - 1)].astype(np.int64)
    top_bits = np.where(first < width, np.floor(np.log2(np.maximum(top, 1))).astype(np.int64) + 1, 0)
    bitlen = np.where(first < width, (width - 1 - first) * 8 + top_bits, 0)
    nbytes = (bitlen + 8) // 8
    keep = (np.arange(width) >= (width - nbytes)[:, None]) & valid[:, None]
    return [_varint_segment(zigzag(nbytes), valid), (np.ascontiguousarray(be), keep)]


def _abs_be(be, negative):
    """Magnitudes of big-endian two's complement rows."""
    inv = np.where(negative[:, None], ~be, be).astype(np.uint16)
    carry = negative.astype(np.uint16)
    out = np.empty_like(be)
    for j in range(be.shape[1] - 1, -1, -1):
        total = inv[:, j] + carry
        out[:, j] = (total & 0xFF).astype(np.uint8)
        carry = total >> 8
    return out


def _record_pieces(arr, s, valid, segs, path):
    if not pa.types.is_struct(arr.type):
        if pa.types.is_null(arr.type):
            arr = pa.nulls(len(arr), avro_type_to_arrow(s))
        else:
            raise HoodieFormatError(f"field {path}: Arrow type {arr.type} does not fit Avro record {s['name']}")
    children = arr.flatten()
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    pieces = [_matrix_piece(segs)] if segs else []
    for f in s["fields"]:
        name = f["name"]
        child = children[names.index(name)] if name in names else pa.nulls(len(arr))
        pieces += _pieces(child, f["type"], valid, f"{path}.{name}")
    return pieces


def _collection_pieces(arr, s, valid, segs, path):
    """Array/map: count varint (if > 0), items, terminating 0 for every present row."""
    kind = s["type"]
    if pa.types.is_null(arr.type):
        arr = pa.nulls(len(arr), avro_type_to_arrow(s))
    if kind == "map" and not pa.types.is_map(arr.type):
        raise HoodieFormatError(f"field {path}: Arrow type {arr.type} does not fit Avro map")
    if kind == "array":
        if pa.types.is_fixed_size_list(arr.type):
            arr = arr.cast(pa.list_(arr.type.value_field))
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
            raise HoodieFormatError(f"field {path}: Arrow type {arr.type} does not fit Avro array")
    n = len(arr)
    offs = arr.offsets.to_numpy().astype(np.int64)
    counts = np.where(valid, np.diff(offs), 0)
    values = _gather_values(arr, offs, counts, valid)
    if kind == "map":
        keys = values.field(0)
        items = _pieces(keys, "string", None, f"{path}.key") + _pieces(
            values.field(1), s["values"], None, f"{path}.value"
        )
    else:
        items = _pieces(values, s["items"], None, f"{path}.element")
    item = items[0] if len(items) == 1 else pc.binary_join_element_wise(*items, EMPTY)
    list_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=list_offsets[1:])
    joined = pc.binary_join(pa.LargeListArray.from_arrays(pa.array(list_offsets), item), EMPTY)
    segs = segs + [_varint_segment(zigzag(counts), valid & (counts > 0))]
    terminator = (np.zeros((n, 1), np.uint8), valid[:, None])
    return [_matrix_piece(segs), joined, _matrix_piece([terminator])]


def _gather_values(arr, offs, counts, valid):
    """Child values of the valid rows of a list/map array, in row order."""
    if len(offs) > 1 and (counts == np.diff(offs)).all():
        return arr.values.slice(int(offs[0]), int(offs[-1] - offs[0]))
    total = int(counts.sum())
    starts = np.repeat(offs[:-1] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return arr.values.take(pa.array(starts + np.arange(total)))


def _encode_fastavro(table, schema):
    """Record-at-a-time fallback through fastavro.schemaless_writer."""
    parsed = fastavro.parse_schema(schema)
    out = io.BytesIO()
    offsets = [0]
    for rec in table.to_pylist():
        fastavro.schemaless_writer(out, parsed, _py_value(rec, schema))
        offsets.append(out.tell())
    return out.getvalue(), np.array(offsets, np.int64)


def _py_value(v, s):
    """Python value from Arrow's to_pylist adapted to fastavro (maps as dicts)."""
    if v is None:
        return None
    if isinstance(s, list):
        branches = [b for b in s if b != "null"]
        return _py_value(v, branches[0]) if len(branches) == 1 else v
    kind = schema_kind(s)[0]
    if kind in ("record", "error"):
        return {f["name"]: _py_value(v.get(f["name"]), f["type"]) for f in s["fields"]}
    if kind == "array":
        return [_py_value(x, s["items"]) for x in v]
    if kind == "map":
        return {k: _py_value(x, s["values"]) for k, x in (v.items() if isinstance(v, dict) else v)}
    return v
