"""A Spark DDL of a Debezium row (`"id BIGINT NOT NULL, price DECIMAL(10,2), updated_at TIMESTAMP_NTZ"`) as the Connect
schema of the values Debezium writes for such columns by default, for topics whose messages carry no schema.

Types and the wire format they stand for: STRING / VARCHAR(n) / CHAR(n) -> string; TINYINT, SMALLINT, INT, BIGINT ->
int8..int64; FLOAT, DOUBLE; BOOLEAN; BINARY -> bytes (base64); DECIMAL(p, s) -> Connect Decimal (base64 unscaled,
scale s; or a JSON number under decimal.format=NUMERIC); DATE -> io.debezium.time.Date (days); TIMESTAMP_NTZ ->
io.debezium.time.MicroTimestamp (PostgreSQL `timestamp`, MySQL `datetime(6)`); TIMESTAMP -> ZonedTimestamp (ISO-8601
text: `timestamptz`, MySQL `timestamp`). A column encoded otherwise (a millisecond `Timestamp`, a `VariableScaleDecimal`,
times of day) needs the Connect schema itself.
"""

import re

from ..errors import HoodieConfigError
from . import types

_PLAIN = {
    "string": "string",
    "varchar": "string",
    "char": "string",
    "tinyint": "int8",
    "byte": "int8",
    "smallint": "int16",
    "short": "int16",
    "int": "int32",
    "integer": "int32",
    "bigint": "int64",
    "long": "int64",
    "float": "float32",
    "real": "float32",
    "double": "float64",
    "boolean": "boolean",
    "binary": "bytes",
}
_NAMED = {
    "date": ("int32", "io.debezium.time.Date"),
    "timestamp_ntz": ("int64", "io.debezium.time.MicroTimestamp"),
    "timestamp": ("string", types.ZONED_TIMESTAMP),
    "timestamp_ltz": ("string", types.ZONED_TIMESTAMP),
}
_COLUMN = re.compile(
    r"^\s*(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)\s*:?\s+([A-Za-z_]+)\s*(\(([^)]*)\))?\s*(<.*>)?\s*(NOT\s+NULL)?\s*$", re.I
)


def looks_like_ddl(text):
    """Whether a topic's schema text is a DDL (not JSON)."""
    return isinstance(text, str) and not text.lstrip().startswith("{")


def _columns(text):
    depth, start, out = 0, 0, []
    for i, ch in enumerate(text):
        depth += ch in "(<"
        depth -= ch in ")>"
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [c for c in out if c.strip()]


def row_schema(text, where):
    """The Connect struct schema of a row DDL; an error naming `where` and the column it cannot take."""
    fields = []
    for column in _columns(text):
        m = _COLUMN.match(column)
        if not m:
            raise HoodieConfigError(f"{where}: cannot read the column {column.strip()!r} of the DDL")
        name, kind, args = m.group(1).strip("`"), m.group(2).lower(), m.group(4)
        field = {"field": name, "optional": m.group(6) is None}
        if kind in ("decimal", "dec", "numeric"):
            parts = [p.strip() for p in (args or "10,0").split(",")]
            precision, scale = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
            field.update(
                type="bytes",
                name=types.CONNECT_DECIMAL,
                parameters={"scale": str(scale), "connect.decimal.precision": str(precision)},
            )
        elif kind in _PLAIN:
            field["type"] = _PLAIN[kind]
        elif kind in _NAMED:
            field["type"], field["name"] = _NAMED[kind]
        else:
            raise HoodieConfigError(
                f"{where}: column {name!r} of type {kind.upper()} has no default Debezium encoding; give the topic's "
                f"Connect schema instead of a DDL"
            )
        fields.append(field)
    if not fields:
        raise HoodieConfigError(f"{where}: the DDL names no column")
    return {"type": "struct", "optional": True, "fields": fields}
