"""StreamWriteFunction: the third operator, one Spark task per group of buckets (after the file-id shuffle).

Records are buffered per bucket (file group). Their sizes are estimated by sampling with pympler, as Hudi's
Flink writer does with its object-size calculator: the first record is measured, then about one record in 100,
and the last measured size stands for the records in between. Flushes:
- a bucket whose buffer passes `write.batch.size` is flushed (cause "bucket");
- when the task's buffered total passes `write.task.max.size`, the largest bucket is flushed (cause "task");
- everything left is flushed at the end of the micro-batch (cause "end").
A flush appends a new log file version to the file group: an AVRO_DATA block for upserts and a DELETE block for
deletes. The task returns one row per file written (its write stat as JSON) and its counts: flushes by cause, and
the deletes it wrote of keys that moved partition (counted in the stats' numDeletes, as Hudi counts them).
"""

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pympler import asizeof

from ..chain import worker_memory
from ..chain.columns import FILE_ID, KEY, KIND, PARTITION, SEQ, RecordKind
from ..chain.stages import BatchContext, WriteSpec
from ..errors import HoodieTimelineError, in_task
from ..format.cdc.logger import ChangeLogger
from ..format.file_group.file_names import write_token
from ..format.file_group.fs_view import FileSystemView, list_file_groups
from ..format.table.markers import marker_dir, marker_name
from ..format.table.partition_metadata import write_partition_metadata
from ..format.timeline.active_timeline import Timeline
from ..format.timeline.instant import INFLIGHT, Instant
from ..format.util.runs import runs
from ..format.write.write_handles import append_log, log_marker_type
from ..storage import join

SAMPLE_RATE = 0.01
RELEASE_AFTER_BYTES = 8 * 1024 * 1024
DELETE_KINDS = pa.array([RecordKind.DELETE_ORDERED, RecordKind.DELETE_NATURAL, RecordKind.DELETE_MOVED], pa.int8())
RESULT_SCHEMA = pa.schema([("kind", pa.string()), ("payload", pa.string())])
_EMPTY_SLICE_SIZE = None


def _row_size(table, i):
    """pympler's size of one buffered record (an Arrow row slice), without the slice object's own overhead."""
    global _EMPTY_SLICE_SIZE
    if _EMPTY_SLICE_SIZE is None:
        _EMPTY_SLICE_SIZE = asizeof.asizeof(table.slice(0, 0))
    return max(1, asizeof.asizeof(table.slice(i, 1)) - _EMPTY_SLICE_SIZE)


class SizeSampler:
    """Estimated bytes of records: measure the first, then ~1 in 100, reuse the last measurement in between."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.last = None
        self.measured = 0

    def sizes(self, n, row_size):
        """Estimated bytes of each of n rows (int64 array); `row_size(i)` measures row i. Sampled rows are
        measured, every other row counts as the last measurement before it."""
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        sampled = np.flatnonzero(self.rng.random(n) < SAMPLE_RATE)
        if self.last is None and (len(sampled) == 0 or sampled[0] != 0):
            sampled = np.concatenate([[0], sampled])
        if len(sampled) == 0:
            return np.full(n, self.last, dtype=np.int64)
        measured = np.array([row_size(int(i)) for i in sampled], dtype=np.int64)
        self.measured += len(sampled)
        # rows before the first sample use the previous measurement; each sample stands until the next
        out = np.repeat(measured, np.diff(np.append(sampled, n)))
        if sampled[0]:
            out = np.concatenate([np.full(sampled[0], self.last, dtype=np.int64), out])
        self.last = int(measured[-1])
        return out


class Bucket:
    __slots__ = ("bytes", "nbytes", "partition", "tables")

    def __init__(self, partition):
        self.partition = partition
        self.tables = []
        self.bytes = 0  # estimated (sampled with pympler)
        self.nbytes = 0  # Arrow bytes of the buffered rows


class StreamWriteFunction:
    """Picklable mapInArrow function for the write stage of one micro-batch."""

    def __init__(self, context: BatchContext, spec: WriteSpec) -> None:
        self.context = context
        self.spec = spec

    @in_task
    def __call__(self, batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        token = write_token(ctx.partitionId(), ctx.stageId(), ctx.attemptNumber()) if ctx else write_token(0, 0, 0)
        task = ctx.partitionId() if ctx else 0
        with worker_memory.task(self.context.release_memory):
            writer = BufferedWriter(self, token, task)
            try:
                for batch in batches:
                    writer.add(pa.Table.from_batches([batch]))
                writer.flush_all()
            except BaseException:
                try:
                    writer.remove_if_rolled_back()
                except Exception:  # the store is unreachable: the task's own error is the one raised
                    pass
                raise
            if writer.remove_if_rolled_back():
                raise HoodieTimelineError(
                    f"{self.context.storage.uri}: instant {self.context.instant} is no longer pending (its "
                    "micro-batch failed and was rolled back); the write task removed the log files it wrote"
                )
            result = writer.results()
        yield result


def instant_pending(context: BatchContext) -> bool:
    """Whether the micro-batch's delta commit is still inflight. A task Spark gave up on (its micro-batch failed
    and the driver rolled the instant back, or removed the table the micro-batch created) can run on in its Python
    worker for a while: what it writes after the rollback listed the instant's files is its own to remove."""
    inflight = Instant(context.instant, "deltacommit", INFLIGHT)
    return context.storage.exists(f"{context.timeline_dir}/{inflight.file_name}")


class BufferedWriter:
    """The buffers and flush policy of one write task."""

    def __init__(self, fn, token, task):
        self.fn = fn
        self.token = token
        self.task = task
        self.buckets = {}
        self.total = 0  # estimated bytes buffered (what the flush policy counts)
        self.total_nbytes = 0  # Arrow bytes buffered (what the buffers really hold)
        self.sampler = SizeSampler(seed=task)
        self.stats = []
        self.flushes = {"bucket": 0, "task": 0, "end": 0}
        self.moved = 0  # deletes written of keys that moved partition (their old copies), in the stats' numDeletes
        self.peak_buffered = 0
        self.peak_real = 0
        self._slices = {}  # partition -> {file id: (base instant, base file name)}
        self._partitions = set()  # partitions whose .hoodie_partition_metadata this task made sure of
        self._freed = 0  # Arrow bytes flushed since memory was last given back
        self._timeline = None
        self._changes = None  # the `.cdc` files' writer (spec.cdc_logging)

    # -- buffering -----------------------------------------------------------------------------------------
    def add(self, table):
        """Buffer the rows of `table` in their buckets, flushing as Hudi's Flink writer does record by record:
        a record is buffered, then its bucket is flushed if it passed `write.batch.size`, or else the largest
        bucket if the task's total passed `write.task.max.size`. Rows are taken a run of one bucket at a time, cut
        at the rows where a limit is passed (cumulative sums of the sampled sizes), so the buffers never hold
        more than a limit plus one record."""
        if table.num_rows == 0:
            return
        order = pc.sort_indices(table, sort_keys=[(FILE_ID, "ascending")])
        file_ids, bounds = runs(pc.take(table[FILE_ID], order).combine_chunks())
        for i, file_id in enumerate(file_ids):
            rows = order.slice(bounds[i], bounds[i + 1] - bounds[i])
            sizes = self.sampler.sizes(len(rows), lambda j, rows=rows: _row_size(table, rows[j].as_py()))
            self._buffer(file_id, table, rows, sizes)

    def _buffer(self, file_id, table, rows, sizes):
        cum = np.cumsum(sizes)
        start = 0
        while start < len(sizes):
            bucket = self.buckets.get(file_id)
            held = bucket.bytes if bucket is not None else 0
            base = cum[start - 1] if start else 0
            # first row (relative to `start`) whose bucket or task total passes its limit
            over = np.searchsorted(
                cum[start:],
                [base + self.fn.spec.batch_size_bytes - held, base + self.fn.spec.task_max_bytes - self.total],
                side="right",
            )
            end = min(start + int(over.min()) + 1, len(sizes))
            # each bucket gets its own compact copy of its rows: a flush frees exactly what it wrote, and the
            # buffers never pin Spark's input batches
            chunk = table.take(rows.slice(start, end - start))
            if bucket is None:
                bucket = self.buckets[file_id] = Bucket(chunk[PARTITION][0].as_py())
            size = int(cum[end - 1] - base)
            bucket.tables.append(chunk)
            bucket.bytes += size
            bucket.nbytes += chunk.nbytes
            self.total += size
            self.total_nbytes += chunk.nbytes
            self.peak_buffered = max(self.peak_buffered, self.total)
            self.peak_real = max(self.peak_real, self.total_nbytes)
            if bucket.bytes > self.fn.spec.batch_size_bytes:
                self.flush(file_id, "bucket")
            elif self.total > self.fn.spec.task_max_bytes:
                largest = max(self.buckets, key=lambda f: self.buckets[f].bytes)
                self.flush(largest, "task")
            start = end

    def flush_all(self):
        for file_id in sorted(self.buckets):
            self.flush(file_id, "end")

    # -- flushing ------------------------------------------------------------------------------------------
    def flush(self, file_id, cause):
        bucket = self.buckets.pop(file_id)
        self.total -= bucket.bytes
        self.total_nbytes -= bucket.nbytes
        self.flushes[cause] += 1
        stat = self._append(file_id, bucket)
        if stat is not None:
            self.stats.append(stat)  # first: a rolled-back task removes the log file even if logging its changes fails
            if self.fn.spec.cdc_logging:
                if self._changes is None:
                    self._changes = ChangeLogger(
                        self.fn.context.storage, self.fn.context.instant, self.fn.spec.avro_schema
                    )
                self._changes.log(stat)
        # the bucket's rows and the flush's transients are freed by now; giving pages back costs page faults when
        # they are needed again, so it is done once a few MB have been freed, not after every small flush
        self._freed += bucket.nbytes
        if self._freed >= RELEASE_AFTER_BYTES:
            worker_memory.release()
            self._freed = 0

    def _append(self, file_id, bucket):
        """Append the bucket's rows to its file group as a new log file; returns the write stat."""
        table = pa.concat_tables(bucket.tables)
        bucket.tables = []
        kinds = table[KIND]
        is_delete = pc.is_in(kinds, value_set=DELETE_KINDS)
        if pc.any(is_delete).as_py():
            data = table.filter(pc.invert(is_delete))
            dels = table.filter(is_delete)
        else:  # no copy of the bucket
            data, dels = table, table.slice(0, 0)
        base_instant, base_file, new_group = self._slice_of(bucket.partition, file_id, table)
        if new_group and bucket.partition not in self._partitions:
            # a new file group may open a new partition: Hudi's listing (without a metadata table) finds partitions
            # by this file, as its append handle (and the bulk insert here) writes it
            write_partition_metadata(self.fn.context.storage, bucket.partition, self.fn.context.instant)
            self._partitions.add(bucket.partition)
        records = keys = order = None
        if data.num_rows:
            # records go to the log block in arrival order; append_log takes them a chunk at a time through
            # `order` instead of a sorted copy of the whole bucket
            order = pc.sort_indices(data, sort_keys=[(SEQ, "ascending")])
            records = data.select(self.fn.context.data_columns)
            keys = data[KEY]
        deletes = None
        if dels.num_rows:
            ordering = None
            if self.fn.context.ordering_field and self.fn.context.ordering_field in dels.column_names:
                # deletes applied by arrival (operation=delete, a key that moved partition) carry no ordering value
                values = dels[self.fn.context.ordering_field]
                ordering = pc.if_else(
                    pc.equal(dels[KIND], RecordKind.DELETE_ORDERED), values, pa.scalar(None, values.type)
                )
            deletes = (dels[KEY], ordering)
            # the stat's numDeletes counts the old copies of moved keys too, as Hudi's writer does; the task
            # reports them apart so that the commit can tell deletes from moves
            self.moved += pc.sum(pc.equal(dels[KIND], RecordKind.DELETE_MOVED)).as_py() or 0
        inserts = pc.sum(pc.equal(table[KIND], RecordKind.INSERT)).as_py() or 0
        return append_log(
            self.fn.context.storage,
            self.fn.context.instant,
            bucket.partition,
            file_id,
            base_instant,
            self.fn.spec.avro_schema,
            records=records,
            keys=keys,
            deletes=deletes,
            token=self.token,
            task_id=self.task,
            base_file=base_file,
            num_inserts=inserts,
            new_file_group=new_group,
            order=order,
            table_version=self.fn.context.table_version,
        )

    def _slice_of(self, partition, file_id, table):
        """(base instant, base file name, new file group?) of the latest slice of a file group.

        A file group in a pending compaction gets a new slice named by the compaction instant, as in Hudi.
        """
        pending = self.fn.spec.pending_compactions.get((partition, file_id))
        if pending is not None:
            return pending, "", False
        if partition not in self._slices:
            if self._timeline is None:
                self._timeline = Timeline(self.fn.context.storage)
            view = FileSystemView(self.fn.context.storage, self._timeline)
            slices = {}
            for group in list_file_groups(view.storage, partition):
                found = view.slices(group)
                if found:
                    slices[group.file_id] = (found[-1].base_instant, found[-1].base_file or "")
            self._slices[partition] = slices
        known = self._slices[partition].get(file_id)
        if known is not None:
            return known[0], known[1], False
        # a new file group: a log-only slice whose base instant is this instant
        self._slices[partition][file_id] = (self.fn.context.instant, "")
        return self.fn.context.instant, "", True

    def remove_if_rolled_back(self):
        """When the instant is no longer pending, delete the log files this task wrote and their markers; whether
        it was rolled back."""
        if instant_pending(self.fn.context):
            return False
        logs = [s.path for s in self.stats] + [p for s in self.stats for p in s.cdc_stats or {}]
        markers = [
            join(marker_dir(self.fn.context.instant), marker_name(p, log_marker_type(self.fn.context.table_version)))
            for p in logs
        ]
        self.fn.context.storage.delete_many(logs + markers)
        return True

    def results(self):
        rows = [("stat", json.dumps(s.to_dict())) for s in self.stats]
        rows.append(
            (
                "flushes",
                json.dumps(
                    dict(
                        self.flushes,
                        task_index=self.task,
                        peak_buffered=self.peak_buffered,
                        peak_real=self.peak_real,
                        measured=self.sampler.measured,
                        moved=self.moved,
                    )
                ),
            )
        )
        kinds, payloads = zip(*rows)
        return pa.record_batch([pa.array(kinds, pa.string()), pa.array(payloads, pa.string())], schema=RESULT_SCHEMA)
