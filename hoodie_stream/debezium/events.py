"""Debezium change events of one topic into table rows, a column at a time.

A change event (`before`, `after`, `source`, `op`, `ts_ms`) becomes one row: the `after` image for `c` (insert),
`u` (update) and `r` (snapshot read), the `before` image for `d` (delete), whose key columns are taken from the
Kafka key where `before` lacks them (PostgreSQL's replica identity DEFAULT gives null or the key alone). The row's
columns are followed by the columns Hudi's own Debezium sources add (so that Hudi's Debezium payloads can merge the
table too):

- every connector: `_change_operation_type` (op), `_upstream_event_processed_ts_ms` (the envelope's `ts_ms`, when
  the connector handled the event), `db_shard_source_partition` (`source.name`), `_event_origin_ts_ms`
  (`source.ts_ms`, when the database made the change);
- PostgreSQL: `_event_lsn`, `_event_tx_id`, `_event_xmin`, `db_schema_source_partition` (`source.schema`);
- MySQL: `_event_bin_file`, `_event_pos`, `_event_row`, `_event_seq` (`<binlog file suffix>.<pos>`, as Hudi's);

then `_event_order`, the event's position as one number that orders a key's changes (the table's ordering field),
and `_hoodie_is_deleted`. `_event_order` is decimal(38, 0): PostgreSQL's LSN; MySQL's binlog file number x 10^20 +
position x 10^10 + row (each compared as a number, so `mysql-bin.000009` < `mysql-bin.000010`); -1 for an event
without a position (incremental-snapshot rows), which orders before every event with one. Events of one key with the
same position (a redelivery) are ordered by their Kafka offset: a key's events share a Kafka partition.

Truncate (`t`) and logical-decoding message (`m`) events carry no row: by policy they stop the batch with an error
naming topic, partition and offset (`fail`, the default for truncate) or are skipped (`skip`, the default for
messages).
"""

import functools
import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import HoodieFormatError, HoodieUnplannedInputError
from . import avro_envelope, json_envelope, types

POSTGRESQL, MYSQL = "postgresql", "mysql"
ORDER = "_event_order"
SCHEMA_CODE = "__hs_schema"  # a message cut to its payload by Spark: its schema's position in known_schemas
ORDER_TYPE = pa.decimal128(38, 0)
IS_DELETED = "_hoodie_is_deleted"
OP = "_change_operation_type"
COMMON_COLUMNS = [
    (OP, pa.string()),
    ("_upstream_event_processed_ts_ms", pa.int64()),
    ("db_shard_source_partition", pa.string()),
    ("_event_origin_ts_ms", pa.int64()),
]
CONNECTOR_COLUMNS = {
    POSTGRESQL: [
        ("_event_lsn", pa.int64()),
        ("_event_tx_id", pa.int64()),
        ("_event_xmin", pa.int64()),
        ("db_schema_source_partition", pa.string()),
    ],
    MYSQL: [
        ("_event_bin_file", pa.string()),
        ("_event_pos", pa.int64()),
        ("_event_row", pa.int32()),
        ("_event_seq", pa.string()),
    ],
}
POLICIES = ("fail", "skip")
ROW_OPS = ("c", "u", "r", "d")
# the source fields read, by connector (a bare message's source is read with these; others are ignored)
_SOURCE_FIELDS = {
    "name": "string",
    "ts_ms": "int64",
    "connector": "string",
    "schema": "string",
    "txId": "int64",
    "lsn": "int64",
    "xmin": "int64",
    "file": "string",
    "pos": "int64",
    "row": "int32",
}
_DIGITS10 = 10**10


def added_columns(connector):
    """[(name, Arrow type)] of the columns a connector's rows get after their own."""
    return COMMON_COLUMNS + CONNECTOR_COLUMNS[connector] + [(ORDER, ORDER_TYPE), (IS_DELETED, pa.bool_())]


@dataclass(frozen=True)
class TopicSpec:
    """How one topic's messages are flattened: picklable, built on the driver for every micro-batch."""

    topic: str
    connector: str  # POSTGRESQL or MYSQL
    schema: pa.Schema  # the rows' schema: the row columns, then added_columns(connector)
    key_fields: tuple[str, ...]  # the record key: the Debezium key's fields
    value_schema: dict | None = None  # the envelope's Connect schema of bare messages (schemas.enable=false)
    variable_scale: object = (38, 10)  # VariableScaleDecimal: (precision, scale) or "string"
    truncate: str = "fail"
    message: str = "skip"
    key_schema: dict | None = field(default=None)  # Connect struct schema of the key fields (from the row's fields)
    value_format: str = "json"  # "json" (Kafka Connect's JsonConverter) or "avro" (Confluent's wire format)
    avro_schemas: dict | None = None  # Avro: the schemas of the ids the micro-batch's values and keys name
    # planned from an earlier micro-batch: the schema texts (JSON) or Avro ids the plan knows, in order; None when
    # the plan was made from this micro-batch. A message of another schema raises HoodieUnplannedInputError (a
    # planned task finds it, or one of another topic, before: replan.py)
    known_schemas: tuple | None = None


# -- schemas --------------------------------------------------------------------------------------------------------
def envelope_parts(schema, where):
    """{"before": field, "after": field, "source": field, ...} of a Connect envelope schema; an error naming `where`
    when the schema is no Debezium envelope."""
    if not isinstance(schema, dict) or schema.get("type") != "struct":
        raise HoodieFormatError(f"{where}: the value schema is not a Connect struct")
    parts = {f.get("field"): f for f in schema.get("fields", [])}
    if "op" not in parts or "source" not in parts or not ({"after", "before"} & set(parts)):
        raise HoodieFormatError(
            f"{where}: not a Debezium change event (its schema {schema.get('name')!r} has fields {sorted(parts)}; "
            f"expected before, after, source and op: unwrapped events (ExtractNewRecordState) are not read)"
        )
    return parts


def connector_of(schema, where):
    """POSTGRESQL or MYSQL from an envelope schema's source struct."""
    source = envelope_parts(schema, where)["source"]
    name = str(source.get("name") or "")
    fields = {f.get("field") for f in source.get("fields", [])}
    if name.endswith("postgresql.Source") or (not name and "lsn" in fields):
        return POSTGRESQL
    if name.endswith("mysql.Source") or (not name and {"file", "pos"} <= fields):
        return MYSQL
    raise HoodieFormatError(
        f"{where}: events of the connector with source {name or sorted(fields)} are not supported (PostgreSQL and "
        f"MySQL are)"
    )


def row_fields(schema, where):
    """The Connect fields of the row (`after`, else `before`)."""
    parts = envelope_parts(schema, where)
    image = parts.get("after") or parts.get("before")
    if image.get("type") != "struct":
        raise HoodieFormatError(f"{where}: the row image is of type {image.get('type')!r}, not a struct")
    return list(image.get("fields", []))


def row_schema(fields, variable_scale=(38, 10)):
    """pa.Schema of the row columns of Connect fields as the table holds them (`table_type`; every column
    nullable, as Hudi's Debezium sources make them)."""
    return pa.schema([pa.field(f["field"], table_type(types.arrow_type(f, variable_scale))) for f in fields])


def table_type(t):
    """The type a column is written with, one Spark holds: timestamps in microseconds, times of day as microseconds
    since midnight (int64: Spark's Arrow exchange holds no time type), decimals past 38 digits as their text."""
    if pa.types.is_time(t):
        return pa.int64()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, table_type(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(table_type(t.value_type))
    if pa.types.is_decimal(t) and t.precision > 38:
        return pa.string()
    return t


_WIDER = {pa.int8(): 0, pa.int16(): 1, pa.int32(): 2, pa.int64(): 3}


def wider(old, new):
    """The type a column of `old` values evolves to when `new` values arrive, or None when Hudi cannot evolve it:
    ints widen to longer ints, float to double, decimals to more digits of the same scale (whether a table can
    follow is the sink's check: a decimal's Avro fixed keeps its size)."""
    if old.equals(new):
        return old
    if old in _WIDER and new in _WIDER:
        return old if _WIDER[old] >= _WIDER[new] else new
    if pa.types.is_floating(old) and pa.types.is_floating(new):
        return old if old.bit_width >= new.bit_width else new
    if pa.types.is_decimal(old) and pa.types.is_decimal(new) and old.scale == new.scale:
        return old if old.precision >= new.precision else new
    return None


def merged_rows(schemas, where):
    """One row schema of several versions: columns in first-seen order, new ones at the end, types widened; an
    error naming the column and `where[i]` (where version i was seen) for a change no table can follow."""
    fields = {}
    for schema, place in zip(schemas, where):
        for f in schema:
            if f.name not in fields:
                fields[f.name] = f.type
                continue
            to = wider(fields[f.name], f.type)
            if to is None:
                raise HoodieFormatError(
                    f"{place}: column {f.name!r} changed from {fields[f.name]} to {f.type}, which a Hudi table "
                    f"cannot follow (ints widen to longer ints, float to double, decimals to more digits)"
                )
            fields[f.name] = to
    return pa.schema([pa.field(n, t) for n, t in fields.items()])


def table_schema(rows, connector, where="topic"):
    """The rows' schema: the row columns, then added_columns(connector)."""
    added = added_columns(connector)
    clash = sorted(set(rows.names) & {n for n, _ in added})
    if clash:
        raise HoodieFormatError(f"{where}: the table's own column(s) {clash} clash with the Debezium columns added")
    return pa.schema(list(rows) + [pa.field(n, t) for n, t in added])


def bare_envelope(row_or_envelope):
    """An envelope schema for bare messages (schemas.enable=false) from what the user gave: the envelope's Connect
    schema, or the row's (`...Value`) alone, then wrapped with the source fields read."""
    schema = json.loads(row_or_envelope) if isinstance(row_or_envelope, str) else row_or_envelope
    if not isinstance(schema, dict) or schema.get("type") != "struct":
        raise HoodieFormatError("a topic's schema is a Connect struct schema (JSON)")
    names = {f.get("field") for f in schema.get("fields", [])}
    if {"op", "source"} <= names:
        return schema
    row = dict(schema, optional=True)
    source = {
        "type": "struct",
        "optional": False,
        "field": "source",
        "fields": [{"type": t, "optional": True, "field": n} for n, t in _SOURCE_FIELDS.items()],
    }
    return {
        "type": "struct",
        "fields": [
            dict(row, field="before"),
            dict(row, field="after"),
            source,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


# -- rows -----------------------------------------------------------------------------------------------------------
def flatten(records, spec, undeclared=None):
    """The rows (spec.schema) of one topic's Kafka records: an Arrow table with `key` and `value` (strings; null values,
    tombstones, are dropped), `partition` and `offset`, in offset order per partition. `undeclared`: a set the paths
    of the payloads' fields their JSON schema does not declare are added to (they are ignored, as Kafka Connect's
    JsonConverter ignores them)."""
    values = records["value"].combine_chunks()
    if spec.value_format == "avro":
        values = values.cast(pa.binary())
    elif pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        values = _utf8(values, spec.topic, records)
    live = pc.is_valid(values)
    if values.null_count:
        records = records.filter(live)
        values = values.filter(live)
    if len(values) == 0:
        return spec.schema.empty_table()
    try:
        if SCHEMA_CODE in records.column_names:
            groups = _cut_groups(values, records[SCHEMA_CODE].combine_chunks(), spec, undeclared)
        else:
            groups = _groups(values, spec, undeclared)
    except HoodieUnplannedInputError:
        raise
    except HoodieFormatError as e:
        row = json_envelope.failed_message(e)
        raise HoodieFormatError(f"{_place(spec.topic, records, 0 if row is None else row)}: {e}") from None
    tables, positions = [], []
    for schema, rows, payloads in groups:
        whole = len(groups) == 1 and len(rows) == records.num_rows
        part = records if whole else records.take(pa.array(rows))
        try:
            table, kept = _flatten_group(part, schema, payloads, spec)
        except HoodieFormatError as e:
            if str(e).startswith(f"topic {spec.topic!r} partition"):
                raise
            row = _first_failing(part, schema, payloads, spec)
            raise HoodieFormatError(f"{_place(spec.topic, part, row)}: {e}") from None
        tables.append(table)
        positions.append(rows if kept is None else rows[kept])
    if len(tables) == 1:
        return tables[0]
    order = np.argsort(np.concatenate(positions), kind="stable")
    return pa.concat_tables(tables).take(pa.array(order))


def _flatten_group(records, schema, payloads, spec):
    """(rows of one schema's messages, the positions of the messages kept among them or None for all)."""
    where = f"topic {spec.topic!r}"
    fields = {f.name: payloads.field(f.name) for f in payloads.type}
    op = fields["op"].cast(pa.string())
    keep = _ops_kept(op, records, spec)
    kept = None
    if keep is not None:
        kept = np.flatnonzero(keep.to_numpy(zero_copy_only=False))
        records, payloads = records.filter(keep), payloads.filter(keep)
        fields = {f.name: payloads.field(f.name) for f in payloads.type}
        op = fields["op"].cast(pa.string())
    n = len(op)
    if n == 0:
        return spec.schema.empty_table(), kept
    is_delete = pc.equal(op, "d")
    deletes = is_delete.to_numpy(zero_copy_only=False)
    image_fields = {f["field"]: f for f in row_fields(schema, where)}
    after_cols = _image_columns(fields.get("after"), image_fields, spec, where)
    before_cols = _delete_images(fields.get("before"), deletes, image_fields, spec, where)
    columns = {}
    for f in spec.schema:
        if f.name not in image_fields:
            continue
        a = _as(after_cols.get(f.name), f.type, n)
        columns[f.name] = pc.if_else(is_delete, _as(before_cols.get(f.name), f.type, n), a) if deletes.any() else a
    if deletes.any():
        columns = _key_from_kafka(columns, deletes, records, spec)
    source = fields["source"]
    columns.update(_added(source, fields.get("ts_ms"), op, is_delete, spec, records))
    arrays = [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in spec.schema]
    return pa.Table.from_arrays(arrays, schema=spec.schema), kept


def _ops_kept(op, records, spec):
    """A mask of the row events (None: all are), after applying the truncate and message policies."""
    known = pc.is_in(op, pa.array(ROW_OPS))
    if pc.all(known).as_py():
        return None
    for code, policy, what in (("t", spec.truncate, "truncate"), ("m", spec.message, "logical decoding message")):
        hit = pc.equal(op, code)
        if policy == "fail" and pc.any(hit).as_py():
            row = pc.index(hit, True).as_py()
            raise HoodieFormatError(
                f"{_place(spec.topic, records, row)}: a {what} event ({code!r}); the table is not changed. Set the "
                f"{'truncate' if code == 't' else 'message'} policy to 'skip' to pass over such events"
            )
    other = pc.invert(pc.is_in(op, pa.array(ROW_OPS + ("t", "m"))))
    if pc.any(pc.fill_null(other, True)).as_py():
        row = pc.index(pc.fill_null(other, True), True).as_py()
        raise HoodieFormatError(f"{_place(spec.topic, records, row)}: unknown op {op[row].as_py()!r}")
    return known


def _image_columns(image, image_fields, spec, where):
    if image is None:
        return {}
    flat = image.flatten()  # children with the image's own nulls
    out = {}
    for i, child in enumerate(image.type):
        f = image_fields.get(child.name)
        if f is None:
            continue
        out[child.name] = types.decode(flat[i], f, spec.variable_scale)
    return out


def _delete_images(before, deletes, image_fields, spec, where):
    """The `before` columns of the deletes (a delete's row), null in the other rows: the images an update carries
    (MySQL's, or PostgreSQL's with REPLICA IDENTITY FULL) are not decoded."""
    rows = np.flatnonzero(deletes)
    if before is None or not len(rows):
        return {}
    decoded = _image_columns(before.take(pa.array(rows)), image_fields, spec, where)
    slot = np.full(len(deletes), -1, np.int64)
    slot[rows] = np.arange(len(rows))
    spread = pa.array(slot, mask=slot < 0)
    return {name: column.take(spread) for name, column in decoded.items()}


def _as(column, type_, n):
    if column is None:
        return pa.nulls(n, type_)
    if column.type.equals(type_):
        return column
    # sub-microsecond digits of a nanosecond time or timestamp are dropped: Spark and Hudi hold microseconds
    if pa.types.is_time(column.type) and pa.types.is_integer(type_):
        column = column.cast(pa.time64("us"), safe=False).cast(pa.int64())
        return column.cast(type_)
    temporal = pa.types.is_temporal(column.type) and pa.types.is_temporal(type_)
    return column.cast(type_, safe=not temporal)


def _key_from_kafka(columns, deletes, records, spec):
    """The key columns of delete rows filled from the Kafka key where the row lacks them."""
    missing = np.zeros(len(deletes), bool)
    for name in spec.key_fields:
        if name in columns:
            missing |= deletes & ~pc.is_valid(columns[name]).to_numpy(zero_copy_only=False)
        else:
            missing |= deletes
    if not missing.any():
        return columns
    rows = np.flatnonzero(missing)
    keys = records["key"].combine_chunks().take(pa.array(rows))
    if pa.types.is_binary(keys.type) and spec.value_format != "avro":
        keys = _utf8(keys, spec.topic, records.take(pa.array(rows)))
    if keys.null_count or spec.key_schema is None:
        bad = int(rows[pc.index(pc.is_null(keys), True).as_py()]) if keys.null_count else int(rows[0])
        raise HoodieFormatError(
            f"{_place(spec.topic, records, bad)}: a delete whose row lacks its key {list(spec.key_fields)} and whose "
            f"Kafka key is absent; the record cannot be found"
        )
    try:
        parsed, key_fields = _parsed_keys(keys, spec)
    except HoodieFormatError as e:
        raise HoodieFormatError(f"{_place(spec.topic, records, int(rows[0]))}: its Kafka key: {e}") from None
    flat = parsed.flatten()
    take = np.full(len(deletes), -1)
    take[rows] = np.arange(len(rows))
    index = pa.array(take, mask=take < 0)
    out = dict(columns)
    for i, child in enumerate(parsed.type):
        if child.name not in spec.key_fields:
            continue
        target = spec.schema.field(child.name).type
        decoded = _as(types.decode(flat[i], key_fields[child.name], spec.variable_scale), target, len(rows))
        spread = pc.take(decoded, index)
        current = out.get(child.name, pa.nulls(len(deletes), target))
        out[child.name] = pc.if_else(pa.array(missing), spread, current)
    return out


def _parsed_keys(keys, spec):
    """(struct array of the Kafka keys, {field name: its Connect field}): JSON keys with or without their schema,
    or Avro keys in Confluent's wire format."""
    if spec.value_format == "avro":
        keys = keys.cast(pa.binary())
        ids, bad = avro_envelope.schema_ids(keys)
        if bad is not None:
            raise HoodieFormatError("a key is not in Confluent's Avro wire format")
        distinct = np.unique(ids)
        if len(distinct) != 1 or int(distinct[0]) not in (spec.avro_schemas or {}):
            raise HoodieFormatError(f"key schema id(s) {distinct.tolist()} unknown")
        schema = spec.avro_schemas[int(distinct[0])]
        parsed = avro_envelope.decode(keys, np.arange(len(keys)), schema)
        connect = avro_envelope.connect_schema(schema)
        return parsed, {f["field"]: f for f in connect["fields"]}
    texts = keys.cast(pa.string())
    enveloped = pc.starts_with(texts, '{"schema":').to_numpy(zero_copy_only=False)
    payload_texts = texts
    if enveloped.any():  # keys with their schema: their payloads
        at = np.flatnonzero(enveloped)
        _schemas, payloads = json_envelope.split_envelopes(texts.take(pa.array(at)))
        take = np.arange(len(texts))
        take[at] = len(texts) + np.arange(len(at))
        payload_texts = pa.concat_arrays([texts, payloads]).take(pa.array(take))
    parsed = json_envelope.parse_payloads(payload_texts, spec.key_schema)
    return parsed, {f["field"]: f for f in spec.key_schema["fields"]}


def _added(source, ts_ms, op, is_delete, spec, records):
    n = len(op)
    src = {f.name: c for f, c in zip(source.type, source.flatten())}

    def get(name, type_):
        column = src.get(name)
        return pa.nulls(n, type_) if column is None else column.cast(type_)

    out = {
        OP: op,
        "_upstream_event_processed_ts_ms": pa.nulls(n, pa.int64()) if ts_ms is None else ts_ms.cast(pa.int64()),
        "db_shard_source_partition": get("name", pa.string()),
        "_event_origin_ts_ms": get("ts_ms", pa.int64()),
        IS_DELETED: is_delete,
    }
    if spec.connector == POSTGRESQL:
        lsn = get("lsn", pa.int64())
        out.update(
            {
                "_event_lsn": lsn,
                "_event_tx_id": get("txId", pa.int64()),
                "_event_xmin": get("xmin", pa.int64()),
                "db_schema_source_partition": get("schema", pa.string()),
                ORDER: pc.fill_null(lsn.cast(ORDER_TYPE), pa.scalar(-1, ORDER_TYPE)),
            }
        )
    else:
        file, pos, row = get("file", pa.string()), get("pos", pa.int64()), get("row", pa.int32())
        out.update(
            {
                "_event_bin_file": file,
                "_event_pos": pos,
                "_event_row": row,
                "_event_seq": mysql_seq(file, pos),
                ORDER: mysql_order(file, pos, row, lambda i: _place(spec.topic, records, i)),
            }
        )
    return out


def mysql_seq(file, pos):
    """Hudi's `_event_seq`: `<binlog file suffix>.<pos>` (null without a file or position)."""
    if len(file) == 0:
        return pa.array([], pa.string())
    ok = pc.fill_null(pc.match_substring_regex(file, r"\.[0-9]+$"), False)
    suffix = pc.if_else(ok, pc.replace_substring_regex(pc.fill_null(file, ""), r"^.*\.", ""), None)
    return pc.binary_join_element_wise(suffix, pos.cast(pa.string()), ".")


def mysql_order(file, pos, row, place):
    """decimal(38, 0) of (binlog file number, position, row) compared as numbers; -1 without a file (or an empty
    one, as snapshot rows of some producers have) or position. Each part must be below 10^10 (MySQL's binlog
    positions are 32-bit; `place(i)` names a record that is not)."""
    n = len(file)
    if n == 0:
        return pa.array([], ORDER_TYPE)
    named = pc.fill_null(pc.not_equal(file, ""), False)
    has_number = pc.fill_null(pc.match_substring_regex(file, r"\.[0-9]{1,10}$"), False)
    bad_file = pc.and_(named, pc.invert(has_number))
    if pc.any(bad_file).as_py():
        i = pc.index(bad_file, True).as_py()
        raise HoodieFormatError(f"{place(i)}: binlog file {file[i].as_py()!r} does not end in a number")
    positioned = pc.and_(named, pc.is_valid(pos))
    number = pc.replace_substring_regex(pc.if_else(named, file, "x.0"), r"^.*\.", "").cast(pa.int64())
    p = pc.if_else(positioned, pos, 0)
    r = pc.fill_null(row, 0).cast(pa.int64())
    parts = []
    for name, part in (("file number", number), ("position", p), ("row", r)):
        out = pc.or_(pc.less(part, 0), pc.greater_equal(part, _DIGITS10))
        if pc.any(out).as_py():
            i = pc.index(out, True).as_py()
            raise HoodieFormatError(f"{place(i)}: binlog {name} {part[i].as_py()} is outside 0..10^10")
        parts.append(part.cast(pa.decimal128(19, 0)).cast(pa.decimal128(10, 0)))
    high = pc.multiply(parts[0], pa.scalar(10**20, pa.decimal128(21, 0)))
    middle = pc.multiply(parts[1], pa.scalar(_DIGITS10, pa.decimal128(11, 0)))
    value = pc.add(high, pc.add(middle, parts[2])).cast(ORDER_TYPE)
    return pc.if_else(positioned, value, pa.scalar(-1, ORDER_TYPE))


# -- errors ---------------------------------------------------------------------------------------------------------
def _place(topic, records, row):
    """'topic T partition P offset O' of a record (by its row in `records`)."""
    try:
        partition = records["partition"][row].as_py()
        offset = records["offset"][row].as_py()
    except (KeyError, IndexError):
        return f"topic {topic!r}"
    return f"topic {topic!r} partition {partition} offset {offset}"


def _groups(values, spec, undeclared=None):
    """[(envelope schema, message positions, payloads parsed)] of messages with their schema, or bare ones."""
    if spec.value_format == "avro":
        return _avro_groups(values, spec)
    if spec.value_schema is not None:
        rows = np.arange(len(values))
        return [(spec.value_schema, rows, json_envelope.parse_rows(values, spec.value_schema, rows))]
    try:
        groups = json_envelope.group_by_schema(values, spec.known_schemas, undeclared)
    except HoodieUnplannedInputError as e:
        raise HoodieUnplannedInputError(f"topic {spec.topic!r}: {e}") from None
    return [(g.schema, g.rows, g.payload) for g in groups]


@functools.lru_cache(maxsize=64)
def _parsed_schema(text):
    return json.loads(text)


def _cut_groups(payloads, codes, spec, undeclared=None):
    """Groups of the messages Spark cut to their payload (kafka._cut_by_schema), by the schema codes it gave."""
    codes = pc.fill_null(codes, -1).to_numpy(zero_copy_only=False)
    if (codes < 0).any():
        raise HoodieUnplannedInputError(f"topic {spec.topic!r}: a schema the plan does not know")
    groups = []
    distinct, first = np.unique(codes, return_index=True)
    for code in distinct[np.argsort(first)]:
        rows = np.flatnonzero(codes == code)
        schema = _parsed_schema(spec.known_schemas[int(code)])
        texts = payloads if len(rows) == len(payloads) else payloads.take(pa.array(rows))
        groups.append((schema, rows, json_envelope.parse_rows(texts, schema, rows, undeclared)))
    return groups


def _avro_groups(values, spec):
    ids, bad = avro_envelope.schema_ids(values)
    if bad is not None:
        error = HoodieFormatError("the message is not in Confluent's Avro wire format (magic byte 0, schema id)")
        error.message_row = bad
        raise error
    groups = []
    distinct, first = np.unique(ids, return_index=True)
    for schema_id in distinct[np.argsort(first)]:
        rows = np.flatnonzero(ids == schema_id)
        schema = (spec.avro_schemas or {}).get(int(schema_id))
        if schema is None and spec.known_schemas is not None:
            raise HoodieUnplannedInputError(f"topic {spec.topic!r}: Avro schema id {int(schema_id)} is not planned")
        if schema is None:
            error = HoodieFormatError(f"Avro schema id {int(schema_id)} is unknown")
            error.message_row = int(rows[0])
            raise error
        try:
            payloads = avro_envelope.decode(values, rows, schema)
        except HoodieFormatError:
            for i, row in enumerate(rows):  # the error path alone: which message
                try:
                    avro_envelope.decode(values, rows[i : i + 1], schema)
                except HoodieFormatError as one:
                    one.message_row = int(row)
                    raise one from None
            raise
        groups.append((avro_envelope.connect_schema(schema), rows, payloads))
    return groups


def _first_failing(records, schema, payloads, spec):
    """The row of the first record whose event cannot be flattened on its own (the error path alone)."""
    for i in range(len(payloads)):
        try:
            _flatten_group(records.slice(i, 1), schema, payloads.slice(i, 1), spec)
        except HoodieFormatError:
            return i
    return 0


def _utf8(values, topic, records):
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:
        for i, raw in enumerate(values.to_pylist()):
            if raw is not None:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise HoodieFormatError(f"{_place(topic, records, i)}: the message is not UTF-8 text") from None
        raise


def topic_spec(topic, envelopes, key_fields, value_schema=None, variable_scale=(38, 10), **options):
    """The TopicSpec of a topic whose messages have the envelope schemas `envelopes` ([(schema, where it was seen)]),
    for the table's record key `key_fields`."""
    where = [w for _, w in envelopes]
    connectors = {connector_of(s, w) for s, w in envelopes}
    if len(connectors) > 1:
        raise HoodieFormatError(f"topic {topic!r}: events of several connectors {sorted(connectors)}")
    fields = [row_fields(s, w) for s, w in envelopes]
    rows = merged_rows([row_schema(f, variable_scale) for f in fields], where)
    missing = [k for k in key_fields if k not in rows.names]
    if missing:
        raise HoodieFormatError(
            f"{where[0]}: the record key field(s) {missing} are not columns of the rows {rows.names}"
        )
    by_name = {}
    for fs in fields:
        for f in fs:
            by_name.setdefault(f["field"], f)
    key_schema = {"type": "struct", "fields": [by_name[k] for k in key_fields]}
    return TopicSpec(
        topic=topic,
        connector=connectors.pop(),
        schema=table_schema(rows, next(iter({connector_of(s, w) for s, w in envelopes})), where[0]),
        key_fields=tuple(key_fields),
        value_schema=value_schema,
        variable_scale=variable_scale,
        key_schema=key_schema,
        **options,
    )
