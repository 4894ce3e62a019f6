"""Write one data file of a file group for an instant: a new log file version, or a base file.

These run wherever the data is (a Spark task, a test, a compaction worker) and return the WriteStat the
coordinator records in the commit. A marker is created before the file, so a failed instant's files can be
found and removed.
"""

import json
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...storage import join, storage_for
from ..avro.encoder import encode_records
from ..avro.schema import META_FIELDS, with_meta_fields
from ..base_file.parquet import DEFAULT_COMPRESSION, write_base_file
from ..file_group.file_names import base_file_name, log_file_name, parse_log_file_name, write_token
from ..log_file.data_block import avro_data_header, avro_data_records
from ..log_file.delete_block import delete_content, delete_content_arrow
from ..log_file.log_block import BlockType, HeaderKey, LogBlock
from ..log_file.writer import write_log_file
from ..record.partition_path import check_partition_path
from ..table.markers import create_marker
from ..timeline.commit_metadata import WriteStat
from ..util.chunked_take import RowTaker
from ..util.string_buffers import constant_strings

COMMIT_TIME, SEQNO, RECORD_KEY, PARTITION_PATH, FILE_NAME = META_FIELDS
ENCODE_CHUNK_BYTES = 1024 * 1024  # Arrow bytes of data encoded at a time when a log block is written
_KEY_COLUMN = "\x00key"  # the record keys beside the records while they are taken in write order


def with_meta_columns(data, keys, partition, instant, task_id, file_name, seq_start=0):
    """Prepend the five meta columns to `data` (record keys given as an Arrow string array)."""
    n = data.num_rows
    seq = pc.cast(pa.array(np.arange(seq_start, seq_start + n, dtype=np.int64)), pa.string())
    prefix = pa.scalar(f"{instant}_{task_id}_")
    meta = {
        COMMIT_TIME: constant_strings(instant, n),
        SEQNO: pc.binary_join_element_wise(prefix, seq, ""),
        RECORD_KEY: pc.cast(keys, pa.string()),
        PARTITION_PATH: constant_strings(partition, n),
        FILE_NAME: constant_strings(file_name, n),
    }
    data = data.drop_columns([c for c in META_FIELDS if c in data.column_names])
    arrays = list(meta.values()) + list(data.columns)
    names = list(meta) + data.column_names
    return pa.Table.from_arrays(arrays, names=names)


def _slice_logs(storage, partition, file_id, base_instant):
    """The log files of one file slice in a partition listing: [(version, name)]."""
    found = []
    for info in storage.list(partition):
        parsed = parse_log_file_name(info.name)
        if parsed and parsed.file_id == file_id and parsed.base_instant == base_instant:
            found.append((parsed.version, info.name))
    return found


def next_log_version(storage, partition, file_id, base_instant):
    """1 + the greatest version among the existing log files of (file_id, base_instant)."""
    return max((v for v, _name in _slice_logs(storage_for(storage), partition, file_id, base_instant)), default=0) + 1


def slice_log_files(storage, partition, file_id, base_instant):
    """Sorted names of the log files of a file slice."""
    return sorted(name for _v, name in _slice_logs(storage_for(storage), partition, file_id, base_instant))


def append_log(
    storage,
    instant,
    partition,
    file_id,
    base_instant,
    avro_schema,
    records=None,
    keys=None,
    deletes=None,
    token=None,
    task_id=0,
    base_file="",
    num_inserts=0,
    new_file_group=False,
    order=None,
    table_version=6,
):
    """Write a new log file version of a file slice with an AVRO_DATA block and/or a DELETE block.

    The log file is named as the table version names it (`log_file_instant`): by the slice's base instant on version
    6, by the writing delta commit on 8 and 9 (Hudi 1.x's `deltaCommitTime`, each commit writing files of its own,
    sliced by its completion time). On 8 and 9 the marker is a CREATE marker and the stat names only this file, with
    the delta commit as its previous commit, as Hudi 1.x's append handle records them.

    records: data columns in table-schema order, keys: their record keys (Arrow strings).
    deletes: (keys, ordering values or None) to delete in this partition: Arrow arrays (encoded vectorized; a null
    ordering value means none) or Python lists.
    order: optional row indices giving the order in which the records are written (taken a chunk at a time).
    Returns the HoodieDeltaWriteStat of the file.
    """
    started = time.monotonic()
    storage = storage_for(storage)
    check_partition_path(partition)
    token = token or write_token(task_id, 0, 0)
    per_commit = int(table_version) >= 8
    name_instant = log_file_instant(instant, base_instant, table_version)
    version = next_log_version(storage, partition, file_id, name_instant)
    name = log_file_name(file_id, name_instant, version, token)
    header_schema = with_meta_fields(avro_schema)
    schema_json = _dumps(header_schema)
    blocks = []
    n_records = 0
    if records is not None and records.num_rows:
        n_records = records.num_rows
        header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: schema_json}
        content = _data_content(records, keys, order, partition, instant, task_id, file_id, header_schema)
        blocks.append(LogBlock(BlockType.AVRO_DATA, header, content, {}))
    n_deletes = 0
    if deletes is not None and len(deletes[0]):
        n_deletes = len(deletes[0])
        header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: schema_json}
        for del_keys, ordering in _delete_groups(*deletes):
            if isinstance(del_keys, (pa.Array, pa.ChunkedArray)):
                content = delete_content_arrow(del_keys, partition, ordering)
            else:
                content = delete_content(list(del_keys), [partition] * len(del_keys), ordering)
            blocks.append(LogBlock(BlockType.DELETE, header, content, {}))
    if not blocks:
        return None
    path = join(partition, name)
    create_marker(storage, instant, path, log_marker_type(table_version))
    size = write_log_file(storage, path, blocks)
    if per_commit:
        prev_commit, base_file, logs = instant, "", [name]
    else:
        prev_commit = "null" if new_file_group else base_instant
        logs = slice_log_files(storage, partition, file_id, base_instant)
    return WriteStat(
        file_id=file_id,
        path=path,
        prev_commit=prev_commit,
        num_writes=n_records,
        num_update_writes=n_records - num_inserts,
        num_inserts=num_inserts,
        num_deletes=n_deletes,
        total_write_bytes=size,
        file_size_in_bytes=size,
        partition_path=partition,
        total_log_blocks=len(blocks),
        runtime_stats={
            "totalScanTime": 0,
            "totalUpsertTime": int((time.monotonic() - started) * 1000),
            "totalCreateTime": 0,
        },
        is_delta=True,
        log_version=version,
        log_offset=0,
        base_file=base_file or "",
        log_files=logs,
    )


def log_file_instant(instant, base_instant, table_version=6):
    """The instant a log file written by delta commit `instant` into a slice based at `base_instant` is named by: the
    base instant on table version 6, the delta commit itself on 8 and 9."""
    return instant if int(table_version) >= 8 else base_instant


def log_marker_type(table_version=6):
    """The marker type of a log file: APPEND on table version 6 (a log file takes blocks of several commits), CREATE
    on 8 and 9 (each delta commit creates its own files)."""
    return "CREATE" if int(table_version) >= 8 else "APPEND"


def _delete_groups(keys, ordering):
    """The deletes as one DELETE block's (keys, ordering values), or two when some have an ordering value and some
    none: those without (applied by arrival, IntWrapper(0)) first, then the others, so that no block mixes ordering
    value types (hudi-rs refuses such a block; Hudi writes one type per block)."""
    if ordering is None:
        return [(keys, ordering)]
    if not isinstance(ordering, (pa.Array, pa.ChunkedArray)):  # Python lists
        none = [i for i, v in enumerate(ordering) if v is None]
        if len(none) in (0, len(ordering)):
            return [(keys, ordering)]
        rest = [i for i, v in enumerate(ordering) if v is not None]
        return [([keys[i] for i in none], None), ([keys[i] for i in rest], [ordering[i] for i in rest])]
    if ordering.null_count in (0, len(ordering)):
        return [(keys, ordering)]
    natural = ordering.is_null()
    return [
        (pc.filter(keys, natural), None),
        (pc.filter(keys, pc.invert(natural)), pc.filter(ordering, pc.invert(natural))),
    ]


def _data_content(records, keys, order, partition, instant, task_id, file_id, header_schema):
    """AVRO_DATA content, encoded a chunk of rows at a time while the block is written: a flush holds one
    chunk's memory (ENCODE_CHUNK_BYTES of rows), never the encoded bucket."""
    n_records = records.num_rows
    step = max(1, int(ENCODE_CHUNK_BYTES * n_records / max(1, records.nbytes)))
    if order is not None:
        taker = RowTaker(records.append_column(_KEY_COLUMN, keys))
    yield avro_data_header(n_records)
    for start in range(0, n_records, step):
        if order is None:
            part, part_keys = records.slice(start, step), keys.slice(start, step)
        else:
            taken = taker.take(order.slice(start, step))
            part, part_keys = taken.drop_columns([_KEY_COLUMN]), taken[_KEY_COLUMN]
            del taken
        table = with_meta_columns(part, part_keys, partition, instant, task_id, file_id, seq_start=start)
        del part, part_keys
        buffer, offsets = encode_records(table, header_schema)
        del table
        yield avro_data_records(buffer, offsets)


def create_base(
    storage,
    instant,
    partition,
    file_id,
    avro_schema,
    records,
    keys,
    token=None,
    task_id=0,
    prev_commit="null",
    io_type="CREATE",
    compression=DEFAULT_COMPRESSION,
):
    """Write a base parquet file (meta columns, bloom filter and key range footers) compressed with the Hudi parquet
    codec `compression`. Returns its WriteStat."""
    started = time.monotonic()
    storage = storage_for(storage)
    check_partition_path(partition)
    token = token or write_token(task_id, 0, 0)
    name = base_file_name(file_id, token, instant)
    path = join(partition, name)
    table = with_meta_columns(records, keys, partition, instant, task_id, name)
    create_marker(storage, instant, path, io_type)
    size = write_base_file(
        storage, path, table, avro_schema_json=_dumps(with_meta_fields(avro_schema)), compression=compression
    )
    n = records.num_rows
    return WriteStat(
        file_id=file_id,
        path=path,
        prev_commit=prev_commit,
        num_writes=n,
        num_update_writes=0,
        num_inserts=n,
        num_deletes=0,
        total_write_bytes=size,
        file_size_in_bytes=size,
        partition_path=partition,
        runtime_stats={
            "totalScanTime": 0,
            "totalUpsertTime": 0,
            "totalCreateTime": int((time.monotonic() - started) * 1000),
        },
    )


def _dumps(schema):
    return json.dumps(schema, separators=(",", ":"))
