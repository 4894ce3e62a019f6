"""`spark.read.format("hoodie")`: the Python data source and its batch reader.

The source opens the table on the driver to answer `schema()` (the table's Arrow schema as of the query: meta
columns first, `HoodieTable.arrow_schema`); the reader plans one input partition per file slice (`file_splits`),
pruning partitions with the filters Spark pushes down (`partition_pruning`, when
`spark.sql.python.filterPushdown.enabled` is on), and each task merges its slice with the project's own reader and
yields Arrow record batches. Every pushed filter is handed back to Spark, which applies it to the rows read: the
result is the same with pushdown on or off, pruning only reads less.

The source does not write (`df.write.format("hoodie")`, `df.writeStream.format("hoodie")`): `writer` and
`streamWriter` refuse with WRITE_REFUSED. Spark's Python data source writer calls `write` once per input partition
as the DataFrame arrives, and its `PythonWrite` asks for no distribution (it is no `RequiresDistributionAndOrdering`):
the records of one key group, and of one file group, would be written by several tasks at once, with no shuffle to
the bucket assigner and its keyed index state between them. `writer`, `commit` and `abort` run in Python processes
the JVM starts, which have no SparkSession: they cannot run the chain's jobs themselves either. `hoodie_stream.write`
and HoodieStreamSink run the chain.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from ..errors import HoodieConfigError, HoodieError, HoodieUsageError
from ..format.avro.schema import META_FIELDS
from ..format.cdc.query import changes_schema, check_cdc_table
from ..format.hoodie_table import HoodieTable
from ..format.read.time_travel import check_as_of, check_incremental, check_incremental_window
from ..format.timeline.instant import parse_instant_time
from ..storage.options import S3A_PREFIX, s3a_settings
from .change_splits import ChangeSplit, change_splits, read_change_split
from .file_splits import FileSplit, plan_incremental, plan_snapshot, read_split, worker_table
from .partition_pruning import PartitionPruner
from .read_options import AS_OF_INSTANT, BEGIN_INSTANTTIME, END_INSTANTTIME, ReadOptions, parse_options, table_storage
from .spark_arrow import record_batches, spark_schema

FORMAT = "hoodie"
WRITE_REFUSED = (
    'format "hoodie" reads only: Spark\'s Python data source writer writes each input partition as it comes and '
    "cannot ask for the shuffles Hudi's write chain needs (records by key group to the bucket assigner and its "
    "index state, then by file group to one write task each), so the same key or file group would be written by "
    "several tasks at once. Write a DataFrame with hoodie_stream.write(df, path, options) (one commit: upsert, "
    "insert, delete, bulk_insert) and a stream with df.writeStream.foreachBatch(HoodieStreamSink(path, options))"
)


@dataclass(frozen=True)
class Query:
    """A batch query with its instants parsed against the table's timeline timezone."""

    options: ReadOptions
    as_of: str | None = None
    start: str | None = None
    end: str | None = None

    @classmethod
    def of(cls, options: ReadOptions, table: HoodieTable) -> Query:
        zone = table.config.timeline_timezone

        def instant(value: str | None, name: str, as_text: bool = True) -> str | None:
            return None if value is None else parse_instant_time(value, name, zone, as_text)

        begin = options.begin
        if begin is not None and begin.strip("0") == "":  # "0", "000": from the first commit, as Hudi reads it
            begin = None
        query = cls(
            options,
            instant(options.as_of, AS_OF_INSTANT, as_text=False),
            instant(begin, BEGIN_INSTANTTIME),
            instant(options.end, END_INSTANTTIME),
        )
        if query.as_of is not None:
            check_as_of(table.timeline, query.as_of, AS_OF_INSTANT)
        if options.incremental_format == "cdc":
            check_cdc_table(table)
        if options.query_type == "incremental":
            check_incremental(table)
            check_incremental_window(table.timeline, query.start, query.end, END_INSTANTTIME)
        return query

    @property
    def schema_instant(self) -> str | None:
        """The instant whose schema the query reads with (HoodieTable.read: as_of, or the window's end)."""
        return self.end if self.options.query_type == "incremental" else self.as_of


def table_arrow_schema(table: HoodieTable, as_of: str | None, options: ReadOptions | None = None) -> pa.Schema:
    """The Arrow schema HoodieTable.read returns: meta columns first, none for tables written without them; a
    changelog query's (op, ts_ms, before, after)."""
    schema = table.arrow_schema(as_of)
    if options is not None and options.incremental_format == "cdc":
        return changes_schema(schema, options.cdc_flat)
    if table.meta_fields:
        return schema
    return pa.schema([f for f in schema if f.name not in META_FIELDS])


def open_table(options: ReadOptions) -> HoodieTable:
    return HoodieTable(table_storage(options))


class HoodieDataSource(DataSource):
    """The "hoodie" format: batch (`spark.read`) and streaming (`spark.readStream`) reads of a Hudi v6 table."""

    # the registering session's `spark.hadoop.fs.s3a.*` settings as storage options (`register`)
    session_storage_options: ClassVar[dict[str, str]] = {}

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def read_options(self, streaming: bool | None = None) -> ReadOptions:
        options = parse_options(self.options, streaming)
        if self.session_storage_options:
            options = replace(options, session_storage_options=dict(self.session_storage_options))
        return options

    def schema(self) -> StructType:
        options = self.read_options()  # unknown options fail here, when the DataFrame is made
        table = open_table(options)
        return spark_schema(table_arrow_schema(table, Query.of(options, table).schema_instant, options))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = self.read_options(streaming=False)
        table = open_table(options)
        query = Query.of(options, table)
        return HoodieBatchReader(query, table.arrow_schema(query.schema_instant), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream_reader import HoodieStreamReader

        return HoodieStreamReader(self.read_options(streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        raise HoodieUsageError(WRITE_REFUSED)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        raise HoodieUsageError(WRITE_REFUSED)


class HoodieBatchReader(DataSourceReader):
    """Plans the splits of one batch query (on the driver) and reads them (in the tasks)."""

    def __init__(self, query: Query, merge_schema: pa.Schema, schema: StructType) -> None:
        self.query = query
        self.merge_schema = merge_schema  # HoodieTable.arrow_schema: slices merge into it, meta columns first
        self.schema = schema  # Spark's: the batches' schema
        self.filters: list[Filter] = []
        self.pushFilters = _PushFilters(self)  # type: ignore[method-assign]  # see _PushFilters

    def partitions(self) -> Sequence[InputPartition]:
        return self.plan()

    def plan(self) -> Sequence[InputPartition]:
        """The input partitions: one per file slice (or run of base-file row groups) of the partitions kept."""
        options = self.query.options
        table = open_table(options)
        pruner = partition_pruner(table, self.merge_schema, self.filters)
        if options.incremental_format == "cdc":
            if options.begin is None:
                raise HoodieConfigError(
                    f"a changelog (cdc) query needs {BEGIN_INSTANTTIME} (the instant to read after)"
                )
            return change_splits(table, self.query.start, self.query.end)
        if options.query_type == "incremental":
            if options.begin is None:
                raise HoodieConfigError(f"an incremental query needs {BEGIN_INSTANTTIME} (the instant to read after)")
            return plan_incremental(table, self.query.start, self.query.end, pruner, options.max_split_bytes)
        read_optimized = options.query_type == "read_optimized"
        return plan_snapshot(table, self.query.as_of, read_optimized, pruner, options.max_split_bytes)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        options = self.query.options
        if isinstance(partition, ChangeSplit):
            yield from record_batches(
                read_change_split(worker_table(options), partition, self.merge_schema, options.cdc_flat), self.schema
            )
            return
        if not isinstance(partition, FileSplit):  # Spark's placeholder when no split was planned
            return
        table = worker_table(options)
        yield from record_batches(read_split(table, partition, self.merge_schema), self.schema)


class _PushFilters:
    """The reader's pushFilters: keeps the filters to prune partitions with and hands all of them back to Spark,
    which applies them exactly.

    Spark (4.1+) refuses a reader whose class overrides pushFilters when spark.sql.python.filterPushdown.enabled is
    off (its default), so that no source silently loses a pushdown it relies on. Here pushdown only spares reading
    partitions, and the results are the same without it: the method is set on the instance and presents itself
    as the base class's (`__func__`, what Spark's check compares), so the reader works with the setting off and
    prunes with it on."""

    __func__ = staticmethod(DataSourceReader.pushFilters)

    def __init__(self, reader: HoodieBatchReader) -> None:
        self.reader = reader

    def __call__(self, filters: list[Filter]) -> list[Filter]:
        self.reader.filters = list(filters)
        return filters


def partition_pruner(table: HoodieTable, schema: pa.Schema, filters: Sequence[Filter]) -> PartitionPruner | None:
    """A pruner for the filters on the table's partition columns, or None when there is nothing to prune by."""
    if not filters or not table.config.partition_fields:
        return None
    try:
        keygen = table.keygen()
    except HoodieError:
        return None  # a key generator this project does not model: read every partition
    pruner = PartitionPruner(keygen, schema, filters)
    return pruner if pruner.active else None


def register(spark) -> None:
    """Register the "hoodie" format with a SparkSession: `spark.read.format("hoodie").load(path)` and
    `spark.readStream.format("hoodie").load(path)`. An `s3://` table's storage options are the reader options given
    (`aws_*`, client keys), else the environment's, else the session's `spark.hadoop.fs.s3a.*` settings, as
    HoodieStreamSink takes them (Spark's own discovery of the format, with no register call, has no session at
    hand: there the settings are not used)."""
    spark.dataSource.register(session_source(spark))


def session_source(spark) -> type[HoodieDataSource]:
    """HoodieDataSource, or a subclass carrying the session's s3a settings: Spark pickles the registered class (by
    value, as it is no module attribute) to the Python workers that plan and read, where no session is at hand."""
    settings = session_s3a_settings(spark)
    if not settings:
        return HoodieDataSource

    class SessionHoodieDataSource(HoodieDataSource):
        session_storage_options = settings

    return SessionHoodieDataSource


def session_s3a_settings(spark) -> dict[str, str]:
    """Storage options from the session's `spark.hadoop.fs.s3a.*` settings ({} for a session without a SparkContext:
    Spark Connect)."""
    try:
        conf = {k: v for k, v in spark.sparkContext.getConf().getAll() if k.startswith(S3A_PREFIX)}
    except Exception:
        return {}
    return s3a_settings(conf)


__all__ = ["FORMAT", "WRITE_REFUSED", "HoodieBatchReader", "HoodieDataSource", "Query", "register", "session_source"]
