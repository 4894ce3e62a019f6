"""A table fed by Debezium checked against its source: the rows of `SELECT * FROM` the source table (any DB-API
cursor, e.g. psycopg's) and the rows of the Hudi table (a pyarrow table as `HoodieTable.read()` or hudi-rs give it),
both brought to one form and compared column by column.

The form (`normal`) is what both sides can hold of a value as DebeziumSink writes it (README "Types"): timestamps with
a time zone as naive UTC, times as microseconds since midnight, UUIDs and enums as text, JSON parsed, binary as
bytes, single-precision floats as the shortest decimal that reads back; decimals stay Decimals (compared by
value). Columns DebeziumSink adds (`_event_order`, `_event_lsn`, ...) and
Hudi's meta columns are left out of the table's side; a column of the table the source does not have (dropped at
the source) is not compared.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..format.avro.schema import META_FIELDS
from .events import CONNECTOR_COLUMNS, added_columns

Rows = dict[tuple, dict[str, Any]]
# what the table has beside the source's columns: Hudi's meta columns and those DebeziumSink adds, of any connector
NOT_SOURCE = frozenset(META_FIELDS) | {name for c in CONNECTOR_COLUMNS for name, _ in added_columns(c)}


def normal(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, list | tuple):
        return [normal(v) for v in value]
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    return value


def source_rows(cursor, query: str, key: Sequence[str], params: Sequence[Any] = ()) -> Rows:
    """{key tuple: {column: value}} of the rows `query` returns (the cursor's column names)."""
    cursor.execute(query, params)
    names = [d[0] for d in cursor.description]
    out: Rows = {}
    for values in cursor.fetchall():
        row = {n: normal(v) for n, v in zip(names, values, strict=True)}
        out[tuple(row[k] for k in key)] = row
    return out


def table_rows(table, key: Sequence[str], json_columns: Iterable[str] = ()) -> Rows:
    """The same form of a Hudi table read into pyarrow (None: no table yet); `json_columns` (json/jsonb at the
    source, text in the table) parsed, as database drivers parse JSON."""
    out: Rows = {}
    if table is None:
        return out
    drop = [c for c in table.column_names if c in NOT_SOURCE]
    json_columns = list(json_columns)
    table = table.drop_columns(drop)
    # a float32 value as its shortest decimal text reads back, as databases print real numbers (0.33333334)
    singles = [f.name for f in table.schema if pa.types.is_float32(f.type)]
    for record in table.to_pylist():
        row = {n: normal(v) for n, v in record.items()}
        for column in singles:
            if row[column] is not None:
                row[column] = float(str(np.float32(row[column])))
        for column in json_columns:
            if row.get(column) is not None:
                row[column] = json.loads(row[column])
        out[tuple(row[k] for k in key)] = row
    return out


def difference(source: Rows, table: Rows) -> str | None:
    """None when the table holds the source's rows, else the first thing that differs: keys missing or extra, then
    the first differing column."""
    missing = sorted(set(source) - set(table), key=repr)
    extra = sorted(set(table) - set(source), key=repr)
    if missing or extra:
        return f"{len(missing)} key(s) only in the source {missing[:5]}, {len(extra)} only in the table {extra[:5]}"
    for key in sorted(source, key=repr):
        row, other = source[key], table[key]
        for column, value in row.items():
            if column not in other:
                return f"column {column!r} is not in the table"
            if other[column] != value:
                return f"key {key} column {column!r}: source {value!r}, table {other[column]!r}"
    return None
