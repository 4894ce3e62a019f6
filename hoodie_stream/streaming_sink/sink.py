"""HoodieStreamSink: `df.writeStream.foreachBatch(HoodieStreamSink(path, options))`.

Each micro-batch runs Hudi's Flink write chain as Spark jobs on the executors (records never travel to the
driver): key-by -> shuffle by key group -> BucketAssigner -> shuffle by file group -> StreamWriteFunction; the
driver coordinates one delta commit per micro-batch and makes the result exactly-once across restarts.
"""

import json
import logging
import os
import shutil


from ..bucket_assign.assigner import BucketAssigner
from ..bucket_assign.write_tasks import WritePlan, recent_loads
from ..chain.columns import ASSIGN_TASK, DELETE, FILE_ID, KEY, KEY_GROUP, KIND, PARTITION, SEQ, WRITE_TASK
from ..chain.key_groups import assign_task_expr, key_group_expr
from ..bucket_assign.small_files import average_record_size, recent_write_commits, small_file_profile
from ..checkpoints import recovery
from ..checkpoints.batch_checkpoint import last_batch_id, writer_identifier
from ..compaction.plan import pending_file_groups
from ..compaction.service import TableServices
from ..format.avro_schema import META_FIELDS, avro_to_arrow_schema
from ..errors import HoodieConfigError, HoodieError, HoodieTableError
from ..format.merge import merge_mode
from ..format.writer import HoodieWriter, table_avro_schema
from . import coordinator
from ..options import parse_options
from ..storage import storage_for
from .key_by import KeyBy
from .write_function import RESULT_SCHEMA, StreamWriteFunction

log = logging.getLogger("hoodie_stream")


class HoodieStreamSink:
    """A picklable foreachBatch function writing each micro-batch as one Hudi delta commit."""

    def __init__(self, path, options=None, **shortcuts):
        self.storage = storage_for(path)
        self.path = self.storage.uri
        self.options = parse_options(self.path, options, **shortcuts)
        self.last_result = None
        self._services = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["last_result"] = None
        state["_services"] = None
        return state

    @property
    def services(self):
        """The table services (compaction, cleaning) this sink drives on the driver."""
        if self._services is None:
            self._services = TableServices(self.storage, self.options.compaction)
        return self._services

    def close(self, wait=True):
        """Stop the background compaction thread (waiting for the running step when `wait`)."""
        if self._services is not None:
            self._services.stop(wait)

    # -- the micro-batch -----------------------------------------------------------------------------------
    def __call__(self, df, batch_id):
        with self.services.ingesting():  # async compaction starts no new work while a micro-batch runs
            self._write_batch(df, batch_id)
        if self.last_result is not None and self.last_result.instant:
            try:
                self.services.after_commit(df.sparkSession)
            except Exception:  # the batch is committed; a failed table service is retried after the next one
                log.exception("table services after %s failed", self.last_result.instant)

    def _write_batch(self, df, batch_id):
        self.last_result = None
        spark = df.sparkSession
        query_id = spark.sparkContext.getLocalProperty("sql.streaming.queryId")
        identifier = writer_identifier(self.options.checkpoint_identifier, query_id)
        self._check_columns(df)
        batch_arrow = _arrow_schema(df.schema)
        writer = self._open_or_create(batch_arrow)
        # a delete batch needs only the key (and partition) columns: nothing of it is written as data
        new_avro = None if self.options.operation == "delete" else self._check_schema(writer, batch_arrow)
        if not self.services.started:
            recovery.remove_leftovers(writer.storage)  # first batch of this process: nothing else writes yet
        recovery.rollback_pending_writes(writer.storage, writer.timeline)
        self.services.start()
        done = last_batch_id(writer.timeline, identifier)
        if done is not None and batch_id <= done:
            log.info("batch %s of %s already committed; skipped", batch_id, identifier)
            self.last_result = coordinator.BatchResult(skipped=True)
            return
        tasks = self._tasks(spark)
        if not recovery.index_is_current(writer.storage, writer.timeline):
            recovery.rebuild_index(spark, writer.storage, writer.timeline, self.options.key_groups,
                                   self.options.global_index, tasks[0])
        txn = writer.start(operation=self.options.operation.upper())
        if new_avro is not None:
            txn.avro_schema = new_avro
            txn.arrow_schema = avro_to_arrow_schema(new_avro)
        try:
            rows = self._run_chain(df, writer, txn, tasks)
            stats, flushes = coordinator.parse_task_results(rows)
        except BaseException as exc:
            coordinator.abort(txn)
            mine = coordinator.task_error(exc)
            if mine is not None:
                raise mine from None
            raise
        if not stats:
            coordinator.discard_empty(txn)
            self.last_result = coordinator.BatchResult(flushes=flushes)
            return
        try:
            coordinator.commit(txn, stats, identifier, batch_id)
        except BaseException:
            coordinator.abort(txn)
            raise
        self.last_result = coordinator.BatchResult(txn.instant, stats, flushes)

    # -- checks --------------------------------------------------------------------------------------------
    def _check_columns(self, df):
        names = set(df.columns)
        o = self.options
        wanted = [("record key", f) for f in o.record_key_fields] + [("partition path", f) for f in o.partition_fields]
        if o.precombine_field and o.operation != "delete":
            wanted.append(("precombine (ordering)", o.precombine_field))
        for role, field in wanted:
            if field not in names:
                raise HoodieConfigError(f"{role} field {field!r} is not a column of the micro-batch "
                                        f"(columns: {sorted(names)})")
        meta = [c for c in df.columns if c in META_FIELDS]
        if meta:
            raise HoodieConfigError(f"the micro-batch carries Hudi meta column(s) {meta}; drop them before writing")

    def _open_or_create(self, batch_arrow):
        hoodie = os.path.join(self.path, ".hoodie")
        o = self.options
        if _half_created(hoodie):
            log.warning("%s: removing a .hoodie directory whose creation was interrupted", hoodie)
            shutil.rmtree(hoodie)
        if not os.path.isdir(hoodie):
            if os.path.isdir(self.path) and [n for n in os.listdir(self.path) if not n.startswith(".")]:
                raise HoodieTableError(self.path, "the directory is not empty and is not a Hudi table "
                                                  "(no .hoodie/hoodie.properties)")
            if o.operation == "delete":
                raise HoodieTableError(self.path, "cannot delete from a table that does not exist yet")
            HoodieWriter.create(
                self.path, table_name=o.table_name, record_key_fields=o.record_key_fields, schema=batch_arrow,
                precombine_field=o.precombine_field, partition_fields=o.partition_fields, hive_style=o.hive_style,
                url_encode=o.url_encode, keygen_class=o.raw.get("hoodie.datasource.write.keygenerator.class"),
                payload_class=o.payload_class, extra=_keygen_extra(o.raw))
        writer = HoodieWriter(self.path)
        cfg = writer.config
        if not cfg.populate_meta_fields:
            raise HoodieTableError(self.path, "the table was written with hoodie.populate.meta.fields=false; the "
                                              "sink writes meta fields and refuses to mix them in")
        if cfg.table_type != "MERGE_ON_READ":
            raise HoodieTableError(self.path, f"table type is {cfg.table_type}; the sink writes MERGE_ON_READ tables")
        if list(cfg.record_key_fields) != list(o.record_key_fields):
            raise HoodieConfigError(f"option 'hoodie.datasource.write.recordkey.field' is {o.record_key_fields} but "
                                    f"the table at {self.path} has record key {cfg.record_key_fields}")
        if list(cfg.partition_fields or []) != list(o.partition_fields):
            raise HoodieConfigError(f"option 'hoodie.datasource.write.partitionpath.field' is {o.partition_fields} "
                                    f"but the table at {self.path} is partitioned by {cfg.partition_fields}")
        return writer

    def _check_schema(self, writer, batch_arrow):
        """None when the batch has the table's schema; the evolved Avro schema when it adds nullable columns at
        the end; HoodieError for anything else."""
        table_avro = writer.avro_schema()
        table_arrow = avro_to_arrow_schema(table_avro)
        batch_avro = table_avro_schema(writer.config.table_name, batch_arrow)
        normalized = avro_to_arrow_schema(batch_avro)
        for i, f in enumerate(table_arrow):
            if i >= len(normalized) or normalized[i].name != f.name:
                raise HoodieError(
                    f"schema of the micro-batch is incompatible with the table at {self.path}: column {f.name!r} "
                    f"is missing or out of place (table columns {table_arrow.names}, batch {normalized.names})")
            if not normalized[i].type.equals(f.type):
                raise HoodieError(
                    f"schema of the micro-batch is incompatible with the table at {self.path}: column {f.name!r} "
                    f"is {normalized[i].type} in the batch but {f.type} in the table")
        extra = list(normalized)[len(table_arrow):]
        if not extra:
            return None
        for f in extra:
            if not batch_arrow.field(f.name).nullable:
                raise HoodieError(f"new column {f.name!r} must be nullable to evolve the table at {self.path}")
        return batch_avro

    def _tasks(self, spark):
        default = spark.sparkContext.defaultParallelism
        o = self.options
        return (o.bucket_assign_tasks or default, o.write_tasks or default)

    # -- the chain -----------------------------------------------------------------------------------------
    def _run_chain(self, df, writer, txn, tasks):
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        o = self.options
        assign_tasks, write_tasks = tasks
        data_columns = list(df.columns)
        mode, ordering = merge_mode(writer.config.props)
        timeline = writer.timeline
        committed = {i.timestamp for i in timeline.commits_timeline()}
        recent = recent_write_commits(timeline)
        record_size = average_record_size(recent, o.record_size_estimate)
        small = small_file_profile(writer.storage, timeline, o.max_file_size, o.log_to_parquet_ratio, record_size,
                                   assign_tasks)

        keyed_schema = T.StructType(df.schema.fields + [
            T.StructField(SEQ, T.LongType()), T.StructField(KEY, T.StringType()),
            T.StructField(PARTITION, T.StringType()), T.StructField(DELETE, T.BooleanType())])
        keyed = df.mapInArrow(
            KeyBy(dict(writer.config.props), o.precombine_field, o.operation, o.release_memory), keyed_schema)
        keyed = keyed.withColumns({KEY_GROUP: F.expr(key_group_expr(o.key_groups)),
                                   ASSIGN_TASK: F.expr(assign_task_expr(o.key_groups, assign_tasks))})
        routed_schema = T.StructType(df.schema.fields + [
            T.StructField(KEY, T.StringType()), T.StructField(PARTITION, T.StringType()),
            T.StructField(FILE_ID, T.StringType()), T.StructField(KIND, T.ByteType()),
            T.StructField(SEQ, T.LongType()), T.StructField(WRITE_TASK, T.IntegerType())])
        assigner = BucketAssigner(writer.storage, txn.instant, committed, o.global_index, o.operation, ordering,
                                  mode == "EVENT_TIME_ORDERING", small, o.max_file_size / record_size, data_columns,
                                  assign_tasks, o.release_memory, WritePlan(write_tasks, recent_loads(recent)))
        # sorted by key group within each task, so a bucket assigner holds one key group's rows at a time
        routed = (keyed.repartition(assign_tasks, ASSIGN_TASK).sortWithinPartitions(KEY_GROUP)
                  .mapInArrow(assigner, routed_schema))
        write_fn = StreamWriteFunction(writer.storage, txn.instant, txn.avro_schema, data_columns, ordering,
                                       o.batch_size_bytes, o.task_max_size_bytes, pending_file_groups(timeline),
                                       o.release_memory)
        # each file group to its write task (write_tasks.py: balanced by recent load, one task per file group)
        results = routed.repartition(write_tasks, WRITE_TASK).mapInArrow(
            write_fn, T.StructType([T.StructField(n, T.StringType()) for n in RESULT_SCHEMA.names]))
        return [(r["kind"], r["payload"]) for r in results.collect()]


def _half_created(hoodie):
    """A .hoodie left by a table creation that died before hoodie.properties was written: no properties, no
    instant, no data file anywhere in the table."""
    if not os.path.isdir(hoodie):
        return False
    if any(os.path.exists(os.path.join(hoodie, n)) for n in ("hoodie.properties", "hoodie.properties.backup")):
        return False
    if any(not n.startswith(".") and os.path.isfile(os.path.join(hoodie, n)) for n in os.listdir(hoodie)):
        return False
    base = os.path.dirname(hoodie)
    return not [n for n in os.listdir(base) if not n.startswith(".")]


def _arrow_schema(spark_schema):
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone="UTC")


def _keygen_extra(raw):
    return {k: v for k, v in raw.items() if k.startswith(("hoodie.keygen.timebased.", "hoodie.write.complex."))}


def sink_result_json(result):
    return json.dumps({"instant": result.instant, "writes": result.num_writes, "deletes": result.num_deletes,
                       "flushes": result.flushes})
