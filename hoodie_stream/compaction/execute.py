"""Compaction execute operator: one Spark task per plan operation merges a file slice into a new base file.

The merge follows the reader's rules (vectorized, `format.merge`). Records keep their meta columns (commit time,
sequence number, key, partition path); `_hoodie_file_name` becomes the new file's name. Memory per task is bounded
by `compaction.max_memory`, as Hudi bounds its merge by the log records it holds: the base file streams through a
batch at a time (its rows no log touches written as they come, a few batches in the writer at most), and a slice
whose log records (with the base rows they touch) would not fit is merged in key ranges: its log records are
decoded once, a chunk at a time, and spilled to local disk split by range (Arrow IPC files in the temporary
directory, as Hudi spills the records past its memory), then each range's records are merged with the base rows of
the range, written as successive row groups of one file. A slice merged in one pass reads its log files' keys first,
writes the base rows no log touches while the log records are decoded, merges the rest, and starts the new file's
bloom filter from the replaced file's.
"""

import contextlib
import json
import math
import os
import threading
import time
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

# pyarrow.parquet is imported by the functions that use it: the write chain's workers never need to load it
import pyarrow.compute as pc

from ..chain import worker_memory
from ..errors import HoodieFormatError, in_task
from ..format.avro.schema import with_meta_fields
from ..format.base_file.bloom_filter import TYPE_CODE, BloomFilter
from ..format.base_file.parquet import (
    BLOOM_FILTER_KEY,
    BLOOM_TYPE_CODE_KEY,
    DEFAULT_COMPRESSION,
    BaseFileWriter,
    parquet_file,
    read_base_file,
)
from ..format.file_group.file_names import base_file_name, parse_log_file_name, write_token
from ..format.hoodie_table import HoodieTable
from ..format.log_file.log_block import ROLLBACK_COMMAND, BlockType, HeaderKey
from ..format.log_file.reader import read_log_file
from ..format.log_file.scanner import block_keys, block_versions, iter_block_versions
from ..format.record.merge import COMMIT_TIME_ORDERING, KEY, MergeMode, Version, merge_mode, merge_pieces, split_base
from ..format.table.markers import create_marker
from ..format.timeline.active_timeline import CommittedInstants
from ..format.timeline.commit_metadata import WriteStat
from ..format.util.string_buffers import constant_strings
from ..storage import Storage, join, storage_for
from ..storage.spill import Spill
from .operation import CompactionOperation

FILE_NAME = "_hoodie_file_name"
# decoded Arrow records take about this many times their size in a log file / in a parquet file
LOG_EXPANSION = 2.0
# the base file streams through in batches of this many rows, its untouched rows handed to the writer (a row group
# each), and this many chunks may wait for it: the writer encodes one while the next batch is read and split
BASE_CHUNK_ROWS = 131_072
BASE_CHUNKS_IN_FLIGHT = 2
# a slice merged in key ranges decodes its log blocks this many records at a time, spilling each range's share
SPILL_ROWS = 131_072


def _log_reader(storage, hold):
    """read(path): the blocks of a log file; with `hold`, each file is read once and its blocks kept for the next
    read (a slice merged in one key range reads its log files for the rolled-back instants, then for the records)."""
    held = {}

    def read(path):
        if path in held:
            return held[path]
        blocks = read_log_file(storage, path)
        if hold:
            held[path] = blocks
        return blocks

    return read


def _rolled_back_targets(read, log_paths, counts):
    targets = set()
    for path in log_paths:
        for block in read(path):
            if (
                block.block_type == BlockType.COMMAND
                and counts(block.header.get(HeaderKey.INSTANT_TIME))
                and block.header.get(HeaderKey.COMMAND_BLOCK_TYPE) == ROLLBACK_COMMAND
            ):
                targets.add(block.header.get(HeaderKey.TARGET_INSTANT_TIME))
    return targets


def _counted_blocks(blocks, counts, cancelled):
    """The data and delete blocks of a log file that count: a completed instant before the compaction's, not rolled
    back."""
    return [
        b
        for b in blocks
        if b.block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE)
        and counts(b.header.get(HeaderKey.INSTANT_TIME))
        and b.header.get(HeaderKey.INSTANT_TIME) not in cancelled
    ]


def _spill_ranges(read, log_paths, counts, cancelled, ordering, ordering_type, cuts, spill):
    """One pass over the log files: each block's records, decoded a chunk at a time, split by key range (range r
    holds the keys k with cuts[r-1] <= k < cuts[r]) into a spill file per block and range (`storage.spill`).
    Returns each range's pieces in log order: [(spill file, is_delete, columns of a block of partial updates)]."""
    pieces: list[list[tuple[str, bool, frozenset[str] | None]]] = [[] for _ in range(len(cuts) + 1)]
    cut_values = [pa.scalar(c, pa.string()) for c in cuts]
    for path in log_paths:
        for b, block in enumerate(_counted_blocks(read(path), counts, cancelled)):
            writers = None
            for version in iter_block_versions([block], ordering, ordering_type, path, SPILL_ROWS):
                table = version.table
                keys = table[KEY].cast(pa.string())
                ids = np.zeros(table.num_rows, np.int64)
                for cut in cut_values:
                    ids += np.asarray(pc.greater_equal(keys, cut), dtype=bool)
                order = np.argsort(ids, kind="stable")
                table = table.take(pa.array(order))
                bounds = np.searchsorted(ids[order], np.arange(len(cuts) + 2))
                if writers is None:
                    writers = []
                    for r in range(len(cuts) + 1):
                        name = f"{len(pieces[r])}-{r}-{b}.arrow"
                        writers.append(spill.writer(name, table.schema))
                        pieces[r].append((name, version.is_delete, version.columns))
                for r, writer in enumerate(writers):
                    writer.write_table(table.slice(bounds[r], bounds[r + 1] - bounds[r]))
                del table, keys, ids, order
            for writer in writers or ():
                writer.close()
    return pieces


def _stream_base(storage, path, key_filter, log_keys, schema, write_untouched, mode=None):
    """The base file a batch at a time, filtered to a key range (key_filter None: all): its rows whose key no log
    holds (`log_keys`) go to `write_untouched` batch by batch (aligned to `schema`, deleted rows dropped), its other
    rows are returned as a Version, to merge with the log records. Only a batch and the touched rows are held."""
    touched_parts = []
    with parquet_file(storage, path) as pf:
        empty = pf.schema_arrow.empty_table()
        for batch in pf.iter_batches(batch_size=BASE_CHUNK_ROWS):
            chunk = pa.Table.from_batches([batch])
            del batch
            if key_filter is not None:
                chunk = key_filter(chunk)
            untouched, touched = split_base(Version(chunk), pc.is_in(chunk[KEY], value_set=log_keys), schema, mode)
            del chunk
            if untouched.num_rows:
                write_untouched(untouched)
            if touched.table.num_rows:
                touched_parts.append(touched.table)
            del untouched, touched
    return Version(pa.concat_tables(touched_parts) if touched_parts else empty, base=True)


def _key_sample(storage, base_path, read, log_paths, counts, cancelled):
    """Sorted unique record keys of the slice (the key column only; a log record decoded up to its key)."""
    keys = []
    if base_path:
        keys.append(read_base_file(storage, base_path, columns=[KEY])[KEY].combine_chunks())
    for path in log_paths:
        keys.extend(block_keys(_counted_blocks(read(path), counts, cancelled), path))
    if not keys:
        return pa.array([], pa.string())
    return pc.unique(pa.chunked_array(keys, pa.string()).combine_chunks()).sort()


def _ranges(sample, k):
    if k <= 1 or len(sample) < 2:
        return [(None, None)]
    cuts = sorted(set(sample[int(i)].as_py() for i in np.linspace(0, len(sample) - 1, k + 1)[1:-1]))
    bounds = [None] + cuts + [None]
    return list(zip(bounds[:-1], bounds[1:]))


def _range_filter(lo, hi):
    """A function keeping the rows of a table whose key is in [lo, hi) (None: unbounded); None for everything."""
    if lo is None and hi is None:
        return None

    def keep(table):
        keys = table[KEY]
        mask = None
        if lo is not None:
            mask = pc.greater_equal(keys, lo)
        if hi is not None:
            upper = pc.less(keys, hi)
            mask = upper if mask is None else pc.and_(mask, upper)
        return table.filter(mask)

    return keep


# a filter taken over holds the keys its files lost to deletes too: past this many keys per record of the file it
# is built again from the file's keys alone, so deleted keys never pile up in it compaction after compaction
STALE_KEYS_RATIO = 1.1


def _bloom_of(storage, path):
    """The bloom filter of the base file at `path` to start the new file's from: when it is of the type this project
    writes and holds few keys the file no longer has (else None)."""
    with parquet_file(storage, path) as pf:
        rows = pf.metadata.num_rows
        raw = pf.metadata.metadata or {}
    footer = {k.decode("utf-8"): v.decode("utf-8") for k, v in raw.items()}
    if footer.get(BLOOM_TYPE_CODE_KEY) != TYPE_CODE or not footer.get(BLOOM_FILTER_KEY):
        return None
    try:
        bloom = BloomFilter.deserialize(footer[BLOOM_FILTER_KEY])
    except (HoodieFormatError, ValueError):
        return None
    return bloom if bloom.count <= rows * STALE_KEYS_RATIO else None


def _lacking(keys, known):
    """The keys not in `known`."""
    return keys.filter(pc.invert(pc.is_in(keys, value_set=known))) if len(known) else keys


def estimate_memory(storage: Storage, op: CompactionOperation) -> float:
    """Bytes a merge of the operation holds at once: its log records decoded, and as many base rows (the ones they
    touch, at most one per log record). The base file streams through a batch at a time and is not counted."""
    return 2 * LOG_EXPANSION * sum(storage.size(join(op.partition, name)) for name in op.log_files)


def compact_operation(
    storage: str | Storage,
    instant: str,
    op: CompactionOperation,
    committed: AbstractSet[str],
    max_memory_bytes: int,
    token: str,
    compression: str = DEFAULT_COMPRESSION,
) -> tuple[WriteStat, int]:
    """Merge one operation's slice into a new base file named with the compaction instant, compressed with the Hudi
    parquet codec `compression` (hoodie.parquet.compression.codec). Returns its WriteStat and the number of key
    ranges merged."""
    started = time.monotonic()
    storage = storage_for(storage)
    table = HoodieTable(storage)
    schema = table.arrow_schema()
    avro = with_meta_fields(table.avro_schema())
    mode, ordering = merge_mode(table.config.props, merge_properties=True)
    if ordering and ordering not in schema.names:
        mode, ordering = (
            mode.with_mode(COMMIT_TIME_ORDERING) if isinstance(mode, MergeMode) else COMMIT_TIME_ORDERING,
            None,
        )
    ordering_type = schema.field(ordering).type if ordering else None
    partition = op.partition
    file_id = op.file_id
    base_path = join(partition, op.base_file) if op.base_file else None
    log_names = list(op.log_files)
    log_paths = [join(partition, n) for n in log_names]
    for name in log_names:
        if parse_log_file_name(name) is None:
            raise HoodieFormatError(f"compaction {instant}: {name!r} is not a log file name")

    committed = CommittedInstants.of(committed)  # blocks of archived instants count

    def counts(t):
        return t in committed and t < instant

    k = max(1, math.ceil(estimate_memory(storage, op) / max_memory_bytes))
    read = _log_reader(storage, hold=k == 1)
    cancelled = _rolled_back_targets(read, log_paths, counts)
    ranges = (
        _ranges(_key_sample(storage, base_path, read, log_paths, counts, cancelled), k) if k > 1 else [(None, None)]
    )
    name = base_file_name(file_id, token, instant)
    rel = join(partition, name)
    create_marker(storage, instant, rel, "CREATE")
    n_ranges = len(ranges)
    # one key range: the new file holds the keys of the base file it replaces (less a few deleted ones), so it
    # starts from that file's bloom filter
    seed = _bloom_of(storage, base_path) if n_ranges == 1 and base_path else None
    seeded = seed is not None
    writer = BaseFileWriter(
        storage,
        rel,
        schema,
        avro_schema_json=json.dumps(avro, separators=(",", ":")),
        compression=compression,
        bloom=seed,
        in_flight=BASE_CHUNKS_IN_FLIGHT,
    )
    rows = log_records = 0

    def write(merged, new_keys=None):
        """Write merged rows; `new_keys(keys)`: those of their keys the bloom filter lacks (None: all)."""
        nonlocal rows
        if merged.num_rows:
            name_column = constant_strings(name, merged.num_rows)
            bloom_keys = None if new_keys is None else new_keys(merged[KEY].combine_chunks())
            writer.write(merged.set_column(merged.column_names.index(FILE_NAME), FILE_NAME, name_column), bloom_keys)
            rows += merged.num_rows

    try:
        with contextlib.ExitStack() as stack:
            reading = stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="hoodie-compaction-base"))
            if n_ranges == 1 and base_path:
                # the log files' keys first (only the columns before the key are decoded); then the base file
                # streams through a batch at a time, its rows no log touches going to the writer while the log
                # records are decoded in a thread, and its touched rows kept to merge with them
                blocks = [(p, _counted_blocks(read(p), counts, cancelled)) for p in log_paths]
                keys = [k for p, bs in blocks for k in block_keys(bs, p)]
                log_keys = pc.unique(pa.chunked_array(keys, pa.string()).combine_chunks())
                del keys
                decoding = reading.submit(
                    lambda: [v for p, bs in blocks for v in block_versions(bs, ordering, ordering_type, p)]
                )
                # with the replaced file's bloom filter taken over, the untouched rows' keys are not added
                untouched_keys = (lambda keys: keys.slice(0, 0)) if seeded else None
                touched = _stream_base(
                    storage, base_path, None, log_keys, schema, lambda t: write(t, untouched_keys), mode
                )
                del log_keys
                base_keys = touched.table[KEY].combine_chunks()
                logs = decoding.result()
                del blocks, decoding
                log_records = sum(v.table.num_rows for v in logs)
                for merged in merge_pieces([touched] + logs, schema, mode, ordering):
                    write(merged, (lambda keys: _lacking(keys, base_keys)) if seeded else None)
                    del merged
            else:
                if n_ranges > 1:  # the log records split by key range in one pass, spilled to local disk
                    spill = stack.enter_context(Spill("hoodie-compaction-"))
                    cuts = [hi for _lo, hi in ranges[:-1]]
                    pieces = _spill_ranges(read, log_paths, counts, cancelled, ordering, ordering_type, cuts, spill)
                    per_range: Iterator[list[Version]] = (
                        [Version(spill.take(name), is_delete, columns) for name, is_delete, columns in range_pieces]
                        for range_pieces in pieces
                    )
                else:
                    blocks = [(p, _counted_blocks(read(p), counts, cancelled)) for p in log_paths]
                    per_range = iter([[v for p, bs in blocks for v in block_versions(bs, ordering, ordering_type, p)]])
                for (lo, hi), versions in zip(ranges, per_range):
                    log_records += sum(v.table.num_rows for v in versions)
                    if base_path:  # the range's base rows stream through as in one pass
                        in_logs = [c for v in versions for c in v.table[KEY].cast(pa.string()).chunks]
                        log_keys = pc.unique(pa.chunked_array(in_logs, pa.string()).combine_chunks())
                        keep = _range_filter(lo, hi)
                        versions.insert(0, _stream_base(storage, base_path, keep, log_keys, schema, write, mode))
                        del in_logs, log_keys
                    for merged in merge_pieces(versions, schema, mode, ordering):
                        write(merged)
                        del merged
                    del versions
        size = writer.close()
    except BaseException:
        writer.abort()
        raise
    log_size = sum(storage.size(p) for p in log_paths)
    return WriteStat(
        file_id=file_id,
        path=rel,
        prev_commit=op.base_instant or "null",
        num_writes=rows,
        num_update_writes=0,
        num_inserts=0,
        num_deletes=0,
        total_write_bytes=size,
        file_size_in_bytes=size,
        partition_path=partition,
        total_log_records=log_records,
        total_log_files_compacted=len(log_paths),
        total_log_size_compacted=log_size,
        total_updated_records_compacted=log_records,
        runtime_stats={
            "totalScanTime": 0,
            "totalUpsertTime": 0,
            "totalCreateTime": int((time.monotonic() - started) * 1000),
        },
    ), n_ranges


def run_niced(nice, fn, *args):
    """fn(*args) in a thread whose CPU priority is lowered by `nice` (Linux sets niceness per thread); plainly
    where that is not possible. Exceptions propagate."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return fn(*args)
    box = {}

    def work():
        try:
            tid = threading.get_native_id()  # a new thread starts at its creator's niceness: lowered from there
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
        except OSError:
            pass
        try:
            box["result"] = fn(*args)
        except BaseException as exc:  # re-raised in the task's thread
            box["error"] = exc

    thread = threading.Thread(target=work, name="hoodie-compaction-merge")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


class CompactTask:
    """mapInArrow function: plan operations (JSON of `CompactionOperation.to_avro()`) in, write stats (JSON) out;
    one operation per task. `compression`: the Hudi parquet codec of the base files (hoodie.parquet.compression.codec).
    """

    def __init__(
        self,
        storage: Storage,
        instant: str,
        committed: AbstractSet[str],
        max_memory_bytes: int,
        nice: int = 0,
        compression: str = DEFAULT_COMPRESSION,
        release_memory: bool = True,
    ) -> None:
        self.storage = storage
        self.instant = instant
        self.committed = committed
        self.max_memory_bytes = max_memory_bytes
        self.nice = nice
        self.compression = compression
        self.release_memory = release_memory  # the allocators as the write chain's (chain/worker_memory.py)

    @in_task
    def __call__(self, batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        out = []
        with worker_memory.task(self.release_memory):
            for batch in batches:
                for op_json in batch.column(0).to_pylist():
                    token = write_token(ctx.partitionId(), ctx.stageId(), ctx.attemptNumber()) if ctx else "0-0-0"
                    stat, ranges = run_niced(
                        self.nice,
                        compact_operation,
                        self.storage,
                        self.instant,
                        CompactionOperation.from_avro(json.loads(op_json)),
                        self.committed,
                        self.max_memory_bytes,
                        token,
                        self.compression,
                    )
                    out.append(json.dumps(dict(stat.to_dict(), __ranges=ranges)))
        yield pa.record_batch([pa.array(out, pa.string())], names=["stat"])
