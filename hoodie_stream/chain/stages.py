"""What a micro-batch hands the operators of its write chain.

The driver builds these once per micro-batch; Spark pickles them into every task of the stage, so they hold plain
data (and the table's `Storage`, which is picklable and carries where the executors keep their local copies of a
remote table's index state and spool uploads, and how much they keep: its `local_cache`, set by the sink from
`hoodie.stream.index.cache.dir` and `.max.mb`). `BatchContext` is what the stages share; `AssignSpec` and
`WriteSpec` are what only the bucket-assign and the write stage use; a bulk insert runs key-by (unless Spark
routes the records itself) and one write stage, with `BulkInsertSpec`:

    KeyBy(context, key_props)
    BucketAssigner(context, AssignSpec(...))
    StreamWriteFunction(context, WriteSpec(...))
    BulkInsertWriteFunction(context, BulkInsertSpec(...))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from ..storage import Storage

# bucket assign: {task index: {partition: [(file id, base instant, base file name or "", capacity in records)]}}
SmallFiles = Mapping[int, Mapping[str, Sequence[tuple[str, str, str, int]]]]


class FileGroupRouting(Protocol):
    """Which write task writes a file group (`bucket_assign.write_tasks.WritePlan`)."""

    def tags(self, file_ids: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The int32 partition tag of each file id: Spark's repartition by it sends the row to its write task."""
        ...


@dataclass(frozen=True)
class BatchContext:
    """One micro-batch as every stage of the chain sees it."""

    storage: Storage  # the table, with the executors' local cache settings (Storage.local_cache)
    instant: str  # the delta commit the micro-batch writes
    operation: str  # upsert, insert, bulk_insert or delete
    ordering_field: str | None  # the table's ordering (precombine) field, None without one
    data_columns: tuple[str, ...]  # the micro-batch's columns, as written to the table
    release_memory: bool = True  # hoodie.stream.worker.memory.release (chain/worker_memory.py)
    # hoodie.table.version: how log files are named (format/write/write_handles.py), where the timeline is
    table_version: int = 6
    timeline_dir: str = ".hoodie"  # the timeline's directory relative to the root (`table.config.timeline_layout`)


@dataclass(frozen=True)
class AssignSpec:
    """What the bucket-assign stage alone needs."""

    committed: AbstractSet[str]  # committed instants: the index state written by others does not count
    global_index: bool  # index.global.enabled: a key is unique across partitions
    event_time: bool  # EVENT_TIME_ORDERING: the greatest ordering value wins, else the latest arrival
    small_files: SmallFiles  # the small file groups each task packs inserts into
    new_file_capacity: int  # records a new file group is opened for (at least 1)
    num_tasks: int  # bucket-assign tasks of the stage
    write_plan: FileGroupRouting  # the write task of each file group
    # hoodie.write.partial.update.mode=IGNORE_MARKERS: (column, marker) of the string, binary and array columns
    # whose marker value keeps the value stored for the key (bucket_assign/markers.py)
    markers: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "new_file_capacity", max(1, int(self.new_file_capacity)))


@dataclass(frozen=True)
class WriteSpec:
    """What the write stage alone needs."""

    avro_schema: dict[str, Any] | None  # the commit's Avro schema
    batch_size_bytes: int  # write.batch.size: a bucket's buffer is flushed past it
    task_max_bytes: int  # write.task.max.size: the largest bucket is flushed when the task's buffers pass it
    # {(partition, file id): compaction instant} of file groups in a pending compaction
    pending_compactions: Mapping[tuple[str, str], str] = field(default_factory=dict)
    # the table logs its changes at write time (CDC enabled, supplemental logging DATA_BEFORE_AFTER): each log file
    # written gets a `.cdc` file beside it (format/cdc/logger.py)
    cdc_logging: bool = False


@dataclass(frozen=True)
class BulkInsertSpec:
    """What the bulk insert write stage needs (`streaming_sink/bulk_insert_write.py`)."""

    avro_schema: dict[str, Any]  # the commit's Avro schema
    file_records: int  # records a base file is cut at until the task has closed a file: max size / record size
    max_file_size: int  # bytes a base file is cut at (hoodie.parquet.max.file.size / write.parquet.max.file.size)
    parquet_codec: str  # hoodie.parquet.compression.codec
    global_index: bool  # index.global.enabled: a record key is unique across partitions
    event_time: bool  # EVENT_TIME_ORDERING: the greatest ordering value wins, else the latest arrival
    sorted_input: bool  # write.bulk_insert.sort_input: records arrive sorted by partition, key, ordering, arrival
    keyed: bool  # records carry key, partition path and delete flag (the key-by stage ran before the shuffle)
    key_props: Mapping[str, str]  # the table's hoodie.properties: its key generator (when not keyed)
    # committed instants of a table that has data (its index state is updated), None for an empty table (the
    # bulk insert writes each key group's full state)
    committed: AbstractSet[str] | None = None
    # (column, marker) of hoodie.write.partial.update.mode=IGNORE_MARKERS: a marker in a key's winner takes the
    # key's latest earlier value in the micro-batch (AssignSpec.markers)
    markers: tuple[tuple[str, Any], ...] = ()
    # write.task.max.size: what the task's buffers hold at most (the rows gathered for a row group, the row group
    # being written and its encoding: row groups of a quarter of it, up to ROW_GROUP_BYTES)
    task_max_bytes: int = 1024 * 1024 * 1024

    def __post_init__(self) -> None:
        object.__setattr__(self, "file_records", max(1, int(self.file_records)))
