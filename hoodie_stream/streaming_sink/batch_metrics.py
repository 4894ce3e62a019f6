"""What the sink measured of each micro-batch it handled (`HoodieStreamSink.metrics()`), and the INFO line it logs
per committed batch.

The driver times the micro-batch in steps: `prepare_seconds` (table, schema and index checks, rollback of a
failed write, the instant requested), `chain_seconds` (the Spark action writing the batch: the write chain
key-by -> bucket assign -> write, or the bulk insert), `commit_seconds` (markers reconciled, the delta commit and
the index state), `services_seconds` (compaction scheduling, inline compaction and cleaning after the commit; an
async compaction runs in the background and is not counted) and `batch_seconds` (all of it). The chain's three
Spark stages are timed apart from Spark's status store (`stage_times.py`): `key_by_seconds`, `assign_seconds`,
`write_seconds` (wall time of each stage; null for a bulk insert, and until Spark's listener bus has reported
them). What Spark knows only once
the batch is over comes from the query's progress (a StreamingQueryListener the sink registers): `rows_in` (the
source's numInputRows) and `source_offsets_behind` (the largest `maxOffsetsBehindLatest` a source reports in its
metrics: the Kafka lag; null for sources that do not report it).

Only the last RETAINED_BATCHES micro-batches are kept, as Spark keeps a query's recent progress
(`spark.sql.streaming.numRecentProgressUpdates`): a query that runs for months keeps its driver's memory flat.
"""

from __future__ import annotations

import collections
import datetime
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from ..format.file_group.file_names import parse_log_file_name
from .stage_times import CHAIN_STAGES, ChainJobs

STAGES = ("prepare", "chain", "commit", "services")
RETAINED_BATCHES = 1000  # rows kept (the newest): metrics() of a long-running query
FLUSH_CAUSES = ("bucket", "task", "end")
METRICS_SCHEMA = pa.schema(
    [
        ("batch_id", pa.int64()),
        ("instant", pa.string()),  # null: nothing committed (an empty or skipped batch)
        ("finished_at", pa.timestamp("ms", tz="UTC")),
        ("skipped", pa.bool_()),  # already committed before (a replayed batch)
        ("bulk_insert", pa.bool_()),
        ("rows_in", pa.int64()),
        ("records_written", pa.int64()),
        ("records_inserted", pa.int64()),
        ("records_updated", pa.int64()),
        ("records_deleted", pa.int64()),  # deletes; a key moved to another partition is not one
        ("records_moved", pa.int64()),  # keys moved to another partition (their old copies' deletes)
        ("bytes_written", pa.int64()),
        ("files_written", pa.int64()),
        ("log_files_written", pa.int64()),
        *[(f"flushes_{cause}", pa.int64()) for cause in FLUSH_CAUSES],
        *[(f"{stage}_seconds", pa.float64()) for stage in STAGES],
        ("batch_seconds", pa.float64()),
        *[(f"{stage}_seconds", pa.float64()) for stage in CHAIN_STAGES],
        ("pending_compactions", pa.int64()),
        ("source_offsets_behind", pa.int64()),
    ]
)


def result_figures(result: Any) -> dict[str, int]:
    """Records, bytes and files a BatchResult's write stats count; records_deleted without the deletes of moved
    keys' old copies (records_moved), which the stats' numDeletes count as Hudi's writers do."""
    stats = list(getattr(result, "stats", ()) or ())
    moved = int(getattr(result, "moved", 0) or 0)  # deletes of the old copies of moved keys, in numDeletes
    written = [s for s in stats if s.path]
    return {
        "records_written": sum(s.num_writes or 0 for s in stats),
        "records_inserted": sum(s.num_inserts or 0 for s in stats),
        "records_updated": sum(s.num_update_writes or 0 for s in stats),
        "records_deleted": sum(s.num_deletes or 0 for s in stats) - moved,
        "records_moved": moved,
        "bytes_written": sum(s.total_write_bytes or 0 for s in stats),
        "files_written": len(written),
        "log_files_written": sum(1 for s in written if parse_log_file_name(s.file_name) is not None),
    }


def offsets_behind(progress: Any) -> int | None:
    """The largest `maxOffsetsBehindLatest` the sources of a StreamingQueryProgress report (None when none does)."""
    found = []
    for source in getattr(progress, "sources", None) or ():
        metrics = getattr(source, "metrics", None) or {}
        value = metrics.get("maxOffsetsBehindLatest") if isinstance(metrics, Mapping) else None
        if value is not None:
            try:
                found.append(int(float(value)))
            except (TypeError, ValueError):
                continue
    return max(found) if found else None


class BatchMetrics:
    """The rows of one sink object, one per micro-batch, the newest `retained`; thread-safe (progress arrives on a
    listener thread)."""

    def __init__(self, retained: int = RETAINED_BATCHES) -> None:
        self._lock = threading.Lock()
        self._rows: collections.deque[dict[str, Any]] = collections.deque(maxlen=retained)
        self._progress: dict[int, tuple[int | None, int | None]] = {}  # progress seen before its batch's row
        # rows whose chain's stage times are not in yet: (row, the chain's jobs), by the row's number (rows recorded
        # before it); a row dropped from the kept ones takes its entry with it
        self._chains: dict[int, tuple[dict[str, Any], ChainJobs]] = {}
        self._recorded = 0

    def record(
        self,
        batch_id: int,
        result: Any,
        seconds: Mapping[str, float],
        pending: int | None,
        bulk: bool = False,
        chain: ChainJobs | None = None,
    ) -> dict[str, Any]:
        row: dict[str, Any] = dict.fromkeys(METRICS_SCHEMA.names)
        row.update(
            batch_id=int(batch_id),
            instant=getattr(result, "instant", None),
            finished_at=datetime.datetime.now(datetime.timezone.utc),
            skipped=bool(getattr(result, "skipped", False)),
            bulk_insert=bool(bulk),
            pending_compactions=pending,
            batch_seconds=sum(seconds.values()),
        )
        row.update(result_figures(result))
        flushes = getattr(result, "flushes", None) or {}
        for cause in FLUSH_CAUSES:
            row[f"flushes_{cause}"] = int(flushes.get(cause, 0))
        for stage in STAGES:
            row[f"{stage}_seconds"] = seconds.get(stage)
        with self._lock:
            early = self._progress.pop(int(batch_id), None)
            if early is not None:
                row["rows_in"], row["source_offsets_behind"] = early
            if chain is not None:
                self._chains[self._recorded] = (row, chain)
            self._rows.append(row)
            self._recorded += 1
            oldest = self._recorded - len(self._rows)  # the number of the oldest row kept
            while self._chains and next(iter(self._chains)) < oldest:
                del self._chains[next(iter(self._chains))]
        return row

    def progress(self, progress: Any) -> None:
        """Fill in what a StreamingQueryProgress says of its batch (rows in, the sources' lag)."""
        try:
            batch_id = int(progress.batchId)
        except (AttributeError, TypeError, ValueError):
            return
        rows_in = getattr(progress, "numInputRows", None)
        figures = (None if rows_in is None else int(rows_in), offsets_behind(progress))
        with self._lock:
            for row in reversed(self._rows):
                if row["batch_id"] == batch_id:
                    row["rows_in"], row["source_offsets_behind"] = figures
                    return
            self._progress[batch_id] = figures
            while len(self._progress) > 64:  # progress of batches this sink never saw (another sink's query)
                self._progress.pop(next(iter(self._progress)))

    def _stage_times(self) -> None:
        """Fill in the chain's stage times Spark's status store has by now."""
        with self._lock:
            chains = dict(self._chains)
        found = {i: chain.seconds() for i, (_row, chain) in chains.items()}  # JVM calls: outside the lock
        with self._lock:
            for i, seconds in found.items():
                row, chain = chains[i]
                if seconds is not None:
                    row.update({f"{stage}_seconds": seconds[stage] for stage in CHAIN_STAGES})
                if seconds is not None or not chain.stage_ids:
                    self._chains.pop(i, None)

    def table(self) -> pa.Table:
        self._stage_times()
        with self._lock:
            rows = [dict(r) for r in self._rows]
        return pa.Table.from_pylist(rows, schema=METRICS_SCHEMA)

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)


def log_batch(log: logging.Logger, row: Mapping[str, Any], table: str) -> None:
    """The INFO line of a committed micro-batch, naming the table (`table`: what the sink calls it in messages)."""
    log.info(
        "%s: batch %s committed as %s: %d records (%d inserts, %d updates, %d deletes, %d moves), %d files, %.2f s",
        table,
        row["batch_id"],
        row["instant"],
        row["records_written"] + row["records_deleted"] + row["records_moved"],
        row["records_inserted"],
        row["records_updated"],
        row["records_deleted"],
        row["records_moved"],
        row["files_written"],
        row["batch_seconds"],
    )
