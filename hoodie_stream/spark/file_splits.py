"""File splits: the input partitions of a Spark read, one per file slice, and how a task reads one.

A split is a file slice as the file-system view saw it when the query was planned (its base file and log files,
named: a task never lists), the instants whose log blocks count, and, for an incremental window, the commit times
the rows must fall in. A slice with no log files and a base file larger than the split size is cut along its base
file's row groups (several splits, each merging its own rows: a base file holds each key once). A slice with log
files stays one split: its log blocks may touch any row of the base file.

Planning follows `HoodieTable.read` (format/read/table_reader.py) step by step, so that the union of the splits' rows is
exactly what `HoodieTable.read` returns for the same query:
- snapshot / read_optimized: the latest slice (or latest base file) of every file group as of `as_of`;
- incremental (start, end]: the file groups the window's commits wrote; of their latest slice as of `end`, the base
  file only when a window instant wrote it and the log blocks of window instants only; rows whose
  `_hoodie_commit_time` lies in the window. Compaction commits are part of the window (a compacted base file may
  hold the only copy of a record the window wrote) but their rows keep the commit time of the write that made
  them, so a record compaction rewrote is never returned again.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..format.avro.schema import META_FIELDS
from ..format.base_file.parquet import parquet_file
from ..format.file_group.fs_view import FileSlice, FileSystemView
from ..format.hoodie_table import HoodieTable
from ..format.read.time_travel import IncrementalWindow, incremental_plan
from ..format.record.merge import Version, merge
from .partition_pruning import PartitionPruner
from .read_options import ReadOptions, table_storage

COMMIT_TIME = "_hoodie_commit_time"


class FileSplit(InputPartition):
    """One Spark input partition: a file slice (or some row groups of its base file) and how to read it."""

    def __init__(
        self,
        file_slice: FileSlice,
        committed: frozenset[str],
        row_groups: tuple[int, ...] | None = None,
        window: IncrementalWindow | None = None,
        whole: tuple[FileSlice, frozenset[str]] | None = None,
    ) -> None:
        super().__init__(None)
        self.file_slice = file_slice
        self.committed = committed  # instants whose log blocks count
        self.row_groups = row_groups  # None: the whole slice
        self.window = window  # incremental reads: which rows the window returns
        # incremental reads: the slice and the instants committed as of the window's end, merged instead when the
        # window holds partial updates (TableReader.read_window_slice)
        self.whole = whole

    def __repr__(self) -> str:
        fs = self.file_slice
        groups = "" if self.row_groups is None else f", row groups {list(self.row_groups)}"
        return f"FileSplit({fs.partition or '<root>'}/{fs.file_id}@{fs.base_instant}{groups})"


def plan_snapshot(
    table: HoodieTable,
    as_of: str | None,
    read_optimized: bool,
    pruner: PartitionPruner | None,
    max_split_bytes: int,
) -> list[FileSplit]:
    """The splits of a snapshot or read-optimized query as of `as_of` (a parsed instant time or None)."""
    if not table.timeline.commits_timeline():
        return []
    view = FileSystemView(table.storage, table.timeline, as_of)
    latest = view.latest_base_files if read_optimized else view.latest_slices
    committed = view.committed  # CommittedInstants: archived instants count
    splits = []
    for partition in view.partitions():
        if pruner is not None and not pruner.keep(partition):
            continue
        for fs in latest(partition):
            splits += _splits_of(table, fs, committed, None, max_split_bytes)
    return splits


def plan_incremental(
    table: HoodieTable,
    start: str | None,
    end: str | None,
    pruner: PartitionPruner | None,
    max_split_bytes: int,
) -> list[FileSplit]:
    """The splits of an incremental query over (start, end] (parsed instant times; None: open), the window as
    HoodieTable.read takes it (`time_travel.incremental_plan`: archived commits among them on table versions 8
    and 9)."""
    window, touched = incremental_plan(table.timeline, start, end)
    if not touched or window.as_of is None:
        return []
    view = FileSystemView(table.storage, table.timeline, window.as_of)
    committed = window.counted(view.committed)
    splits = []
    for partition in sorted({p for p, _ in touched}):
        if pruner is not None and not pruner.keep(partition):
            continue
        for whole in view.latest_slices(partition):
            if (whole.partition, whole.file_id) not in touched:
                continue
            fs = whole
            if fs.base_file and fs.base_instant not in window.instants:
                fs = FileSlice(fs.partition, fs.file_id, fs.base_instant, None, fs.log_files, fs.sizes)
            splits += _splits_of(table, fs, committed, window, max_split_bytes, (whole, view.committed))
    return splits


def _splits_of(table, fs, committed, window, max_split_bytes, whole=None):
    """One split per slice; a base-only slice above the split size: one per run of row groups up to that size."""
    if fs.log_files or not fs.base_file or fs.base_size <= max_split_bytes or not table.meta_fields:
        return [FileSplit(fs, committed, None, window, whole)]
    with parquet_file(table.storage, fs.base_file_path) as pf:
        metadata = pf.metadata
        sizes = [
            sum(metadata.row_group(i).column(c).total_compressed_size for c in range(metadata.num_columns))
            for i in range(metadata.num_row_groups)
        ]
    runs: list[list[int]] = [[]]
    total = 0
    for i, size in enumerate(sizes):
        if runs[-1] and total + size > max_split_bytes:
            runs.append([])
            total = 0
        runs[-1].append(i)
        total += size
    return [FileSplit(fs, committed, tuple(run), window) for run in runs if run]


def read_split(table: HoodieTable, split: FileSplit, schema: pa.Schema) -> pa.Table:
    """The rows of one split in `schema` (the table's Arrow schema with meta fields), as HoodieTable.read
    returns them: merged, deletes dropped, meta columns dropped for tables written without them."""
    fs = split.file_slice
    if split.row_groups is None:
        rows = table.read_window_slice(fs, split.committed, schema, split.whole)
    else:
        with parquet_file(table.storage, fs.base_file_path) as pf:
            base = pf.read_row_groups(list(split.row_groups))
        rows = merge([Version(base)], schema, *table.merge_rule(schema))
    if split.window is not None and table.meta_fields:
        rows = rows.filter(split.window.keep(rows[COMMIT_TIME]))
    if not table.meta_fields:
        rows = rows.drop_columns([c for c in META_FIELDS if c in rows.column_names])
    return rows


# -- the tables a Python worker reads from --------------------------------------------------------------------
_TABLES: dict[tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]], HoodieTable] = {}
_TABLES_LOCK = threading.Lock()


def worker_table(options: ReadOptions) -> HoodieTable:
    """The HoodieTable a task reads its split through, opened once per Python worker process (its config and
    storage client are all a split read needs; the timeline is not consulted)."""
    key = (options.path, _items(options.storage_options), _items(options.session_storage_options))
    with _TABLES_LOCK:
        table = _TABLES.get(key)
        if table is None:
            table = _TABLES[key] = HoodieTable(table_storage(options))
        return table


def _items(options: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in options.items()))
