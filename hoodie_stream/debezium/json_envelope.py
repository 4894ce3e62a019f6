"""Kafka Connect JSON messages with their schema (`schemas.enable=true`): split, grouped by schema, parsed by schema.

Kafka Connect's JsonConverter writes each message as `{"schema":<schema>,"payload":<payload>}`, compact. A topic's
messages share a handful of schemas (one per table version), and the schema is most of a message's bytes, so no
message is parsed as a whole: the schema of the first message not yet placed is found by a scan of its JSON
structure, and every message that starts with the same `{"schema":<schema>,"payload":` is cut by that prefix
(Arrow's `starts_with`, a comparison of bytes). Past PREFIX_GROUPS schemas, the rest are cut by one numpy scan of all
their bytes (quotes not escaped by a backslash, brace depth outside strings, each counted from the message's own
start). Each distinct schema is then parsed once, and the payloads of a group are parsed together by pyarrow's JSON
reader under the Arrow type of their Connect schema (`raw_type`: the values as JSON holds them; `types.decode` turns
them into the columns' types). A message of another shape (whitespace between the parts, the parts in another
order) is split by Python's json. (benchmarks/debezium_bench.py measures it against `json.loads` of each message.)
"""

import json
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import HoodieFormatError, HoodieUnplannedInputError
from ..format.util.string_buffers import utf8_buffers
from . import types

_PREFIX = b'{"schema":'
_SEPARATOR = b',"payload":'
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPEN = np.zeros(256, np.int8)
_OPEN[[ord("{"), ord("[")]] = 1
_CLOSE = np.zeros(256, np.int8)
_CLOSE[[ord("}"), ord("]")]] = 1


@dataclass
class SchemaGroup:
    """The messages of one schema: its Connect schema, their positions in the input, their payloads parsed."""

    schema: dict
    rows: np.ndarray
    payload: pa.StructArray


# distinct schemas cut out by their prefix before the rest of a batch is scanned byte by byte
PREFIX_GROUPS = 32


def split_envelopes(values):
    """(schema texts as a dictionary array, payload texts) of JsonConverter messages (a string array without
    nulls). A message's schema is found in the first message not yet matched; every message that starts with the
    same `{"schema":<schema>,"payload":` is cut by that prefix (Arrow's `starts_with`, no scan of its bytes); what
    is left after PREFIX_GROUPS schemas is scanned byte by byte (`_split_scanned`)."""
    values = values.cast(pa.string()) if not pa.types.is_string(values.type) else values
    if values.null_count:
        raise HoodieFormatError("split_envelopes: drop the messages without a value (tombstones) first")
    n = len(values)
    codes = np.full(n, -1, np.int64)
    texts, pieces = [], []  # distinct schema texts; (rows, payloads) cut so far
    remaining = np.arange(n)
    binary = values.cast(pa.binary())
    closed = pc.ends_with(values, "}").to_numpy(zero_copy_only=False)
    while len(remaining) and len(texts) < PREFIX_GROUPS:
        schemas, _payloads, regular = _split_scanned(values.slice(int(remaining[0]), 1), remaining[:1])
        if not regular[0]:  # another shape: left to the scan (and Python's json)
            break
        schema = schemas[0].as_py()
        prefix = (_PREFIX + schema.encode("utf-8") + _SEPARATOR).decode("utf-8")
        # over all the messages (no copy of the rest; a comparison reads a prefix's bytes), then the unplaced ones
        match = pc.starts_with(values, prefix).to_numpy(zero_copy_only=False)[remaining] & closed[remaining]
        rows = remaining[match]
        size = len(prefix.encode("utf-8"))
        payloads = pc.binary_slice(binary.take(pa.array(rows)), size, -1).cast(pa.string())
        codes[rows] = len(texts)
        texts.append(schema)
        pieces.append((rows, payloads))
        remaining = remaining[~match]
    if len(remaining):
        schemas, payloads, _regular = _split_scanned(values.take(pa.array(remaining)), remaining)
        encoded = pc.dictionary_encode(schemas)
        known = {t: i for i, t in enumerate(texts)}
        for code, text in enumerate(encoded.dictionary.to_pylist()):
            known.setdefault(text, len(texts))
            if known[text] == len(texts):
                texts.append(text)
            codes[remaining[encoded.indices.to_numpy(zero_copy_only=False) == code]] = known[text]
        pieces.append((remaining, payloads))
    rows = np.concatenate([r for r, _ in pieces]) if pieces else np.zeros(0, np.int64)
    order = np.empty(n, np.int64)
    order[rows] = np.arange(n)
    payloads = pa.concat_arrays([p for _, p in pieces]).take(pa.array(order)) if pieces else pa.array([], pa.string())
    schemas = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(texts, pa.string()))
    return schemas, payloads


def _split_scanned(values, index):
    """split_envelopes by a scan of every byte: (schema texts, payload texts, which messages had the compact shape);
    `index`: the messages' positions in the input, for errors."""
    data, offsets = utf8_buffers(values, "messages")
    base = int(offsets[0])
    raw = data[base : int(offsets[-1])]
    starts, ends = offsets[:-1] - base, offsets[1:] - base
    schema_at = _structure(raw, starts, ends)
    regular = schema_at >= 0
    bounds = np.stack([starts + len(_PREFIX), schema_at + 1, schema_at + 1 + len(_SEPARATOR), ends - 1], axis=1)
    schemas = _cut(raw, bounds[:, 0], bounds[:, 1], regular)
    payloads = _cut(raw, bounds[:, 2], bounds[:, 3], regular)
    if not regular.all():  # another shape: Python's json, message by message
        irregular = np.flatnonzero(~regular)
        texts = values.take(pa.array(irregular)).to_pylist()
        fixed_schemas, fixed_payloads = [], []
        for i, text in zip(irregular, texts):
            try:
                message = json.loads(text)
                schema, payload = message["schema"], message["payload"]
            except (ValueError, KeyError, TypeError):
                error = HoodieFormatError(
                    f"message {int(index[i])} is not a Kafka Connect JSON message with its schema: {text[:200]!r}"
                )
                error.message_row = int(index[i])
                raise error from None
            fixed_schemas.append(json.dumps(schema, separators=(",", ":")))
            fixed_payloads.append(json.dumps(payload, separators=(",", ":"), ensure_ascii=False))
        schemas = _replace(schemas, irregular, fixed_schemas)
        payloads = _replace(payloads, irregular, fixed_payloads)
    return schemas, payloads, regular


def _structure(raw, starts, ends):
    """For each message raw[starts[i]:ends[i]]: the position of the closing brace of its schema object, -1 when the
    message is not `{"schema":{...},"payload":...}` (compact)."""
    n = len(starts)
    schema_at = np.full(n, -1, np.int64)
    if not len(raw) or not n:
        return schema_at
    backslash = raw == _BACKSLASH
    count = np.cumsum(backslash, dtype=np.int64)
    # backslashes just before each position: the run ending at i - 1
    since = np.maximum.accumulate(np.where(backslash, 0, count))
    run_before = np.concatenate([[0], (count - since)[:-1]])
    quote = (raw == _QUOTE) & (run_before % 2 == 0)
    quotes = np.cumsum(quote, dtype=np.int64)
    lengths = ends - starts
    nonempty = lengths > 0
    first = np.where(nonempty, starts, 0)
    # counts up to the start of each message, so that each message is read on its own
    quotes_before = np.where(first > 0, quotes[np.maximum(first - 1, 0)], 0)
    outside = ((quotes - np.repeat(quotes_before, lengths)) & 1) == 0
    step = (_OPEN[raw] - _CLOSE[raw]) * outside
    depth = np.cumsum(step, dtype=np.int64)
    depth_before = np.where(first > 0, depth[np.maximum(first - 1, 0)], 0)
    relative = depth - np.repeat(depth_before, lengths)
    # closing braces back at the envelope's level: the end of a top-level value of the envelope
    closes = np.flatnonzero((_CLOSE[raw] == 1) & outside & (relative == 1))
    prefix_ok = _matches(raw, starts, _PREFIX, lengths) & (
        raw[np.minimum(starts + len(_PREFIX), len(raw) - 1)] == ord("{")
    )
    k = np.searchsorted(closes, starts + len(_PREFIX))
    found = k < len(closes)
    at = np.where(found, closes[np.minimum(k, len(closes) - 1)], -1) if len(closes) else np.full(n, -1, np.int64)
    ok = prefix_ok & found & (at < ends - 1)
    ok &= _matches(raw, np.where(ok, at + 1, 0), _SEPARATOR, np.where(ok, ends - at - 1, 0))
    last = np.maximum(ends - 1, 0)
    ok &= nonempty & (raw[last] == ord("}")) & (relative[last] == 0) & (((quotes[last] - quotes_before) & 1) == 0)
    schema_at[ok] = at[ok]
    return schema_at


def _matches(raw, at, text, room):
    """Whether raw holds `text` at each position `at` (where `room` bytes are left)."""
    pattern = np.frombuffer(text, np.uint8)
    ok = room >= len(pattern)
    where = np.where(ok, at, 0)[:, None] + np.arange(len(pattern))
    return ok & (raw[np.minimum(where, len(raw) - 1)] == pattern).all(axis=1)


def _cut(raw, lo, hi, keep):
    """String array of raw[lo[i]:hi[i]] (empty where not keep)."""
    lo = np.where(keep, lo, 0)
    hi = np.where(keep, hi, 0)
    sizes = hi - lo
    offsets = np.zeros(len(lo) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    index = np.repeat(lo - offsets[:-1], sizes) + np.arange(total)
    out = pa.Array.from_buffers(pa.large_string(), len(lo), [None, pa.py_buffer(offsets), pa.py_buffer(raw[index])])
    return out.cast(pa.string())


def _replace(texts, rows, values):
    """`texts` with the values at `rows` replaced by `values`."""
    take = np.arange(len(texts))
    take[rows] = len(texts) + np.arange(len(values))
    return pa.concat_arrays([texts, pa.array(values, pa.string())]).take(pa.array(take))


def failed_message(error):
    """The position of the message a HoodieFormatError of this module names, None when it names none."""
    return getattr(error, "message_row", None)


def raw_type(schema, numeric_decimals=False):
    """The Arrow type of a Connect schema's values as JSON holds them: integers as int64, floats as double, bytes as
    base64 text, structs as structs, arrays as lists; `Decimal` as base64 text, or with `numeric_decimals` (the
    converter's `decimal.format=NUMERIC`) as JSON numbers read into the field's decimal type."""
    kind = schema.get("type")
    if schema.get("name") == types.CONNECT_DECIMAL and numeric_decimals:
        return types.arrow_type(schema)
    if kind in ("int8", "int16", "int32", "int64"):
        return pa.int64()
    if kind in ("float32", "float64", "float", "double"):  # the last two as some producers name them
        return pa.float64()
    if kind == "boolean":
        return pa.bool_()
    if kind in ("string", "bytes"):
        return pa.string()
    if kind == "struct":
        return pa.struct([pa.field(f["field"], raw_type(f, numeric_decimals)) for f in schema.get("fields", [])])
    if kind == "array":
        return pa.list_(raw_type(schema["items"], numeric_decimals))
    raise HoodieFormatError(f"Connect type {kind!r} of {schema.get('field')!r} is not read from JSON here")


def parse_payloads(payloads, schema, undeclared=None):
    """The payload texts (a string array) parsed by pyarrow's JSON reader under `raw_type(schema)`, a struct array.
    Decimals are read as base64 text, or as numbers when the payloads hold them so (`decimal.format=NUMERIC`).
    A field the schema does not declare is ignored, as Kafka Connect's JsonConverter ignores it (it reads a struct
    by its schema's fields); the paths of those met (`after.colour`) are added to the set `undeclared`, if given."""
    try:
        return _parse_declared(payloads, raw_type(schema), undeclared)
    except pa.ArrowInvalid as e:
        if "changed from string to number" not in str(e):
            raise HoodieFormatError(f"payloads do not match their schema: {_arrow_reason(e)}") from None
    try:
        return _parse_declared(payloads, raw_type(schema, numeric_decimals=True), undeclared)
    except pa.ArrowInvalid as e:
        raise HoodieFormatError(f"payloads do not match their schema: {_arrow_reason(e)}") from None


def _parse_declared(payloads, struct, undeclared):
    """`_parse` of the declared fields, ignoring the others; when `undeclared` is a set, those are found by
    pyarrow's inference after a parse that refused them (by Python's json when they change type between payloads:
    that path alone)."""
    if undeclared is None:
        return _parse(payloads, struct, "ignore")
    try:
        return _parse(payloads, struct)
    except pa.ArrowInvalid as e:
        if "unexpected field" not in str(e):
            raise
    try:
        parsed = _parse(payloads, struct, "infer")
    except pa.ArrowInvalid:
        parsed = _parse(payloads, struct, "ignore")
        undeclared.update(_undeclared_in_texts(payloads, struct))
        return parsed
    undeclared.update(_undeclared_paths(struct, parsed.type))
    return pa.StructArray.from_arrays([parsed.field(f.name).cast(f.type) for f in struct], fields=list(struct))


def _undeclared_paths(declared, parsed, prefix=""):
    """The paths (`after.colour`, `items[].extra`) of the fields of Arrow type `parsed` that `declared` lacks."""
    if pa.types.is_struct(declared) and pa.types.is_struct(parsed):
        names = set(declared.names)
        for f in parsed:
            path = f"{prefix}.{f.name}" if prefix else f.name
            if f.name in names:
                yield from _undeclared_paths(declared.field(f.name).type, f.type, path)
            else:
                yield path
    elif pa.types.is_list(declared) and pa.types.is_list(parsed):
        yield from _undeclared_paths(declared.value_type, parsed.value_type, prefix + "[]")


def _undeclared_in_texts(payloads, struct):
    """`_undeclared_paths` found by Python's json, payload by payload."""
    found = set()

    def walk(value, type_, prefix):
        if isinstance(value, dict) and pa.types.is_struct(type_):
            for name, child in value.items():
                path = f"{prefix}.{name}" if prefix else name
                if type_.get_field_index(name) < 0:
                    found.add(path)
                else:
                    walk(child, type_.field(name).type, path)
        elif isinstance(value, list) and pa.types.is_list(type_):
            for item in value:
                walk(item, type_.value_type, prefix + "[]")

    for text in payloads.to_pylist():
        try:
            walk(json.loads(text), struct, "")
        except ValueError:
            continue  # not JSON: the parse of the declared fields names it
    return found


_ARROW_COLUMN = re.compile(r"Column\((/[^)]*)\)")


def _arrow_reason(error):
    """pyarrow's JSON error, with the field it names as a path (`Column(/after/id)` -> field 'after.id')."""
    text = str(error).removeprefix("JSON parse error: ")
    return _ARROW_COLUMN.sub(lambda m: f"field {m.group(1).strip('/').replace('/', '.')!r}", text)


def field_problem(text, schema):
    """What in one payload text does not fit its Connect schema: `field 'after.id' holds ...`, or why the text is
    not JSON; None when nothing is found (the error path alone: Python's json)."""
    try:
        value = json.loads(text)
    except ValueError as e:
        return f"the payload is not JSON ({e})"
    return _misfit(value, schema, "")


_INTEGERS = ("int8", "int16", "int32", "int64")
_FLOATS = ("float32", "float64", "float", "double")


def _misfit(value, schema, path):
    if value is None:
        return None
    kind = schema.get("type")
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    fits = {
        "boolean": isinstance(value, bool),
        "string": isinstance(value, str),
        "bytes": isinstance(value, str) or (schema.get("name") == types.CONNECT_DECIMAL and numeric),
        "struct": isinstance(value, dict),
        "array": isinstance(value, list),
    }
    ok = (
        (isinstance(value, int) and not isinstance(value, bool))
        if kind in _INTEGERS
        else numeric
        if kind in _FLOATS
        else fits.get(kind, True)
    )
    if not ok:
        where = f"field {path!r}" if path else "the payload"
        shown = json.dumps(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return f"{where} holds {_json_kind(value)} {shown}, its schema declares {kind}"
    if kind == "struct":
        for f in schema.get("fields", []):
            name = f.get("field")
            problem = _misfit(value.get(name), f, f"{path}.{name}" if path else name)
            if problem:
                return problem
    if kind == "array":
        for i, item in enumerate(value):
            problem = _misfit(item, schema.get("items") or {}, f"{path}[{i}]")
            if problem:
                return problem
    return None


def _json_kind(value):
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


_BLOCK = 1 << 20


def _parse(payloads, struct, unexpected="error"):
    """The payloads parsed under the Arrow struct type `struct`, as a struct array: of that type, or with
    `unexpected="infer"` of that type plus the fields pyarrow found that it lacks."""
    import pyarrow.json as pj

    if not pa.types.is_struct(struct):
        raise HoodieFormatError(f"a Connect envelope is a struct, its schema is of type {struct}")
    if len(payloads) == 0:
        return pa.array([], struct)
    one_list = pa.ListArray.from_arrays(pa.array([0, len(payloads)], pa.int32()), payloads)
    joined = pc.binary_join(one_list, "\n")[0].as_buffer()
    # blocks of at least _BLOCK bytes (and of the longest payload) parsed on pyarrow's threads: a topic with fewer
    # Kafka partitions than the executors have cores is parsed on all of them (twice as fast on two cores)
    block = max(_BLOCK, pc.max(pc.binary_length(payloads)).as_py() + 1)
    table = pj.read_json(
        pa.BufferReader(joined),
        read_options=pj.ReadOptions(use_threads=joined.size > block, block_size=block),
        parse_options=pj.ParseOptions(explicit_schema=pa.schema(list(struct)), unexpected_field_behavior=unexpected),
    )
    if table.num_rows != len(payloads):
        raise HoodieFormatError(f"{len(payloads)} payloads parsed into {table.num_rows} rows")
    fields = list(table.schema) if unexpected == "infer" else list(struct)
    return pa.StructArray.from_arrays([table[f.name].combine_chunks() for f in fields], fields=fields)


def group_by_schema(values, known=None, undeclared=None):
    """[SchemaGroup] of JsonConverter messages (a string array without nulls), in the order their schemas first
    appear. `known`: the schema texts a plan made from earlier micro-batches expects (another one raises
    HoodieUnplannedInputError); `undeclared`: a set the paths of the fields no schema declares are added to
    (`parse_payloads`). An error names its message (`failed_message`)."""
    schemas, payloads = split_envelopes(values)
    codes = schemas.indices.to_numpy(zero_copy_only=False)
    groups = []
    first_seen = np.unique(codes, return_index=True)
    for code in first_seen[0][np.argsort(first_seen[1])]:
        rows = np.flatnonzero(codes == code)
        text = schemas.dictionary[int(code)].as_py()
        if known is not None and text not in known:
            raise HoodieUnplannedInputError("a schema the plan does not know")
        try:
            schema = json.loads(text)
        except ValueError:
            error = HoodieFormatError(f"its schema is not JSON: {text[:200]!r}")
            error.message_row = int(rows[0])
            raise error from None
        parsed = parse_rows(payloads.take(pa.array(rows)), schema, rows, undeclared)
        groups.append(SchemaGroup(schema, rows, parsed))
    return groups


def parse_rows(texts, schema, rows, undeclared=None):
    """`parse_payloads` of the payloads of the messages at `rows`; an error names the first message that does not
    match the schema (`failed_message`) and, where it can, the field."""
    try:
        return parse_payloads(texts, schema, undeclared)
    except HoodieFormatError as e:
        for i in range(len(texts)):  # the error path alone: which message, which field
            try:
                parse_payloads(texts.slice(i, 1), schema)
            except HoodieFormatError as one:
                problem = field_problem(texts[i].as_py(), schema)
                error = HoodieFormatError(f"the payload does not match its schema: {problem}") if problem else one
                error.message_row = int(rows[i])
                raise error from None
        raise e
