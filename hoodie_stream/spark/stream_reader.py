"""`spark.readStream.format("hoodie")`: a micro-batch stream of the records each new commit wrote.

Offsets are completed instants (`{"instant": "20260101120000123"}`); the micro-batch (start, end] returns what the
incremental query over (start, end] returns (`file_splits.plan_incremental`, as `HoodieTable.read(
query_type="incremental", start=, end=)`): the latest version, as of `end`, of every record a commit in the window
wrote. Deleted records are not returned (as in Hudi's incremental query): a key deleted in the window is simply
absent from it. With `hoodie.datasource.query.type=incremental` and `hoodie.datasource.query.incremental.format=cdc`
(a table created with `hoodie.table.cdc.enabled=true`) the micro-batch is instead the changelog of the window
(`format.cdc.query`, Hudi's CDC query): every insert, update and delete once, as `op`, `ts_ms`, `before`, `after`.

- On table versions 8 and 9 (Hudi 1.x, timeline layout 2) offsets are completion times, as Hudi 1.x streams: the
  micro-batch (start, end] holds the commits that completed in it (the incremental window by completion time), and
  a writer still pending holds nothing back (it completes later, after the offset).
- Only writer commits (delta commits, commits, replace commits) become offsets and count against the read limit.
  Compaction commits are not new data: their rows keep the commit time of the write that made them, so the
  window's commit-time filter never returns a record a compaction rewrote.
- On version 6 an offset never passes a writer instant still pending (requested or inflight): a commit that completes later
  but has an earlier instant time would otherwise be skipped (Hudi's BLOCK policy for hollow commits). A writer
  that crashed mid-commit holds the stream back until its restart rolls the instant back.
- Start (`hoodie.datasource.streaming.startOffset`): `earliest` (every commit), `latest` (commits after the latest
  one when the query first starts) or an instant (commits after it; on versions 8 and 9 a completion time: commits
  that completed after it). A restarted query resumes from its
  checkpoint.
- Read limit: `hoodie.datasource.read.streaming.max.commits` (writer commits per micro-batch) and
  `hoodie.datasource.read.streaming.max.files` (files written per micro-batch, Spark's `ReadMaxFiles`; a commit
  larger than the limit still makes a micro-batch of its own). `trigger(availableNow=True)` reads up to the latest
  commit at the query's start, in micro-batches within those limits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxFiles, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ..errors import HoodieConfigError, HoodieError
from ..format.cdc.query import check_cdc_table
from ..format.hoodie_table import HoodieTable
from ..format.timeline.instant import COMMIT_ACTIONS, parse_instant_time
from .change_splits import ChangeSplit, change_splits, read_change_split
from .file_splits import FileSplit, plan_incremental, read_split, worker_table
from .read_options import START_OFFSET, ReadOptions, table_storage
from .spark_arrow import record_batches

OFFSET = "instant"
EARLIEST = "0"  # sorts before every instant time: nothing read yet
_NO_LIMIT = 2**31 - 1  # Spark's ReadMaxFiles takes a Java int


@dataclass(frozen=True)
class CommitInfo:
    timestamp: str  # the offset: the instant time (version 6) or the completion time (versions 8, 9)
    files: int  # files the commit wrote (its write stats)


def _after(offset: str) -> str:
    """The smallest time after `offset` (a completion time, compared as text): the window (offset, end] by
    completion time as the incremental read's [begin, end]."""
    return str(int(offset) + 1).zfill(len(offset))


class HoodieStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets, read limits and micro-batch planning on the driver; split reads in the tasks."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        table = self._open()
        if not table.meta_fields:
            raise HoodieConfigError(
                f"{table.path}: a streaming read needs the commit time of every record, and this table was written "
                "with hoodie.populate.meta.fields=false"
            )
        if options.incremental_format == "cdc":
            check_cdc_table(table)
        self.merge_schema = table.arrow_schema()
        self._target: str | None = None  # trigger(availableNow=True): the last offset of this run
        self._writer_commits: dict[str, CommitInfo | None] = {}  # instant -> info, None for compactions

    # the table and the caches stay on the driver: a task gets the options and the schemas only
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_table", None)
        state["_writer_commits"] = {}
        return state

    def _open(self) -> HoodieTable:
        table = self.__dict__.get("_table")
        if table is None:
            table = HoodieTable(table_storage(self.options))
            if table.timeline.layout >= 2 and self.options.incremental_format == "cdc":
                raise HoodieError(
                    f"{table.path}: changelog streams of table version {table.config.version} (Hudi 1.x) are not "
                    "supported; stream its records (without hoodie.datasource.query.incremental.format=cdc)"
                )
            self._table = table
        else:
            table.reload()
        return table

    # -- offsets ---------------------------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        start = self.options.start_offset.strip()
        if start.lower() == "earliest":
            return {OFFSET: EARLIEST}
        if start.lower() == "latest":
            return {OFFSET: self._latest()}
        table = self._open()
        return {OFFSET: parse_instant_time(start, START_OFFSET, table.config.timeline_timezone, as_text=True)}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_files is None and self.options.max_commits is None:
            return ReadAllAvailable()
        # Spark's Python API takes built-in limits only: the commit limit rides along (applied with any limit
        # but ReadAllAvailable, which Spark sends when a trigger asks for everything)
        return ReadMaxFiles(self.options.max_files or _NO_LIMIT)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        commits = self._available(start[OFFSET])
        if self._target is not None:
            commits = [c for c in commits if c.timestamp <= self._target]
        if commits and not isinstance(limit, ReadAllAvailable):
            commits = _limited(commits, self.options.max_commits, getattr(limit, "max_files", None))
        return {OFFSET: commits[-1].timestamp} if commits else start

    def _readable(self) -> tuple[HoodieTable, list[tuple[str, str]]]:
        """The table, reloaded, and its readable completed commit-like instants as (offset, instant time), in offset
        order: on version 6 those before the earliest pending writer instant, by instant time; on 8 and 9 all, by
        completion time."""
        table = self._open()
        timeline = table.timeline
        if timeline.layout >= 2:
            done = sorted((i.completion_time, i.timestamp) for i in timeline.commits_timeline() if i.completion_time)
            return table, done
        pending = [i.timestamp for i in timeline.pending(COMMIT_ACTIONS)]
        block = min(pending) if pending else None
        return table, [
            (i.timestamp, i.timestamp) for i in timeline.commits_timeline() if block is None or i.timestamp < block
        ]

    def _available(self, after: str) -> list[CommitInfo]:
        """The readable writer commits after offset `after`, oldest first."""
        table, instants = self._readable()
        infos = (self._writer_commit(table, offset, ts) for offset, ts in instants if offset > after)
        return [info for info in infos if info is not None]

    def _latest(self) -> str:
        """The offset of the latest readable writer commit (EARLIEST when there is none)."""
        table, instants = self._readable()
        return next(
            (offset for offset, ts in reversed(instants) if self._writer_commit(table, offset, ts) is not None),
            EARLIEST,
        )

    def _writer_commit(self, table: HoodieTable, offset: str, ts: str) -> CommitInfo | None:
        if offset not in self._writer_commits:
            meta = table.timeline.read_commit_metadata(ts)
            self._writer_commits[offset] = (
                None if meta.is_compaction else CommitInfo(offset, len(meta.all_write_stats()))
            )
        return self._writer_commits[offset]

    # -- micro-batches -----------------------------------------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if start[OFFSET] == end[OFFSET]:
            return []
        begin = None if start[OFFSET] == EARLIEST else start[OFFSET]
        table = self._open()
        if begin is not None and table.timeline.layout >= 2:  # (start, end] by completion time
            begin = _after(begin)
        if self.options.incremental_format == "cdc":
            return change_splits(table, begin, end[OFFSET])
        return plan_incremental(table, begin, end[OFFSET], None, self.options.max_split_bytes)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, ChangeSplit):
            table = worker_table(self.options)
            yield from record_batches(
                read_change_split(table, partition, self.merge_schema, self.options.cdc_flat), self.schema
            )
            return
        if not isinstance(partition, FileSplit):
            return
        table = worker_table(self.options)
        yield from record_batches(read_split(table, partition, self.merge_schema), self.schema)

    def commit(self, end: dict) -> None:
        # offsets up to `end` are done: forget what is known of the commits up to it
        for ts in [t for t in self._writer_commits if t <= end[OFFSET]]:
            del self._writer_commits[ts]


def _limited(commits: list[CommitInfo], max_commits: int | None, max_files: int | None) -> list[CommitInfo]:
    """The leading commits within both limits (at least one)."""
    if max_commits is not None:
        commits = commits[:max_commits]
    if max_files is not None and max_files < _NO_LIMIT:
        total = 0
        for n, c in enumerate(commits):
            total += c.files
            if total > max_files and n > 0:
                return commits[:n]
    return commits
