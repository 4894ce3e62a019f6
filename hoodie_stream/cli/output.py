"""What a command prints: an aligned text table or JSON (`--json`), from Arrow tables, rows or a report dict."""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import pyarrow as pa


def _plain(value: Any) -> Any:
    """A value as JSON takes it: datetimes as ISO text, mappings and sequences element by element."""
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def rows_of(table: pa.Table) -> list[dict[str, Any]]:
    return [_plain(row) for row in table.to_pylist()]


def to_json(value: Any) -> str:
    if isinstance(value, pa.Table):
        value = rows_of(value)
    return json.dumps(_plain(value), indent=2, sort_keys=False)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def text_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Rows as aligned columns under a header (numbers right-aligned), as hudi-cli prints its tables."""
    if columns is None:
        columns = list(rows[0]) if rows else []
    if not columns:
        return "(nothing)"
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(row.get(c), (int, float)) or row.get(c) is None for row in rows) for c in columns]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [line(list(columns)), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    if not rows:
        out.append("(no rows)")
    return "\n".join(out)


def emit(value: Any, as_json: bool, text: str | None = None, out: TextIO | None = None) -> None:
    """Print `value` as JSON, or `text` (default: `value` as a text table when it is a table or rows)."""
    out = out or sys.stdout
    if as_json:
        print(to_json(value), file=out)
        return
    if text is None:
        if isinstance(value, pa.Table):
            text = text_table(value.to_pylist(), value.column_names)
        elif isinstance(value, list):
            text = text_table(value)
        else:
            text = str(value)
    print(text, file=out)
