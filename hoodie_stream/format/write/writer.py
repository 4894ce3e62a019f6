"""Low-level writer: create a table, then write instants one at a time.

    writer = HoodieWriter.create(path, table_name="t", record_key_fields=["id"], schema=arrow_schema, ...)
    txn = writer.start()                         # requested + inflight deltacommit
    stat = txn.append_log(partition, file_id, base_instant, records)   # a new log file version
    txn.commit()                                 # completed deltacommit with write stats and schema
    # or txn.rollback()

The write handles (write_handles.py) can also run elsewhere (Spark tasks) and hand their WriteStats to
`Transaction.add_stats` before the commit.
"""

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from ...errors import HoodieError, HoodieTimelineError
from ...storage import Storage, storage_for
from ..avro.schema import arrow_to_avro_schema, avro_to_arrow_schema
from ..base_file.parquet import DEFAULT_COMPRESSION, parquet_compression
from ..cdc.logger import LOGGED_MODES, ChangeLogger
from ..cdc.query import table_logging_mode
from ..file_group.file_names import new_file_id
from ..record.keygen import make_key_generator
from ..record.partition_path import check_partition_path
from ..table.config import TableConfig, timeline_layout
from ..table.markers import delete_markers
from ..table.partition_metadata import write_partition_metadata
from ..timeline.active_timeline import Timeline
from ..timeline.commit_metadata import CommitMetadata, WriteStat
from .rollback import rollback_if_pending
from .write_handles import append_log, create_base

# deletes of append_log: (record keys, ordering values or None)
DeleteArg = tuple[pa.Array | pa.ChunkedArray, pa.Array | pa.ChunkedArray | None]
DEFAULT_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
COMMIT_TIME_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
KEYGENS = {
    "simple": "org.apache.hudi.keygen.SimpleKeyGenerator",
    "complex": "org.apache.hudi.keygen.ComplexKeyGenerator",
    "nonpartitioned": "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
    "timestamp": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
}


def avro_name(table_name):
    """A table name as Hudi puts it into Avro names (HoodieAvroUtils.sanitizeName): an invalid first character and
    every character outside [A-Za-z0-9_] become `__` (`e2e-orders` -> `e2e__orders`)."""
    if not re.match(r"[A-Za-z_]", table_name[:1]):
        table_name = "__" + table_name[1:]
    return re.sub(r"[^A-Za-z0-9_]", "__", table_name)


def table_avro_schema(table_name, arrow_schema):
    """The data schema as Hudi records it: `<table>_record` in namespace `hoodie.<table>` (the table name made a
    valid Avro name), nullable fields."""
    name = avro_name(table_name)
    return arrow_to_avro_schema(arrow_schema, f"{name}_record", f"hoodie.{name}")


class HoodieWriter:
    """Writes instants into one table (single writer)."""

    def __init__(
        self,
        path: str | Storage,
        storage_options: Mapping[str, Any] | None = None,
        parquet_codec: str = DEFAULT_COMPRESSION,
    ) -> None:
        """`path`: the table's base path (local path or URI, see `storage_for`) or a `Storage` rooted at it.
        `parquet_codec`: the compression of the base files it writes (hoodie.parquet.compression.codec)."""
        parquet_compression(parquet_codec)  # an unknown codec is refused before anything is read or written
        self.parquet_codec = parquet_codec
        self.storage = storage_for(path, storage_options)
        self.path = self.storage.uri
        self.config = TableConfig.load(self.storage)
        self.config.check_writable()
        self.timeline = Timeline(self.storage, timeline_layout(self.config.props))
        self.key_generator = make_key_generator(self.config.props)

    @classmethod
    def create(
        cls,
        path: str | Storage,
        *,
        table_name: str,
        record_key_fields: Sequence[str],
        schema: pa.Schema | str | dict[str, Any],
        precombine_field: str | None = None,
        partition_fields: Sequence[str] = (),
        hive_style: bool = False,
        url_encode: bool = False,
        keygen_class: str | None = None,
        payload_class: str | None = None,
        extra: Mapping[str, str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        parquet_codec: str = DEFAULT_COMPRESSION,
        table_version: int = 6,
    ) -> "HoodieWriter":
        """Create a MERGE_ON_READ table (hoodie.properties and the .hoodie layout) and return its writer.
        `table_version`: 6 (Hudi 0.14/0.15, the default), 8 (Hudi 1.0) or 9 (Hudi 1.1, 1.2)."""
        parquet_compression(parquet_codec)
        if isinstance(schema, pa.Schema):
            avro = table_avro_schema(table_name, schema)
        else:
            avro = json.loads(schema) if isinstance(schema, str) else schema
        if keygen_class is None:
            if not partition_fields:
                keygen_class = KEYGENS["nonpartitioned"] if len(record_key_fields) == 1 else KEYGENS["complex"]
            elif len(record_key_fields) == 1 and len(partition_fields) == 1:
                keygen_class = KEYGENS["simple"]
            else:
                keygen_class = KEYGENS["complex"]
        payload_given = payload_class is not None
        if payload_class is None:
            payload_class = DEFAULT_PAYLOAD if precombine_field else COMMIT_TIME_PAYLOAD
        storage = storage_for(path, storage_options)
        TableConfig.create(
            storage,
            table_name=table_name,
            record_key_fields=list(record_key_fields),
            precombine_field=precombine_field,
            partition_fields=list(partition_fields),
            keygen_class=keygen_class,
            hive_style=hive_style,
            url_encode=url_encode,
            payload_class=payload_class,
            schema_avro=json.dumps(avro, separators=(",", ":")),
            extra=extra,
            version=table_version,
            payload_given=payload_given,
        )
        return cls(storage, parquet_codec=parquet_codec)

    def avro_schema(self) -> dict[str, Any]:
        """The current table schema (latest commit's, else the create schema)."""
        return json.loads(self.timeline.latest_schema() or self.config.create_schema)

    def start(
        self, action: str = "deltacommit", operation: str = "UPSERT", instant_time: str | None = None
    ) -> "Transaction":
        self.timeline.reload()
        pending = [i for i in self.timeline.pending(["deltacommit", "commit"])]
        if pending:
            raise HoodieTimelineError(
                f"{self.path}: instant {pending[0].timestamp} is still pending; roll it back before writing"
            )
        return Transaction(self, instant_time, action, operation)


class Transaction:
    """One instant being written: requested -> inflight on creation, then commit() or rollback()."""

    def __init__(self, writer, instant, action, operation):
        self.writer = writer
        self.storage = writer.storage
        self.instant = instant
        self.action = action
        self.operation = operation
        self.stats = []
        self.avro_schema = writer.avro_schema()
        self.arrow_schema = avro_to_arrow_schema(self.avro_schema)
        self._partitions = set()
        self._changes = None  # the `.cdc` files' writer (a table logging its changes: format/cdc/logger.py)
        timeline = writer.timeline
        if instant is None:
            self.instant = instant = timeline.create_new(action)
        else:
            timeline.create_requested(instant, action)
        inflight = CommitMetadata({}, False, {}, operation, None)
        timeline.transition_to_inflight(instant, action, inflight)

    def _prepare(self, records, keys):
        table = records
        if keys is None:
            keys = self.writer.key_generator.record_keys(table)
        columns = []
        for f in self.arrow_schema:
            if f.name not in table.column_names:
                raise HoodieError(f"records lack column {f.name!r} of the table schema")
            col = table[f.name]
            columns.append(col if col.type == f.type else col.cast(f.type))
        return pa.Table.from_arrays(columns, schema=self.arrow_schema), keys

    def _partition(self, partition):
        if partition not in self._partitions:
            check_partition_path(partition)
            write_partition_metadata(self.storage, partition, self.instant)
            self._partitions.add(partition)

    def append_log(
        self,
        partition: str,
        file_id: str,
        base_instant: str,
        records: pa.Table | None = None,
        keys: pa.Array | pa.ChunkedArray | None = None,
        deletes: DeleteArg | None = None,
        num_inserts: int = 0,
        new_file_group: bool = False,
        base_file: str = "",
        task_id: int = 0,
    ) -> WriteStat | None:
        """Append a new log file version to a file slice. Returns its WriteStat (None when nothing to write)."""
        self._partition(partition)
        if records is not None:
            records, keys = self._prepare(records, keys)
        stat = append_log(
            self.storage,
            self.instant,
            partition,
            file_id,
            base_instant,
            self.avro_schema,
            records=records,
            keys=keys,
            deletes=deletes,
            task_id=task_id,
            base_file=base_file,
            num_inserts=num_inserts,
            new_file_group=new_file_group,
            table_version=self.writer.config.version,
        )
        if stat is not None:
            self.stats.append(stat)  # first: a failure to log its changes leaves the log file named in the stats
            if self.action == "deltacommit" and table_logging_mode(self.writer.config.props) in LOGGED_MODES:
                if self._changes is None:
                    self._changes = ChangeLogger(self.storage, self.instant, self.avro_schema)
                self._changes.log(stat)
        return stat

    def insert_log_only(
        self, partition: str, records: pa.Table, keys: pa.Array | pa.ChunkedArray | None = None, task_id: int = 0
    ) -> WriteStat | None:
        """Open a new log-only file group (base instant = this instant), as Hudi's Flink writer does."""
        file_id = new_file_id()
        return self.append_log(
            partition,
            file_id,
            self.instant,
            records,
            keys,
            num_inserts=records.num_rows,
            new_file_group=True,
            task_id=task_id,
        )

    def write_base(
        self,
        partition: str,
        records: pa.Table,
        keys: pa.Array | pa.ChunkedArray | None = None,
        file_id: str | None = None,
        task_id: int = 0,
    ) -> WriteStat:
        """Write a new file group with a base parquet file."""
        self._partition(partition)
        records, keys = self._prepare(records, keys)
        stat = create_base(
            self.storage,
            self.instant,
            partition,
            file_id or new_file_id(),
            self.avro_schema,
            records,
            keys,
            task_id=task_id,
            compression=self.writer.parquet_codec,
        )
        self.stats.append(stat)
        return stat

    def add_stats(self, stats: Iterable[WriteStat | None]) -> None:
        self.stats.extend(s for s in stats if s is not None)

    def metadata(
        self, extra_metadata: Mapping[str, str] | None = None, replaced: dict[str, list[str]] | None = None
    ) -> CommitMetadata:
        by_partition: dict[str, list[WriteStat]] = {}
        for stat in self.stats:
            by_partition.setdefault(stat.partition_path, []).append(stat)
        extra = {"schema": json.dumps(self.avro_schema, separators=(",", ":"))}
        extra.update(extra_metadata or {})
        return CommitMetadata(by_partition, False, extra, self.operation, replaced)

    def commit(
        self, extra_metadata: Mapping[str, str] | None = None, replaced: dict[str, list[str]] | None = None
    ) -> str:
        """Complete the instant atomically, then drop its markers.

        `replaced` ({partition: [file id]}) is for replacecommit instants: those file groups disappear from reads.
        """
        if replaced is not None and self.action != "replacecommit":
            raise HoodieError("only a replacecommit instant can replace file groups")
        meta = self.metadata(extra_metadata, replaced)
        self.writer.timeline.complete(self.instant, self.action, meta)
        delete_markers(self.storage, self.instant)
        self.writer.timeline.reload()
        return self.instant

    def rollback(self) -> None:
        """Roll the instant back (nothing happens when it completed already)."""
        rollback_if_pending(self.storage, self.writer.timeline, self.instant)
