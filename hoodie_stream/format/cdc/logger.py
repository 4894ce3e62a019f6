"""CDC log files: the changes one write made to a file group, logged beside its data at write time (RFC-51's
supplemental logging), so that a changelog reader takes them as they are (Hudi's AS_IS case) instead of reading the
file group's slices before and after.

A `.cdc` file is a log file of the file slice it belongs to, `.<fileId>_<baseInstant>.log.<version>_<token>.cdc`,
holding one CDC_DATA block (block type 6, an AVRO_DATA block's content) whose header has INSTANT_TIME and SCHEMA.
In `DATA_BEFORE_AFTER` mode the records are Hudi's CDC schema (`HoodieCDCUtils.createCDCSchema`): a record `CDC`
in the table's namespace with `op` (i, u, d), `ts_ms` (the instant), `before` and `after` (the record without its
meta fields, null for an insert's before and a delete's after). The write stat of the log file it goes with names
it in `cdcStats` ({path: size}). Readers of the data never read `.cdc` files; the cleaner removes them with their
slice; a rollback removes them by their markers.

Hudi 0.15's CDC query reads a `DATA_BEFORE_AFTER` `.cdc` file as it is; in the other two modes it reads the write's
base file beside it, which a log write has none of, so only this mode's writes log changes (`LOGGED_MODES`).
"""

from __future__ import annotations

import json
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ...errors import HoodieFormatError
from ...storage import join
from ..avro.encoder import encode_records
from ..avro.schema import HOODIE_FIELDS, avro_to_arrow_schema, load_schema, with_meta_fields
from ..file_group.file_names import log_file_name, parse_log_file_name
from ..file_group.fs_view import FileSystemView
from ..log_file.data_block import avro_data_content
from ..log_file.log_block import BlockType, HeaderKey, LogBlock
from ..log_file.writer import write_log_file
from ..read.table_reader import TableReader
from ..record.merge import KEY, Version
from ..table.markers import create_marker
from .query import DELETE, INSERT, diff, fold, live, no_records, version_keys

if TYPE_CHECKING:
    from ..file_group.fs_view import FileSlice
    from ..timeline.commit_metadata import WriteStat

LOGGED_MODES = frozenset({"DATA_BEFORE_AFTER"})


def cdc_schema(avro_schema: dict[str, Any] | str) -> dict[str, Any]:
    """Hudi's CDC record schema of DATA_BEFORE_AFTER for a table whose records have `avro_schema`."""
    data = load_schema(avro_schema)
    data["fields"] = [f for f in data["fields"] if f["name"] not in HOODIE_FIELDS]
    namespace = data.get("namespace")
    full = f"{namespace}.{data['name']}" if namespace and "." not in data["name"] else data["name"]
    fields = [
        {"name": "op", "type": ["null", "string"], "doc": "", "default": None},
        {"name": "ts_ms", "type": ["null", "string"], "doc": "", "default": None},
        {"name": "before", "type": ["null", data], "doc": "", "default": None},
        {"name": "after", "type": ["null", full], "doc": "", "default": None},
    ]
    out: dict[str, Any] = {"type": "record", "name": "CDC"}
    if namespace:
        out["namespace"] = namespace
    out["fields"] = fields
    return out


class ChangeLogger:
    """The `.cdc` files of the log files one writer (a write task, a transaction) writes in an instant: each gets the
    changes its log file makes to the file group's records as of the instants committed when the logger was made
    (read from the group's latest slice then), with the writer's own earlier log files of the instant in that group
    merged in (a micro-batch writes a key once per file group, so there they hold other keys; a transaction may write
    a key twice, and then logs both changes)."""

    def __init__(self, storage: Any, instant: str, avro_schema: dict[str, Any]) -> None:
        self.table = TableReader(storage)
        self.view = FileSystemView(self.table.storage, self.table.timeline)
        self.instant = instant
        self.avro_schema = avro_schema
        self.schema = avro_to_arrow_schema(with_meta_fields(avro_schema))
        self._slices: dict[str, dict[str, FileSlice]] = {}  # partition -> {file id: latest slice}
        self._written: dict[tuple[str, str], list[str]] = {}  # (partition, file id) -> log files logged so far

    def log(self, stat: WriteStat) -> None:
        """Write the `.cdc` file of the log file of `stat` (next version of its slice, same write token) and name it
        in the stat's cdcStats."""
        log_path = stat.path or ""
        partition, _, name = log_path.rpartition("/")
        parsed = parse_log_file_name(name)
        if parsed is None or parsed.write_token is None:
            raise HoodieFormatError(f"not a log file name with a write token: {log_path!r}")
        if partition not in self._slices:
            self._slices[partition] = {fs.file_id: fs for fs in self.view.latest_slices(partition)}
        earlier = self._written.setdefault((partition, parsed.file_id), [])
        path, size = write_changes(
            self.table,
            self._slices[partition].get(parsed.file_id),
            self.view.committed,
            earlier,
            log_path,
            self.instant,
            self.avro_schema,
            self.schema,
            parsed.version + 1,
            parsed.write_token,
        )
        earlier.append(log_path)
        stat.cdc_stats = {path: size}


def change_records(instant: str, before: pa.Table, after: pa.Table, data_names: list[str]) -> pa.Table:
    """The CDC records (`op`, `ts_ms`, `before`, `after` structs of the `data_names` columns) of the changes from a
    file group's live records `before` to `after` (same schema, meta fields included)."""
    struct = pa.struct([after.schema.field(n) for n in data_names])
    ops, befores, afters = [], [], []

    def image(rows):
        if rows is None:
            return None
        return pa.StructArray.from_arrays([rows[n].combine_chunks() for n in data_names], fields=list(struct))

    for _ts, op, rows, old in diff(instant, before, after):
        ops.append(pa.array([op] * rows.num_rows, pa.string()))
        if op == INSERT:
            b, a = None, image(rows)
        elif op == DELETE:
            b, a = image(rows), None
        else:
            b, a = image(old), image(rows)
        befores.append(b if b is not None else pa.nulls(rows.num_rows, struct))
        afters.append(a if a is not None else pa.nulls(rows.num_rows, struct))
    n = sum(len(o) for o in ops)
    return pa.table(
        {
            "op": pa.concat_arrays(ops) if ops else pa.array([], pa.string()),
            "ts_ms": pa.array([instant] * n, pa.string()),
            "before": pa.concat_arrays(befores) if befores else pa.array([], struct),
            "after": pa.concat_arrays(afters) if afters else pa.array([], struct),
        }
    )


def write_changes(
    table: TableReader,
    before_slice: FileSlice | None,
    committed: AbstractSet[str],
    earlier: list[str],
    log_path: str,
    instant: str,
    avro_schema: dict[str, Any],
    schema: pa.Schema,
    version: int,
    token: str,
) -> tuple[str, int]:
    """Log the changes the log file `log_path` (just written by `instant`) makes to its file group, whose records
    before it are those of `before_slice` (None: none) with the blocks of the instants `committed`, then those of
    the log files `earlier` (written by `instant` before). Writes the `.cdc` file of the same slice at `version`
    (after a marker); returns (its path, its size)."""
    partition, _, name = log_path.rpartition("/")
    parsed = parse_log_file_name(name)
    if parsed is None:
        raise HoodieFormatError(f"not a log file name: {log_path!r}")
    mine = table.log_versions([log_path], instant.__eq__, schema)
    touched = version_keys(mine)
    if before_slice is None:
        before = no_records(schema)
    else:
        before = table.read_slice(before_slice, committed, schema, keep_deletes=True, keys=touched)
    if earlier:
        own = table.log_versions(earlier, instant.__eq__, schema)
        own = [Version(v.table.filter(pc.is_in(v.table[KEY], value_set=touched)), v.is_delete) for v in own]
        before = fold(table, before, own, schema)
    after = fold(table, before, mine, schema)
    cdc = cdc_schema(avro_schema)
    data_names = [f["name"] for f in cdc["fields"][2]["type"][1]["fields"]]  # the before image's record
    records = change_records(instant, live(before), live(after, touched), data_names)
    buffer, offsets = encode_records(records, cdc)
    header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: json.dumps(cdc, separators=(",", ":"))}
    block = LogBlock(BlockType.CDC_DATA, header, avro_data_content(buffer, offsets), {})
    path = join(partition, log_file_name(parsed.file_id, parsed.base_instant, version, token, cdc=True))
    create_marker(table.storage, instant, path, "APPEND")
    return path, write_log_file(table.storage, path, [block])
