"""Vectorized decoding of Avro binary (schemaless) records into Arrow tables.

decode_records: all records advance together, one field at a time, over a positions array; arrays and maps
advance one item per round across the rows that still have items. The vectorized shapes are the encoder's
(see avro_encoder); schemas with unions of several non-null branches go through fastavro record by record.
"""

import io

import fastavro
import numpy as np
import pyarrow as pa

from ...errors import HoodieFormatError
from .conform import conform_table
from .schema import (
    NotVectorizable,
    avro_field_to_arrow,
    avro_to_arrow_schema,
    avro_type_to_arrow,
    parse_avro_schema,
    schema_kind,
    split_union,
    vectorizable,
)


def decode_records(buffer, offsets, avro_schema, arrow_schema=None, reader_schema=None, ends=None):
    """Arrow table of the Avro records buffer[offsets[i]:offsets[i+1]] written with `avro_schema`; with `ends`, of
    the records buffer[offsets[i]:ends[i]] (one offset per record: records with bytes between them, such as the
    length-prefixed records of an AVRO_DATA block's content).

    reader_schema (Avro) and/or arrow_schema give the result shape: columns are matched by name (also
    inside structs); reader fields the writer lacks come back null, writer fields the reader lacks are
    dropped, and types are cast (int -> long etc.). Without either the result follows the writer schema.
    """
    schema = parse_avro_schema(avro_schema)
    offsets = np.asarray(offsets, np.int64)
    if ends is None:
        starts, ends = offsets[:-1], offsets[1:]
    else:
        starts, ends = offsets, np.asarray(ends, np.int64)
    n = len(starts)
    target = arrow_schema
    if target is None and reader_schema is not None:
        target = avro_to_arrow_schema(reader_schema)
    if not vectorizable(schema):
        return _decode_fastavro(buffer, starts, ends, schema, target)
    try:
        writer_fields = [avro_field_to_arrow(f["name"], f["type"]) for f in schema["fields"]]
        reader = _Reader(buffer, int(ends.max()) if n else 0)
        pos = starts.copy()
        columns = [reader.decode(f["type"], pos, None) for f in schema["fields"]]
    except NotVectorizable:
        return _decode_fastavro(buffer, starts, ends, schema, target)
    if n and not np.array_equal(pos, ends):
        bad = int(np.flatnonzero(pos != ends)[0])
        raise HoodieFormatError(
            f"Avro record {bad}: decoded {pos[bad] - starts[bad]} bytes, record has {ends[bad] - starts[bad]}"
        )
    table = pa.Table.from_arrays(columns, schema=pa.schema(writer_fields))
    return conform_table(table, target) if target is not None else table


def decode_field(buffer, starts, ends, avro_schema, name):
    """The top-level field `name` of the records buffer[starts[i]:ends[i]] (written with `avro_schema`) as an Arrow
    array, decoding only the fields before it and itself: the record keys of a log block without its other columns.
    """
    schema = parse_avro_schema(avro_schema)
    names = [f["name"] for f in schema["fields"]]
    if name not in names:
        raise HoodieFormatError(f"Avro records have no field {name!r} (fields: {names})")
    starts = np.asarray(starts, np.int64)
    upto = schema["fields"][: names.index(name) + 1]
    try:
        if not all(vectorizable(f["type"]) for f in upto):
            raise NotVectorizable("field")
        reader = _Reader(buffer, int(np.max(ends)) if len(starts) else 0)
        pos = starts.copy()
        for f in upto[:-1]:
            reader.skip(f["type"], pos)
        return reader.decode(upto[-1]["type"], pos, None)
    except NotVectorizable:
        field = upto[-1]
        parsed = fastavro.parse_schema(schema)
        view = memoryview(bytes(buffer))
        values = [
            fastavro.schemaless_reader(io.BytesIO(view[int(a) : int(b)]), parsed, return_record_name=False)[name]
            for a, b in zip(starts, np.asarray(ends, np.int64))
        ]
        return pa.array(values, avro_field_to_arrow(name, field["type"]).type)


# varints of more than one byte are read this many at a time (a window of 10 bytes each, its index 8 bytes a byte)
VARINT_ROWS = 65_536


class _Reader:
    """Avro values read at many positions of one buffer of records at once."""

    def __init__(self, buffer, limit):
        self.buf = np.frombuffer(buffer, np.uint8)  # no copy: a log block's content can be hundreds of MB
        self.limit = min(limit, len(self.buf))
        self.arrow_buf = pa.py_buffer(self.buf)

    def check(self, end):
        if len(end) and int(end.max()) > self.limit:
            raise HoodieFormatError("Avro record data runs past the end of the buffer")

    def check_lengths(self, lengths):
        """Refuses negative string and bytes lengths (corrupt content: a slice ending before it starts would be read
        out of the buffer's bounds)."""
        if len(lengths) and int(lengths.min()) < 0:
            raise HoodieFormatError("Avro record data holds a negative string or bytes length")

    def read_long(self, p):
        """(zigzag-decoded values, byte counts) of the varints at positions p (a varint running past the buffer
        gets a byte count taking it past its end, for the caller's bounds check)."""
        first = self._bytes_at(p)
        u = first.astype(np.uint64)
        nbytes = np.ones(len(p), np.int64)
        longer = np.flatnonzero(first & 0x80)
        for rows in np.array_split(longer, -(-len(longer) // VARINT_ROWS)) if len(longer) else ():
            u[rows], nbytes[rows] = self._varints(p[rows])
        v = (u >> np.uint64(1)).view(np.int64) ^ -(u & np.uint64(1)).view(np.int64)
        return v, nbytes

    def _bytes_at(self, p):
        """The bytes at positions p; 0 past the buffer's end."""
        inside = p < len(self.buf)
        if inside.all():
            return self.buf[p]
        return np.where(inside, self.buf[np.where(inside, p, 0)], np.uint8(0))

    def _varints(self, p):
        """(unsigned values, byte counts) of varints of more than one byte at positions p."""
        win = self._bytes_at(p[:, None] + np.arange(10))
        cont = win >= 0x80
        nbytes = np.argmin(cont, axis=1).astype(np.int64) + 1
        u = np.zeros(len(p), np.uint64)
        for k in range(int(nbytes.max())):
            part = (win[:, k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            u |= np.where(k < nbytes, part, np.uint64(0))
        return u, nbytes

    def skip(self, s, pos):
        """Advance every position past a value of type `s`, building no Arrow array for a string, bytes, fixed,
        number or a null union of one of them (others are decoded and dropped)."""
        kind, logical = schema_kind(s)
        if kind == "union":
            nullable, branches = split_union(s)
            if len(branches) != 1:
                raise NotVectorizable("union")
            branch, nb = self.read_long(pos)
            pos += nb
            value_b = s.index(branches[0])
            if not ((branch == value_b) | (branch == (s.index("null") if nullable else -1))).all():
                raise HoodieFormatError(f"Avro union {s}: branch index out of range")
            rows = np.flatnonzero(branch == value_b)
            sub = pos[rows]
            self.skip(branches[0], sub)
            pos[rows] = sub
        elif kind == "null":
            pass
        elif kind in ("int", "long", "enum"):
            pos += self.read_long(pos)[1]
        elif kind in ("float", "double", "boolean"):
            pos += {"float": 4, "double": 8, "boolean": 1}[kind]
        elif kind in ("string", "bytes"):
            length, nb = self.read_long(pos)
            self.check_lengths(length)
            pos += nb + length
        elif kind == "fixed":
            pos += s["size"]
        else:
            self.decode(s, pos, None)
            return
        self.check(pos)

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
        kind, logical = schema_kind(s)
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
            self.check_lengths(length)
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
        raise NotVectorizable(kind)

    def _union(self, s, p, sel, idx, m):
        nullable, branches = split_union(s)
        if len(branches) > 1:
            raise NotVectorizable("union")
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
        logical = schema_kind(s)[1]
        if s["type"] == "bytes":
            size_v, nb = self.read_long(p)
            self.check_lengths(size_v)
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


def _decode_fastavro(buffer, starts, ends, schema, target):
    """Record-at-a-time fallback through fastavro.schemaless_reader."""
    parsed = fastavro.parse_schema(schema)
    view = memoryview(bytes(buffer))
    rows = [
        fastavro.schemaless_reader(io.BytesIO(view[int(a) : int(b)]), parsed, return_record_name=False)
        for a, b in zip(starts, ends)
    ]
    if target is None:
        target = avro_to_arrow_schema(schema)
    return pa.Table.from_pylist(rows, schema=target)
