"""BulkInsertWriteFunction: the write stage of a bulk insert, one Spark task per range of key groups.

As Hudi's Flink bulk insert (BulkInsertWriteFunction with its BulkInsertWriterHelper), a task writes its records
straight into new base files, no log and no lookup: one open file per partition (with a sorted input, the
previous partition's file is closed when the next partition starts, as the writer helper closes its handles),
rolled over to a new file group when it holds its target number of records. A file group's id is a prefix drawn
from (instant, task) and the number of files the task opened, `<prefix>-<n>`, so a retried task writes the same
file groups. Each file is written in row groups of about ROW_GROUP_BYTES of Arrow data, with the meta columns,
the bloom filter and the key range footers of the project's base files (`format/base_file/parquet.py`), after a marker.

Memory: the task's buffers stay within `write.task.max.size`, as the write function's do. A row group is written
in a thread while the next one is gathered, and encoding it takes about its size again, so a row group holds at
most a quarter of the task buffer (`row_group_bytes`); an unsorted input's open files hold at most half of it
together. (Measured with 1 KB records and a 64 MB task buffer, a 600k-row bulk insert: a worker peaked at 318 MB
with 32 MB row groups, 252 MB with 16 MB, 242 MB with 8 MB.)

Records are pre-combined by key on the way: the input is sorted by partition, key, ordering value and arrival, so
the last record of each run of one key wins (a delete that wins is dropped: the table had no such key, or a bulk
insert does not look it up). What runs of one key in several partitions or an unsorted input leave is combined at
the end (`bulk_insert_keys.py`), then the index state is saved and the task returns a write stat per file.

A file's target number of records is `max file size / record size`: the record size of recent commits (or
`hoodie.copyonwrite.record.size.estimate`) until the task has closed a file, then the bytes per record of the files
it wrote (their records' bytes: the bloom filter in the footer, ~430 KB per 60,000 keys it holds, does not count).
"""

import json
import time
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..bucket_assign.markers import fill_runs
from ..chain import worker_memory
from ..chain.columns import DELETE, KEY, PARTITION, SEQ
from ..chain.stages import BatchContext, BulkInsertSpec
from ..checkpoints import index_state
from ..errors import HoodieTimelineError, in_task
from ..format.avro.schema import META_FIELDS, avro_to_arrow_schema, with_meta_fields
from ..format.base_file.parquet import BaseFileWriter
from ..format.file_group.file_names import base_file_name, write_token
from ..format.record.keygen import make_key_generator
from ..format.record.partition_path import check_partition_path
from ..format.table.markers import create_marker, marker_dir, marker_name
from ..format.table.partition_metadata import write_partition_metadata
from ..format.timeline.commit_metadata import WriteStat
from ..format.util.runs import runs
from ..format.write.write_handles import append_log, with_meta_columns
from ..storage import join
from .bulk_insert_keys import DELETED, WrittenKeys, record_keys_of, save_index
from .key_by import KeyBy
from .write_function import RESULT_SCHEMA, instant_pending

ROW_GROUP_BYTES = 32 * 1024 * 1024  # Arrow bytes of records buffered per open file before a row group is written
UNSORTED_BUFFER_BYTES = 128 * 1024 * 1024  # an unsorted input: the largest buffer is written past this in all


def row_group_bytes(task_max_bytes):
    """Arrow bytes gathered for a row group: ROW_GROUP_BYTES, or a quarter of the task buffer when that is less."""
    return max(1, min(ROW_GROUP_BYTES, task_max_bytes // 4))


def unsorted_buffer_bytes(task_max_bytes):
    """Arrow bytes an unsorted input's open files hold together: UNSORTED_BUFFER_BYTES, or half the task buffer."""
    return max(1, min(UNSORTED_BUFFER_BYTES, task_max_bytes // 2))


_NAMESPACE = uuid.UUID("0b7c2f0e-54a1-4c55-8d0e-6a3f1c9b2e17")


class BulkInsertWriteFunction:
    """Picklable mapInArrow function: the records of a range of key groups in, a write stat per file out."""

    def __init__(self, context: BatchContext, spec: BulkInsertSpec) -> None:
        self.context = context
        self.spec = spec

    @in_task
    def __call__(self, batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        token = write_token(ctx.partitionId(), ctx.stageId(), ctx.attemptNumber()) if ctx else write_token(0, 0, 0)
        task = ctx.partitionId() if ctx else 0
        with worker_memory.task(self.context.release_memory):
            helper = BulkInsertWriterHelper(self.context, self.spec, task, token)
            try:
                for batch in batches:
                    helper.write(batch)
                stats = helper.finish()
            except BaseException:
                helper.abort()
                raise
        if stats:
            payloads = [json.dumps(s.to_dict()) for s in stats]
            yield pa.record_batch(
                [pa.array(["stat"] * len(payloads), pa.string()), pa.array(payloads, pa.string())], schema=RESULT_SCHEMA
            )


def file_id_prefix(instant, task):
    """The file id prefix of a bulk insert task: the same for every attempt of the task."""
    return str(uuid.uuid5(_NAMESPACE, f"{instant}/{task}"))


class BulkInsertWriterHelper:
    """The records of one write task: pre-combined, written to base files, their keys kept for the index."""

    def __init__(self, context: BatchContext, spec: BulkInsertSpec, task: int, token: str) -> None:
        self.context = context
        self.spec = spec
        self.files = BaseFiles(context, spec, task, token)
        ordering = context.ordering_field
        self.sort_keys = [(PARTITION, "ascending"), (KEY, "ascending")]
        if spec.event_time and ordering:
            self.sort_keys.append((ordering, "ascending"))
        self.sort_keys.append((SEQ, "ascending"))
        # a key meets the task in one run, but in a partitioned table (in two partitions with the global index; in
        # two runs of one partition path when Spark sorted by the partition fields) or an unsorted input
        keygen = make_key_generator(spec.key_props)
        track = not spec.sorted_input or bool(keygen.partition_fields)
        self.keys = WrittenKeys(spec.global_index, track, ordering, spec.event_time)
        self._key_by = None if spec.keyed else KeyBy(context, spec.key_props)
        self._keygen = keygen
        self._carry = None  # the last run of the input so far (sorted input): its key may go on in the next batch

    def write(self, batch):
        if not batch.num_rows:
            return
        table = pa.Table.from_batches([batch])
        if self._key_by is not None:
            table = self._key_by.key_batch(self._keygen, table)
        if not self.spec.sorted_input:  # pre-combined within the batch; the rest at the end
            table = table.take(pc.sort_indices(table, sort_keys=self.sort_keys))
            self._place(self._winners(table, _run_ends(table)))
            return
        if self._carry is not None:
            table = pa.concat_tables([self._carry, table])
        ends = _run_ends(table)
        last_start = int(ends[-2]) + 1 if len(ends) > 1 else 0
        self._carry = table.slice(last_start)
        if last_start == 0:
            return
        if len(ends) == table.num_rows:  # no key twice: the rows are their own winners (no copy)
            self._place(table.slice(0, last_start))
        else:
            self._place(self._winners(table, ends[:-1]))

    def _winners(self, table, ends):
        """The last row of each run of one key ending at `ends`, its partial-update markers filled from the run."""
        if self.spec.markers:
            return fill_runs(table, ends, self.spec.markers)
        return table.take(pa.array(ends))

    def _place(self, winners):
        """Write the run winners that are records; keep every winner's key (file code, or DELETED)."""
        deletes = winners[DELETE]
        if pc.any(deletes).as_py():
            self.keys.record(winners.filter(deletes), DELETED)
            winners = winners.filter(pc.invert(deletes))
        if not winners.num_rows:
            return
        names, bounds = runs(winners[PARTITION].combine_chunks())
        for i, partition in enumerate(names):
            rows = winners.slice(bounds[i], bounds[i + 1] - bounds[i])
            for code, part in self.files.add(partition, rows):
                self.keys.record(part, code)

    def finish(self):
        """Write what is left, combine the keys met in several runs, save the index state; the write stats."""
        if self._carry is not None:
            carry, self._carry = self._carry, None
            self._place(self._winners(carry, np.array([carry.num_rows - 1])))  # one run: its last row wins
        self.files.check_pending()
        stats = self.files.close_all()
        winners, losers = self.keys.placed()
        stats += self.files.delete_losers(losers, record_keys_of(losers, self.spec.global_index))
        partitions, file_ids = self.files.locations()
        storage, instant = self.context.storage, self.context.instant
        groups = save_index(storage, instant, winners, partitions, file_ids, self.spec.committed)
        if not self.files.pending():  # rolled back while this task wrote: what it wrote after the rollback goes
            logs = [s.path for s in stats[len(self.files.stats) :]]  # the DELETE blocks' new log files
            self.files.remove_written(
                logs
                + [join(marker_dir(instant), marker_name(p, "APPEND")) for p in logs]
                + [f"{index_state.group_dir(kg)}/{instant}.{kind}.arrow" for kg in groups for kind in ("full", "delta")]
            )
            self.files.check_pending()
        return stats

    def abort(self):
        self.files.abort()


def _run_ends(table):
    """Indices of the last row of each run of equal (partition, key) in a table sorted by them."""
    n = table.num_rows
    if n <= 1:
        return np.arange(n)
    keys, parts = table[KEY], table[PARTITION]
    change = pc.or_(
        pc.not_equal(keys.slice(1), keys.slice(0, n - 1)), pc.not_equal(parts.slice(1), parts.slice(0, n - 1))
    )
    return np.flatnonzero(np.append(change.to_numpy(zero_copy_only=False), True))


class _OpenFile:
    """A base file being written: its writer, the rows buffered for its next row group, the rows it holds."""

    __slots__ = (
        "buffered",
        "buffered_bytes",
        "capacity",
        "code",
        "file_id",
        "name",
        "path",
        "rows",
        "started",
        "writer",
        "written",
    )

    def __init__(self, code, file_id, name, path, writer, capacity):
        self.code = code
        self.capacity = capacity  # records the file is cut at
        self.file_id = file_id
        self.name = name
        self.path = path
        self.writer = writer
        self.buffered = []
        self.buffered_bytes = 0
        self.rows = 0  # written and buffered
        self.written = 0
        self.started = time.monotonic()


class BaseFiles:
    """The base files of one bulk insert task: one open file per partition, each cut at its target size."""

    def __init__(self, context: BatchContext, spec: BulkInsertSpec, task: int, token: str) -> None:
        self.context = context
        self.spec = spec
        self.task = task
        self.token = token
        self.prefix = file_id_prefix(context.instant, task)
        self.data_columns = list(context.data_columns)
        avro = with_meta_fields(spec.avro_schema)
        self.avro_json = json.dumps(avro, separators=(",", ":"))
        data = avro_to_arrow_schema(spec.avro_schema)
        self.schema = pa.schema(
            [pa.field(m, pa.string()) for m in META_FIELDS] + [f for f in data if f.name not in META_FIELDS]
        )
        self.open: dict[str, _OpenFile] = {}  # partition -> its open file
        self.opened: list[tuple[str, str, str]] = []  # (partition, file id, base file name) of each file code
        self.partitions: set[str] = set()  # partitions whose metadata file this task made sure of
        self.closed_rows = self.closed_bytes = 0
        self.row_group_bytes = row_group_bytes(spec.task_max_bytes)
        self.buffer_bytes = unsorted_buffer_bytes(spec.task_max_bytes)
        self.stats: list[WriteStat] = []
        self.markers: list[str] = []  # the markers this task created (paths relative to the table root)

    def capacity(self):
        """Records the next file is cut at."""
        if self.closed_rows:
            return max(1, int(self.spec.max_file_size * self.closed_rows / max(1, self.closed_bytes)))
        return self.spec.file_records

    def add(self, partition, rows):
        """Buffer rows of one partition in its open files; returns [(file code, rows)] of where they went."""
        if self.spec.sorted_input:
            for other in [p for p in self.open if p != partition]:
                self._close(other)
        out, start, n = [], 0, rows.num_rows
        while start < n:
            f = self.open.get(partition) or self._new_file(partition)
            take = min(n - start, f.capacity - f.rows)
            part = rows.slice(start, take)
            f.buffered.append(part)
            f.buffered_bytes += part.nbytes
            f.rows += take
            out.append((f.code, part))
            start += take
            if f.rows >= f.capacity:
                self._close(partition)
            elif f.buffered_bytes >= self.row_group_bytes:
                self._flush(f)
        if not self.spec.sorted_input:
            while sum(f.buffered_bytes for f in self.open.values()) > self.buffer_bytes:
                self._flush(max(self.open.values(), key=lambda f: f.buffered_bytes))
        return out

    def pending(self):
        """Whether the instant is still pending (its inflight file is there)."""
        return instant_pending(self.context)

    def check_pending(self):
        """HoodieTimelineError unless the instant is still pending. A task Spark gave up on (its micro-batch failed
        and the driver rolled the instant back, or removed the table the micro-batch created) can run on in its
        Python worker for a while: it stops here, removing what it wrote (`remove_written`), instead of leaving
        files that nothing would remove."""
        if not self.pending():
            self.remove_written()
            raise HoodieTimelineError(
                f"{self.context.storage.uri}: instant {self.context.instant} is no longer pending (its micro-batch "
                "failed and was rolled back); the bulk insert task stops"
            )

    def remove_written(self, extra=()):
        """Delete every file this task wrote for the instant (its base files, their markers, `extra`): called once
        the instant is no longer pending, when the driver's rollback may have listed the instant's files before
        these were written. Files other tasks share (partition metadata) stay, as Hudi's rollback leaves them."""
        for f in self.open.values():
            f.writer.abort()
        self.open = {}
        self.context.storage.delete_many([s.path for s in self.stats] + self.markers + list(extra))

    def _new_file(self, partition):
        check_partition_path(partition)
        self.check_pending()
        storage, instant = self.context.storage, self.context.instant
        if partition not in self.partitions:
            write_partition_metadata(storage, partition, instant)
            self.partitions.add(partition)
        code = len(self.opened)
        file_id = f"{self.prefix}-{code}"
        name = base_file_name(file_id, self.token, instant)
        path = join(partition, name)
        self.markers.append(create_marker(storage, instant, path, "CREATE"))
        self.check_pending()  # the marker is written: a rollback from now on finds it, or this task removes it
        writer = BaseFileWriter(
            storage, path, self.schema, avro_schema_json=self.avro_json, compression=self.spec.parquet_codec
        )
        self.opened.append((partition, file_id, name))
        f = self.open[partition] = _OpenFile(code, file_id, name, path, writer, self.capacity())
        return f

    def _flush(self, f):
        """Write the buffered rows of an open file as a row group."""
        if not f.buffered:
            return
        rows = pa.concat_tables(f.buffered)
        f.buffered, f.buffered_bytes = [], 0
        partition = self.opened[f.code][0]
        table = with_meta_columns(
            rows.select(self.data_columns), rows[KEY], partition, self.context.instant, self.task, f.name, f.written
        )
        del rows
        f.writer.write(table)
        f.written += table.num_rows
        del table
        worker_memory.release()

    def _close(self, partition):
        f = self.open.pop(partition)
        self._flush(f)
        bloom = f.writer.bloom
        size = f.writer.close()
        self.closed_rows += f.written
        # the records' bytes: not the bloom filter in the footer (base64 of its bit vectors, whatever the records)
        self.closed_bytes += max(1, size - len(bloom.rows) * ((bloom.vector_size + 7) // 8) * 4 // 3)
        self.stats.append(
            WriteStat(
                file_id=f.file_id,
                path=f.path,
                prev_commit="null",
                num_writes=f.written,
                num_inserts=f.written,
                total_write_bytes=size,
                file_size_in_bytes=size,
                partition_path=partition,
                runtime_stats={
                    "totalScanTime": 0,
                    "totalUpsertTime": 0,
                    "totalCreateTime": int((time.monotonic() - f.started) * 1000),
                },
            )
        )

    def close_all(self):
        for partition in list(self.open):
            self._close(partition)
        return list(self.stats)

    def abort(self):
        """After a failure: discard the open files; what the task wrote stays for the driver's rollback while the
        instant is pending, and goes now when it no longer is (this task outlived its micro-batch)."""
        for f in self.open.values():
            f.writer.abort()
        self.open = {}
        try:
            if not self.pending():
                self.remove_written()
        except Exception:  # the store is unreachable: the task's own error is the one raised
            pass

    def locations(self):
        """(partition path, file id) of each file code."""
        return [p for p, _f, _n in self.opened], [f for _p, f, _n in self.opened]

    def delete_losers(self, losers, record_keys):
        """A DELETE block (applied by arrival) in each file holding records that lost to a later run of their key;
        returns the log files' write stats."""
        if not losers.num_rows:
            return []
        codes = losers["code"].combine_chunks()
        order = pc.sort_indices(codes)
        codes, record_keys = pc.take(codes, order), pc.take(record_keys, order)
        values, bounds = runs(codes)
        stats = []
        for i, code in enumerate(values):
            partition, file_id, name = self.opened[code]
            keys = record_keys.slice(bounds[i], bounds[i + 1] - bounds[i])
            stat = append_log(
                self.context.storage,
                self.context.instant,
                partition,
                file_id,
                self.context.instant,
                self.spec.avro_schema,
                deletes=(keys, None),
                token=self.token,
                task_id=self.task,
                base_file=name,
                table_version=self.context.table_version,
            )
            if stat is not None:
                stats.append(stat)
        return stats
