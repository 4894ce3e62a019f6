"""Vectorized Avro binary (schemaless) encoding of Arrow tables, and decoding back to Arrow.

encode_records: each field of the record schema becomes one or more per-row byte pieces built with numpy
(varint/zigzag, union branch bytes, IEEE floats, decimals) or Arrow (string/bytes data); Arrow's
binary_join_element_wise then concatenates the pieces of every row in C++. Arrays and maps encode their
items the same way and join them per row with binary_join (one block per non-empty array, as Java writes).
Output equals fastavro.schemaless_writer byte for byte.

decode_records: all records advance together, one field at a time, over a positions array; arrays and maps
advance one item per round across the rows that still have items.

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

from .avro_schema import (
    avro_field_to_arrow,
    avro_to_arrow_schema,
    avro_type_to_arrow,
    parse_avro_schema,
    split_union,
)
from ..errors import HoodieFormatError

EMPTY = pa.scalar(b"", pa.large_binary())
_U64 = np.uint64


class _Unsupported(Exception):
    """A schema shape the vectorized path does not handle."""


def _kind(s):
    if isinstance(s, list):
        return "union", None
    if isinstance(s, str):
        return s, None
    return s["type"], s.get("logicalType")


# ====================================================================== encoding


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
    except _Unsupported:
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
        raise _Unsupported(path)
    n = len(arr)
    valid = _valid(arr)
    if present is not None:
        valid &= present
    nullable, branches = split_union(s)
    if isinstance(s, list):
        if len(branches) > 1:
            raise _Unsupported(path)
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
    kind, logical = _kind(s)
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
    raise _Unsupported(path)


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
    "timestamp-millis": 1_000_000, "local-timestamp-millis": 1_000_000,
    "timestamp-micros": 1_000, "local-timestamp-micros": 1_000,
    "timestamp-nanos": 1, "local-timestamp-nanos": 1,
    "time-millis": 1_000_000, "time-micros": 1_000,
}


def _int_values(arr, s, path):
    """int64 numpy values of an int/long column (temporal types converted to the logical unit)."""
    t = arr.type
    logical = _kind(s)[1]
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
            return [(be[:, width - size:], valid[:, None])]
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
    kind = _kind(s)[0]
    if kind in ("record", "error"):
        return {f["name"]: _py_value(v.get(f["name"]), f["type"]) for f in s["fields"]}
    if kind == "array":
        return [_py_value(x, s["items"]) for x in v]
    if kind == "map":
        return {k: _py_value(x, s["values"]) for k, x in (v.items() if isinstance(v, dict) else v)}
    return v


# ====================================================================== decoding


def decode_records(buffer, offsets, avro_schema, arrow_schema=None, reader_schema=None):
    """Arrow table of the Avro records buffer[offsets[i]:offsets[i+1]] written with `avro_schema`.

    reader_schema (Avro) and/or arrow_schema give the result shape: columns are matched by name (also
    inside structs); reader fields the writer lacks come back null, writer fields the reader lacks are
    dropped, and types are cast (int -> long etc.). Without either the result follows the writer schema.
    """
    schema = parse_avro_schema(avro_schema)
    offsets = np.asarray(offsets, np.int64)
    n = len(offsets) - 1
    target = arrow_schema
    if target is None and reader_schema is not None:
        target = avro_to_arrow_schema(reader_schema)
    if not vectorizable(schema):
        return _decode_fastavro(buffer, offsets, schema, target)
    try:
        writer_fields = [avro_field_to_arrow(f["name"], f["type"]) for f in schema["fields"]]
        reader = _Reader(buffer, int(offsets[-1]) if len(offsets) else 0)
        pos = offsets[:-1].copy()
        columns = [reader.decode(f["type"], pos, None) for f in schema["fields"]]
    except _Unsupported:
        return _decode_fastavro(buffer, offsets, schema, target)
    if n and not np.array_equal(pos, offsets[1:]):
        bad = int(np.flatnonzero(pos != offsets[1:])[0])
        raise HoodieFormatError(f"Avro record {bad}: decoded {pos[bad] - offsets[bad]} bytes, record has "
                                f"{offsets[bad + 1] - offsets[bad]}")
    table = pa.Table.from_arrays(columns, schema=pa.schema(writer_fields))
    return conform_table(table, target) if target is not None else table


def vectorizable(s):
    """False when the schema holds a shape only the fastavro fallback handles (multi-type unions)."""
    if isinstance(s, list):
        return len([b for b in s if b != "null"]) <= 1 and all(vectorizable(b) for b in s)
    if isinstance(s, str):
        return True
    if s["type"] in ("record", "error"):
        return all(vectorizable(f["type"]) for f in s["fields"])
    if s["type"] == "array":
        return vectorizable(s["items"])
    if s["type"] == "map":
        return vectorizable(s["values"])
    return True


class _Reader:
    def __init__(self, buffer, limit):
        raw = bytes(buffer)
        self.limit = min(limit, len(raw))
        self.buf = np.frombuffer(raw + b"\0" * 16, np.uint8)
        self.arrow_buf = pa.py_buffer(self.buf)

    def check(self, end):
        if len(end) and int(end.max()) > self.limit:
            raise HoodieFormatError("Avro record data runs past the end of the buffer")

    def read_long(self, p):
        """(zigzag-decoded values, byte counts) of the varints at positions p."""
        first = self.buf[p]
        if not (first & 0x80).any():
            u = first.astype(np.int64)
            return (u >> 1) ^ -(u & 1), np.ones(len(p), np.int64)
        win = self.buf[p[:, None] + np.arange(10)]
        cont = win >= 0x80
        nbytes = np.argmin(cont, axis=1).astype(np.int64) + 1
        u = np.zeros(len(p), _U64)
        for k in range(int(nbytes.max())):
            part = (win[:, k] & 0x7F).astype(_U64) << _U64(7 * k)
            u |= np.where(k < nbytes, part, _U64(0))
        v = (u >> _U64(1)).view(np.int64) ^ -(u & _U64(1)).view(np.int64)
        return v, nbytes

    def decode(self, s, pos, sel):
        """Arrow array (len(pos)) of type `s` at each position; advances pos for the rows in sel (None = all)."""
        idx = None if sel is None else np.flatnonzero(sel)
        p = pos if idx is None else pos[idx]
        arr, p = self._decode(s, p, sel, idx, len(pos))
        if idx is None:
            pos[:] = p
        else:
            pos[idx] = p
        return arr

    def _decode(self, s, p, sel, idx, m):
        kind, logical = _kind(s)
        if kind == "union":
            return self._union(s, p, sel, idx, m)
        if kind == "null":
            return pa.nulls(m), p
        t = avro_type_to_arrow(s)
        if kind in ("int", "long", "enum"):
            v, nb = self.read_long(p)
            if kind == "enum":
                codes = _prim(pa.int64(), v, idx, m, sel)
                return pa.array(s["symbols"], pa.string()).take(codes), p + nb
            return _prim(t, v, idx, m, sel), p + nb
        if kind in ("float", "double", "boolean"):
            size = {"float": 4, "double": 8, "boolean": 1}[kind]
            self.check(p + size)
            raw = self.buf[p[:, None] + np.arange(size)]
            v = raw.view({"float": np.float32, "double": np.float64, "boolean": np.uint8}[kind]).reshape(-1)
            if kind == "boolean":
                return pa.array(_spread(v != 0, idx, m), pa.bool_(), mask=None if sel is None else ~sel), p + 1
            return _prim(t, v, idx, m, sel), p + size
        if kind in ("string", "bytes") and logical != "decimal":
            length, nb = self.read_long(p)
            start = p + nb
            end = start + length
            self.check(end)
            return self._slices(start, end, idx, m, sel, t), end
        if kind == "fixed" or logical == "decimal":
            return self._fixed(s, p, idx, m, sel, t)
        if kind in ("record", "error"):
            children = []
            sub = p.copy()
            for f in s["fields"]:
                children.append(self.decode(f["type"], sub, None))
            fields = [avro_field_to_arrow(f["name"], f["type"]) for f in s["fields"]]
            arrays = [_spread_arrow(c, idx, m) for c in children]
            mask = None if sel is None else pa.array(~sel)
            if not fields:
                return pa.StructArray.from_arrays([], fields=[], mask=mask) if m else pa.array([], t), sub
            return pa.StructArray.from_arrays(arrays, fields=fields, mask=mask), sub
        if kind in ("array", "map"):
            return self._collection(s, p, idx, m, sel, t)
        raise _Unsupported(kind)

    def _union(self, s, p, sel, idx, m):
        nullable, branches = split_union(s)
        if len(branches) > 1:
            raise _Unsupported("union")
        branch, nb = self.read_long(p)
        p = p + nb
        if not branches:
            return pa.nulls(m), p
        value_b = s.index(branches[0])
        valid = branch == value_b
        if not (valid | (branch == (s.index("null") if nullable else -1))).all():
            raise HoodieFormatError(f"Avro union {s}: branch index out of range")
        full_valid = _spread(valid, idx, m)
        sub = np.zeros(m, np.int64)
        if idx is None:
            sub[:] = p
        else:
            sub[idx] = p
        arr = self.decode(branches[0], sub, full_valid)
        return arr, (sub if idx is None else sub[idx])

    def _slices(self, start, end, idx, m, sel, t):
        k = len(start)
        if k == 0:
            return pa.nulls(m, t) if m else pa.array([], t)
        bounds = np.empty(2 * k, np.int64)
        bounds[0::2] = start
        bounds[1::2] = end
        view = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), 2 * k - 1, [None, pa.py_buffer(bounds), self.arrow_buf]
        )
        take = 2 * np.arange(k)
        if idx is not None:
            take = pa.array(_spread(take, idx, m), mask=~sel)
        out = view.take(take)
        try:
            return out.cast(t)
        except pa.ArrowInvalid as e:
            raise HoodieFormatError(f"Avro string is not valid UTF-8: {e}") from None

    def _fixed(self, s, p, idx, m, sel, t):
        logical = _kind(s)[1]
        if s["type"] == "bytes":
            size_v, nb = self.read_long(p)
            start, size = p + nb, size_v
        else:
            start, size = p, np.full(len(p), s["size"], np.int64)
        end = start + size
        self.check(end)
        width = int(size.max()) if len(size) else 0
        if logical != "decimal":
            raw = self.buf[start[:, None] + np.arange(width)].reshape(-1)
            return _prim(t, raw.view(f"V{width}") if width else raw, idx, m, sel, width), end
        bw = t.byte_width
        if width > bw:
            raise HoodieFormatError(f"Avro decimal of {width} bytes does not fit {t}")
        cols = np.arange(bw) - (bw - size[:, None])  # right-align big-endian bytes
        raw = self.buf[np.where(cols >= 0, start[:, None] + cols, 0)]
        negative = (raw[np.arange(len(p)), np.minimum(bw - size, bw - 1)] >= 0x80) & (size > 0)
        raw = np.where(cols >= 0, raw, np.where(negative[:, None], np.uint8(0xFF), np.uint8(0)))
        le = np.ascontiguousarray(raw[:, ::-1]).reshape(-1)
        return _prim(t, le.view(f"V{bw}"), idx, m, sel, bw), end

    def _collection(self, s, p, idx, m, sel, t):
        kind = s["type"]
        k = len(p)
        p = p.copy()
        done_count = np.zeros(k, np.int64)
        rounds_rows, rounds_vals, rounds_j = [], [], []
        active = np.arange(k)
        rem = self._block_count(p, active)
        while True:
            live = rem > 0
            active, rem = active[live], rem[live]
            if not len(active):
                break
            sub = p[active]
            if kind == "map":
                key = self.decode("string", sub, None)
                val = self.decode(s["values"], sub, None)
                item = pa.StructArray.from_arrays([key, val], ["key", "value"])
            else:
                item = self.decode(s["items"], sub, None)
            p[active] = sub
            rounds_rows.append(active)
            rounds_j.append(done_count[active])
            rounds_vals.append(item)
            done_count[active] += 1
            rem = rem - 1
            ended = rem == 0
            if ended.any():
                rem[ended] = self._block_count(p, active[ended])
        counts = _spread(done_count, idx, m)
        offsets = np.zeros(m + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        if rounds_vals:
            row = idx[np.concatenate(rounds_rows)] if idx is not None else np.concatenate(rounds_rows)
            dest = offsets[row] + np.concatenate(rounds_j)
            order = np.empty(len(dest), np.int64)
            order[dest] = np.arange(len(dest))
            values = pa.concat_arrays(rounds_vals).take(pa.array(order))
        else:
            item_t = t.value_type if kind == "array" else pa.struct([t.key_field, t.item_field])
            values = pa.array([], item_t)
        mask = None if sel is None else pa.array(~sel)
        off32 = pa.array(offsets.astype(np.int32))
        if kind == "map":
            out = pa.MapArray.from_arrays(off32, values.field(0), values.field(1), type=t, mask=mask)
        else:
            out = pa.ListArray.from_arrays(off32, values, type=t, mask=mask)
        return out, p

    def _block_count(self, p, rows):
        """Read the next block count at p[rows] (advancing p); negative counts carry a byte size to skip."""
        if not len(rows):
            return np.zeros(0, np.int64)
        count, nb = self.read_long(p[rows])
        p[rows] += nb
        neg = count < 0
        if neg.any():
            _, nb2 = self.read_long(p[rows[neg]])
            p[rows[neg]] += nb2
            count = np.abs(count)
        return count


def _spread(values, idx, m):
    """Values of the selected rows placed into an array of m rows (zeros elsewhere)."""
    if idx is None:
        return values
    out = np.zeros((m,) + values.shape[1:], values.dtype)
    out[idx] = values
    return out


def _spread_arrow(arr, idx, m):
    if idx is None or len(arr) == m:
        return arr
    take = np.zeros(m, np.int64)
    take[idx] = np.arange(len(idx))
    mask = np.ones(m, bool)
    mask[idx] = False
    return arr.take(pa.array(take, mask=mask))


def _prim(t, values, idx, m, sel, width=None):
    """Fixed-width Arrow array of type t from numpy values of the selected rows."""
    width = width or t.bit_width // 8
    full = _spread(values, idx, m)
    if full.dtype.kind in "iuf" and full.dtype.itemsize != width:
        full = full.astype(f"{full.dtype.kind}{width}")
    data = pa.py_buffer(np.ascontiguousarray(full).view(np.uint8).reshape(-1)) if m else pa.py_buffer(b"")
    validity = None if sel is None else pa.py_buffer(np.packbits(sel, bitorder="little"))
    return pa.Array.from_buffers(t, m, [validity, data], null_count=-1 if sel is not None else 0)


def _decode_fastavro(buffer, offsets, schema, target):
    """Record-at-a-time fallback through fastavro.schemaless_reader."""
    parsed = fastavro.parse_schema(schema)
    view = memoryview(bytes(buffer))
    rows = [
        fastavro.schemaless_reader(io.BytesIO(view[int(a):int(b)]), parsed, return_record_name=False)
        for a, b in zip(offsets[:-1], offsets[1:])
    ]
    if target is None:
        target = avro_to_arrow_schema(schema)
    return pa.Table.from_pylist(rows, schema=target)


# ====================================================================== schema resolution


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
