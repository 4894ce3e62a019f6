"""HoodieStreamSink: `df.writeStream.foreachBatch(HoodieStreamSink(path, options))`.

Each micro-batch runs Hudi's Flink write chain as Spark jobs on the executors (records never travel to the
driver): key-by -> shuffle by key group -> BucketAssigner -> shuffle by file group -> StreamWriteFunction; the
driver coordinates one delta commit per micro-batch and makes the result exactly-once across restarts. The first
micro-batch into a table without data (and every micro-batch with operation bulk_insert) is bulk inserted instead:
one shuffle, base files and the index state in one pass (`bulk_insert.py`). `write_once` writes a DataFrame outside
any streaming query the same way, as one commit with no batch id (`batch_write.py`, `hoodie_stream.write`).
"""

import dataclasses
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..bucket_assign.assigner import BucketAssigner
from ..bucket_assign.markers import batch_markers
from ..bucket_assign.small_files import average_record_size, recent_write_commits, small_file_profile
from ..bucket_assign.write_tasks import WritePlan, recent_loads
from ..chain.columns import ASSIGN_TASK, FILE_ID, KEY, KEY_GROUP, KIND, PARTITION, SEQ, WRITE_TASK
from ..chain.job_tags import tagged_jobs, wait_for_tasks
from ..chain.key_groups import assign_task_expr, key_group_expr
from ..chain.scheduler_pools import WRITE_POOL, in_pool
from ..chain.sql_keys import quoted
from ..chain.stages import AssignSpec, BatchContext, WriteSpec
from ..checkpoints import index_state, recovery
from ..checkpoints.batch_checkpoint import last_batch_id, writer_identifier
from ..compaction.plan import pending_file_groups
from ..compaction.service import TableServices
from ..errors import HoodieConfigError, HoodieError, HoodieTableError, HoodieUnplannedInputError
from ..format.avro.schema import META_FIELDS, avro_to_arrow_schema, decimal_widens
from ..format.cdc.logger import LOGGED_MODES
from ..format.cdc.query import CDC_ENABLED, LOGGING_MODE, table_logging_mode
from ..format.record.merge import merge_mode
from ..format.table.config import TableConfig
from ..format.table.lock import TableLease, query_lease
from ..format.table.metadata_table import remove_metadata_table
from ..format.timeline.active_timeline import Timeline
from ..format.write.writer import HoodieWriter, table_avro_schema
from ..options import parse_options
from ..storage import Storage, storage_for
from ..storage.local_cache import LocalCache
from ..storage.options import S3A_PREFIX, s3a_settings
from . import coordinator
from .batch_metrics import BatchMetrics, log_batch
from .bulk_insert import run_bulk_insert
from .key_by import KeyBy, keyed_schema
from .stage_times import ChainJobs
from .table_upgrade import upgrade_to_asked
from .write_function import RESULT_SCHEMA, StreamWriteFunction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("hoodie_stream")


class HoodieStreamSink:
    """A picklable foreachBatch function writing each micro-batch as one Hudi delta commit."""

    def __init__(
        self,
        path: str | Storage,
        options: Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        **shortcuts: Any,
    ) -> None:
        """`path`: the table's base path or URI (`s3://`, `gs://`, `abfss://`, `file://`, a local path) or a
        Storage; `options`: Hudi-named write options; `storage_options`: credentials and endpoint of an object
        store (hudi-rs / delta-rs key names), else the environment, else the Spark session's `fs.s3a` settings."""
        self.storage = storage_for(path, storage_options, _spark_s3a_settings(path))
        self.path = self.storage.uri
        self.options = parse_options(self.path, options, **shortcuts)
        # how the per-batch log line names the table (a DebeziumSink puts the topic in front)
        self.log_name = f"table {self.options.table_name!r} at {self.path}"
        # where the executors keep local copies of a remote table's index state and spool uploads (every task
        # gets the table's storage with it: the chain's stages, the index rebuild, compaction)
        o = self.options
        self.storage = self.storage.with_local_cache(LocalCache(o.index_cache_dir, o.index_cache_max_bytes))
        self.last_result = None
        self._services = None
        self._lease: TableLease | None = None
        self._query = ""  # the streaming query this sink holds the lease for
        self._listener = None
        self._created = None  # what the table root held before this micro-batch created the table
        self._version_checked = False  # the table's properties checked (a version this project does not write refused)
        self._once: tuple[str, bool] | None = None  # (query id, whether its trigger runs once)
        self._bulk_warned = False  # the warning of a bulk insert into a table holding data was given
        self._metrics: BatchMetrics | None = None  # one row per micro-batch (metrics())
        self._seconds: dict[str, float] = {}  # the running micro-batch's stages (batch_metrics.STAGES)
        self._mark = 0.0
        self._bulk_batch = False
        self._chain_jobs: ChainJobs | None = None  # the Spark jobs of the running micro-batch's chain

    def __getstate__(self):
        state = dict(self.__dict__)
        state["last_result"] = None
        state["_services"] = None
        state["_lease"] = None
        state["_query"] = ""
        state["_listener"] = None
        state["_metrics"] = None
        state["_chain_jobs"] = None
        return state

    def __repr__(self) -> str:  # no storage option: they hold secrets
        return f"HoodieStreamSink({self.path!r}, table={self.options.table_name!r})"

    @property
    def services(self):
        """The table services (compaction, cleaning) this sink drives on the driver."""
        if self._services is None:
            self._services = TableServices(
                self.storage, self.options.compaction, lease=self.lease, release_memory=self.options.release_memory
            )
        return self._services

    @property
    def lease(self) -> TableLease:
        """The table's writer lease (see `_hold_for_query`)."""
        if self._lease is None:
            self._lease = TableLease(self.storage, self.options.lock)
        return self._lease

    def metrics(self) -> pa.Table:
        """One row per micro-batch this sink object handled: rows in, records inserted / updated / deleted, bytes
        and files written, flushes by cause, seconds per stage, pending compactions, the source's lag (columns:
        `streaming_sink.batch_metrics`)."""
        return self._batch_metrics().table()

    def _batch_metrics(self) -> BatchMetrics:
        if self._metrics is None:
            self._metrics = BatchMetrics()
        return self._metrics

    def _lap(self, stage):
        """Count the time since the last lap to `stage` of the running micro-batch."""
        now = time.monotonic()
        self._seconds[stage] = self._seconds.get(stage, 0.0) + now - self._mark
        self._mark = now

    def _record_batch(self, batch_id):
        """The metrics row of the micro-batch just handled, and its log line (a batch write: its log line only)."""
        result = self.last_result
        if result is None:
            return
        if batch_id is None:
            if result.instant and self.options.log_batches:
                log.info("%s: batch write committed as %r", self.log_name, result)
            return
        try:
            pending = len(Timeline(self.storage).pending(["compaction"]))
        except HoodieError:  # the timeline cannot be read now: the backlog is not known
            pending = None
        row = self._batch_metrics().record(
            batch_id, result, self._seconds, pending, self._bulk_batch, self._chain_jobs if result.instant else None
        )
        if result.instant and self.options.log_batches:
            log_batch(log, row, self.log_name)

    def close(self, wait: bool = True) -> None:
        """Stop the background compaction thread (waiting for the running step when `wait`) and give back the
        lease held for the streaming query."""
        if self._services is not None:
            self._services.stop(wait)
            self._services = None
        if self._query and self._lease is not None:
            self._query = ""
            self._lease.release()

    # -- the micro-batch -----------------------------------------------------------------------------------
    def __call__(self, df: "DataFrame", batch_id: int) -> None:
        self._micro_batch(df, batch_id)

    def write_chained(self, source: "DataFrame", transform, batch_id: int, unplanned=None) -> None:
        """Writes as one micro-batch the rows `transform` makes of `source`: a picklable mapInArrow function
        (RecordBatches in, RecordBatches of its Arrow `schema` out; a Debezium topic's flatten). The transform runs
        chained to key-by, in its task: its rows never go back to the JVM before they are keyed. A micro-batch that
        is bulk inserted, or whose columns the table casts, runs it as a stage of its own. `unplanned`: a function
        called on the driver once the tasks have run, before the commit, returning why the input was not what the
        transform was planned for (the transform's tasks having stopped without failing), or None; a reason
        abandons the micro-batch's instant (rolled back, or removed when it wrote no file) and raises
        HoodieUnplannedInputError with it, for the caller to plan the micro-batch again."""
        from pyspark.sql.pandas.types import from_arrow_schema

        df = source.mapInArrow(transform, from_arrow_schema(transform.schema))
        self._micro_batch(df, batch_id, (df, source, transform), unplanned=unplanned)

    def write_once(self, df: "DataFrame", mode: str = "append") -> coordinator.BatchResult:
        """Write DataFrame `df` as one commit outside any streaming query (a batch write: `batch_write.write`): the
        same chain (or bulk insert) and coordinator as a micro-batch, under the table's lease, with no streaming
        batch id (the commit carries the streaming checkpoints on unchanged), and the table services after it run
        inline. `mode` (Spark's save mode, lower case): `append`; `errorifexists` raises and `ignore` writes nothing
        when the table exists (decided holding the lease). Returns what was committed (`instant` None: nothing)."""
        self._micro_batch(df, None, mode=mode)
        return self.last_result or coordinator.BatchResult()

    def _micro_batch(self, df, batch_id, chained=None, mode="append", unplanned=None):
        """One micro-batch (`batch_id` None: a batch write, `write_once`)."""
        self._seconds, self._mark, self._bulk_batch, self._chain_jobs = {}, time.monotonic(), False, None
        spark = df.sparkSession
        if not self._version_checked and _has_properties(self.storage):
            # a table of a version this project does not write (or with broken properties) is refused before the
            # lease or anything else touches it
            TableConfig.load(self.storage)
        self._version_checked = True
        self._hold_for_query(spark, "" if batch_id is None else _query_id(spark))
        self.lease.remove_on_release = False
        with self.lease.hold(), in_pool(spark.sparkContext, WRITE_POOL, keep_callers=True):
            if mode != "append" and _has_properties(self.storage):
                if mode == "errorifexists":
                    raise HoodieTableError(self.path, "the table exists (save mode errorifexists); nothing was written")
                log.warning("%s: the table exists; save mode %s writes nothing", self.path, mode)
                self.last_result = coordinator.BatchResult()
                return
            with self.services.ingesting():  # (FIFO mode) async compaction starts no new task meanwhile
                try:
                    self._write_batch(df, batch_id, chained, unplanned)
                except BaseException:
                    self._undo_failed_creation()
                    raise
                finally:
                    self._created = None
            if self.last_result is not None and self.last_result.instant:
                try:  # inline after a batch write: nothing would wait for a background step
                    self.services.after_commit(spark, inline=batch_id is None or self._runs_once(spark))
                except Exception:  # the batch is committed; a failed table service is retried after the next one
                    log.exception("table services after %s failed", self.last_result.instant)
                self._lap("services")
        try:
            self._record_batch(batch_id)
        except Exception:  # the batch is committed: what it measured never fails it
            log.warning("%s: recording the metrics of batch %s failed", self.path, batch_id, exc_info=True)

    def _write_batch(self, df, batch_id, chained=None, unplanned=None):
        self.last_result = None
        spark = df.sparkSession
        identifier = writer_identifier(self.options.checkpoint_identifier, _query_id(spark))
        check_worker_python(spark)
        self._check_columns(df)
        batch_arrow = _arrow_schema(df.schema)
        writer = self._open_or_create(batch_arrow, spark)
        # a delete batch needs only the key (and partition) columns: nothing of it is written as data
        new_avro, df = (None, df) if self.options.operation == "delete" else self._check_schema(writer, batch_arrow, df)
        if chained is not None and df is not chained[0]:  # the table casts the columns: a stage between
            chained = None
        if not self.services.started:
            recovery.remove_leftovers(writer.storage)  # first batch of this process: nothing else writes yet
        recovery.rollback_pending_writes(writer.storage, writer.timeline)
        self.services.start()
        done = None if batch_id is None else last_batch_id(writer.timeline, identifier)
        if done is not None and batch_id <= done:
            log.info("batch %s of %s already committed; skipped", batch_id, identifier)
            self._lap("prepare")
            self.last_result = coordinator.BatchResult(skipped=True)
            return
        tasks = self._tasks(spark)
        if not recovery.index_is_current(writer.storage, writer.timeline):
            recovery.rebuild_index(
                spark, writer.storage, writer.timeline, self.options.key_groups, self.options.global_index, tasks[0]
            )
        bulk, committed = self._bulk_insert(writer.timeline)
        txn = writer.start(operation="BULK_INSERT" if bulk else self.options.operation.upper())
        if new_avro is not None:
            txn.avro_schema = new_avro
            txn.arrow_schema = avro_to_arrow_schema(new_avro)
        self._bulk_batch = bulk
        self._lap("prepare")
        sc = df.sparkSession.sparkContext
        with tagged_jobs(sc, txn.instant) as tag:
            try:
                if bulk:
                    rows = run_bulk_insert(df, writer, txn, self.options, tasks[1], committed)
                else:
                    rows = self._run_chain(df, writer, txn, tasks, tag, chained)
                stats, flushes, moved = coordinator.parse_task_results(rows)
                self._lap("chain")
            except BaseException as exc:
                wait_for_tasks(sc, tag)  # the failed job's other tasks stop before the rollback lists their files
                _abort(txn)
                mine = coordinator.task_error(exc)
                if mine is not None:
                    raise mine from None
                raise
        reason = unplanned() if unplanned is not None else None
        if reason is not None:  # the tasks stopped at input their transform was not planned for: nothing commits
            _abort(txn)
            raise HoodieUnplannedInputError(reason)
        if not stats and not index_state.instant_has_files(writer.storage, txn.instant):
            coordinator.discard_empty(txn)
            self._lap("commit")
            self.last_result = coordinator.BatchResult(flushes=flushes)
            return
        # (an instant that wrote no file but changed the index, keeping deletes of keys the table does not hold,
        # commits without write stats: the index state counts only with its instant completed)
        try:
            self.lease.ensure()
            coordinator.commit(txn, stats, identifier, batch_id, moved)
        except BaseException:
            _abort(txn)
            raise
        self._lap("commit")
        self.last_result = coordinator.BatchResult(txn.instant, stats, flushes, moved=moved)

    def _bulk_insert(self, timeline):
        """(whether the micro-batch is bulk inserted, the committed instants of a table holding data, else None).

        Operation bulk_insert always is; with operation upsert, the first micro-batch into a table without a
        completed data commit (a new table, or one whose writes were all rolled back) is too, unless
        hoodie.stream.bulk_insert.first.batch is false."""
        o = self.options
        empty = recovery.latest_data_instant(timeline) is None
        committed = None if empty else timeline.committed_instants()
        if o.operation == "bulk_insert":
            if not empty and not self._bulk_warned:
                self._bulk_warned = True
                log.warning(
                    "%s: bulk_insert into a table that holds data looks no key up: records whose keys are in the "
                    "table already are written again (duplicates) and deletes are dropped; use upsert to update them",
                    self.path,
                )
            return True, committed
        return o.operation == "upsert" and o.bulk_insert_first_batch and empty, committed

    def _runs_once(self, spark):
        """Whether this micro-batch's query runs once (trigger availableNow or once): its compaction then runs
        inline, as Hudi advises for such jobs, since the query's end would stop a background one."""
        query_id = _query_id(spark)
        if self._once is None or self._once[0] != query_id:
            self._once = (query_id, _trigger_runs_once(spark, query_id))
        return self._once[1]

    def _hold_for_query(self, spark, query_id):
        """The table's lease (one writer at a time): held during each micro-batch and each compaction step, and,
        inside streaming query `query_id` ("": none, or a batch write), from its first micro-batch until the query
        terminates. A location that holds something other than a Hudi table is refused first: nothing is written
        there."""
        if self._lease is None and not _has_properties(self.storage):
            _refuse_foreign_root(self.storage)
        if query_id and self._query != query_id:
            if self._query and not _query_active(spark, self._query):
                self.close()  # the previous query ended; its termination was not seen yet
            # while another query of this sink still runs (the same sink passed to a second query), its lease is
            # held and this acquire is refused naming it, as for any other writer; the sink's state stays the
            # running query's
            lease = query_lease(self.storage, self.options.lock, query_id)
            lease.acquire(query_id)
            if self._query:  # the previous query ended while this one waited
                self.close()
            self._lease = lease
            if self._services is not None:
                self._services.use_lease(self._lease)
            self._query = query_id
            self._listener = _release_on_termination(spark, self, query_id)

    # -- checks --------------------------------------------------------------------------------------------
    def _check_columns(self, df):
        names = set(df.columns)
        o = self.options
        wanted = [("record key", f) for f in o.record_key_fields] + [("partition path", f) for f in o.partition_fields]
        if o.precombine_field and o.operation != "delete":
            wanted.append(("precombine (ordering)", o.precombine_field))
        for role, field in wanted:
            if field not in names:
                raise HoodieConfigError(
                    f"{role} field {field!r} is not a column of the micro-batch (columns: {sorted(names)})"
                )
        meta = [c for c in df.columns if c in META_FIELDS]
        if meta:
            raise HoodieConfigError(f"the micro-batch carries Hudi meta column(s) {meta}; drop them before writing")

    def _open_or_create(self, batch_arrow, spark):
        storage = self.storage
        o = self.options
        if _half_created(storage):
            log.warning("%s: removing a .hoodie directory whose creation was interrupted", storage.uri_of(".hoodie"))
            _delete_table_files(storage, ".hoodie")
        if not _has_properties(storage):
            before = _refuse_foreign_root(storage)
            if o.operation == "delete":
                raise HoodieTableError(self.path, "cannot delete from a table that does not exist yet")
            if o.cdc_enabled and (o.write_table_version or 6) >= 8:
                raise HoodieConfigError(
                    f"option {CDC_ENABLED!r}: tables of version 8 and 9 are written without CDC here (their "
                    "changelog is not read); create the table at version 6 (hoodie.write.table.version)"
                )
            HoodieWriter.create(
                storage,
                table_name=o.table_name,
                record_key_fields=o.record_key_fields,
                schema=batch_arrow,
                precombine_field=o.precombine_field,
                partition_fields=o.partition_fields,
                hive_style=o.hive_style,
                url_encode=o.url_encode,
                keygen_class=o.raw.get("hoodie.datasource.write.keygenerator.class"),
                payload_class=o.payload_class,
                extra={**_keygen_extra(o.raw), **_cdc_props(o)},
                table_version=o.write_table_version or 6,
            )
            self._created = before
        if not self.services.started:  # first batch of this process: Hudi's writer with hoodie.metadata.enable=false
            remove_metadata_table(storage, guard=self.lease.ensure)
            upgrade_to_asked(spark, storage, o.write_table_version, o.compaction, guard=self.lease.ensure)
        writer = HoodieWriter(storage)
        cfg = writer.config
        if not cfg.populate_meta_fields:
            raise HoodieTableError(
                self.path,
                "the table was written with hoodie.populate.meta.fields=false; the "
                "sink writes meta fields and refuses to mix them in",
            )
        if cfg.table_type != "MERGE_ON_READ":
            raise HoodieTableError(self.path, f"table type is {cfg.table_type}; the sink writes MERGE_ON_READ tables")
        # as Hudi's HoodieSparkSqlWriter: a table name given for an existing table must be its name (Spark's
        # case-insensitive resolver); record key, partition and precombine fields must be the table's
        if "hoodie.table.name" in o.raw and o.table_name.lower() != cfg.table_name.lower():
            raise HoodieConfigError(
                f"option 'hoodie.table.name' is {o.table_name!r} but the table at {self.path} is "
                f"named {cfg.table_name!r}; a Hudi table cannot be written under another name"
            )
        if list(cfg.record_key_fields) != list(o.record_key_fields):
            raise HoodieConfigError(
                f"option 'hoodie.datasource.write.recordkey.field' is {o.record_key_fields} but "
                f"the table at {self.path} has record key {cfg.record_key_fields}"
            )
        if list(cfg.partition_fields or []) != list(o.partition_fields):
            raise HoodieConfigError(
                f"option 'hoodie.datasource.write.partitionpath.field' is {o.partition_fields} "
                f"but the table at {self.path} is partitioned by {cfg.partition_fields}"
            )
        _check_cdc_options(o, cfg, self.path)
        if cfg.version >= 8 and table_logging_mode(cfg.props) is not None:
            raise HoodieTableError(
                self.path,
                f"the table (version {cfg.version}) has CDC enabled; version 8 and 9 tables are written "
                "without CDC here",
            )
        if o.precombine_field is None and cfg.precombine_field:
            # unset: the table's ordering field applies (Hudi fills write options from the table config)
            self.options = o = dataclasses.replace(o, precombine_field=cfg.precombine_field)
            if o.operation != "delete" and o.precombine_field not in batch_arrow.names:
                raise HoodieConfigError(
                    f"precombine (ordering) field {o.precombine_field!r} of the table at "
                    f"{self.path} is not a column of the micro-batch (columns: "
                    f"{sorted(batch_arrow.names)})"
                )
        elif o.precombine_field != cfg.precombine_field:
            raise HoodieConfigError(
                f"option 'hoodie.datasource.write.precombine.field' is {o.precombine_field!r} but "
                f"the table at {self.path} has precombine field {cfg.precombine_field!r}"
            )
        return writer

    def _undo_failed_creation(self):
        """After a failed micro-batch: if it created the table and no commit completed, remove what it left (the
        table root holds again what it held before), so that the next batch creates the table from its own
        schema."""
        before, self._created = self._created, None
        if before is None:
            return
        storage = self.storage
        try:
            if Timeline(storage).commits_timeline():
                return
            files, dirs = before
            for name in storage.list_dirs(""):
                if name not in dirs or name == ".hoodie":
                    _delete_table_files(storage, name)
            for info in storage.list("", temp=True):
                if info.path not in files:
                    storage.delete(info.path)
            self.lease.remove_on_release = True  # nothing of the table is left: the lease object goes too
        except Exception:
            log.exception("%s: could not remove the table the failed micro-batch created", self.path)
            return
        log.warning("%s: the first micro-batch failed; the table it created was removed", self.path)

    def _check_schema(self, writer, batch_arrow, df):
        """Match the micro-batch's columns to the table's by name, as Hudi does. Returns (schema, df): the evolved
        Avro schema (None when the table schema stays) and the micro-batch in the table's column order with
        narrower types cast to the table's. Accepted: columns in any order; a column of a type Avro promotes to
        the table's (int -> long/float/double, long -> float/double, float -> double) or a decimal of the table's
        scale and fewer digits is written as the table's; a column of a type the table's promotes to widens the
        table's (a decimal to more digits only within its Avro fixed's size, as Hudi checks it); new nullable
        columns go at the end.
        Anything else raises HoodieError."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_type

        table_avro = writer.avro_schema()
        table_arrow = avro_to_arrow_schema(table_avro)
        batch_avro = table_avro_schema(writer.config.table_name, batch_arrow)
        normalized = avro_to_arrow_schema(batch_avro)
        batch_fields = {f["name"]: f for f in batch_avro["fields"]}
        incompatible = f"schema of the micro-batch is incompatible with the table at {self.path}"
        missing = [n for n in table_arrow.names if n not in normalized.names]
        if missing:
            raise HoodieError(
                f"{incompatible}: column(s) {missing} of the table are missing (table columns "
                f"{table_arrow.names}, batch {normalized.names}); Hudi does not drop columns"
            )
        fields, select, order, evolved, cast = [], [], [], False, False
        for i, f in enumerate(table_arrow):
            batch_type = normalized.field(f.name).type
            to_type = None  # the Spark type the column is cast to
            if batch_type.equals(f.type):
                fields.append(table_avro["fields"][i])
            elif _promotes(f.type, batch_type):
                fields.append(batch_fields[f.name])  # the table's type widens to the batch's
                evolved = True
            elif _casts(batch_type, f.type):
                to_type = from_arrow_type(f.type)  # written as the table's type
                fields.append(table_avro["fields"][i])
                cast = True
            else:
                raise HoodieError(
                    f"{incompatible}: column {f.name!r} is {batch_type} in the batch but {f.type} in the "
                    f"table (Hudi promotes int to long, float or double, long to float or double, "
                    f"float to double, a decimal to more digits of the same scale in the same Avro fixed size)"
                )
            select.append((f.name, to_type))
            order.append(f.name)
        for name in normalized.names:
            if name in table_arrow.names:
                continue
            if not batch_arrow.field(name).nullable:
                raise HoodieError(
                    f"new column {name!r} must be nullable to evolve the table at {self.path} (the rows written before "
                    f"have no value); make it nullable in Spark before writing, e.g. "
                    f"df.withColumn({name!r}, F.when(F.col({name!r}).isNotNull(), F.col({name!r}))), or "
                    f"df.to(schema) with StructField({name!r}, ..., nullable=True)"
                )
            fields.append(batch_fields[name])
            select.append((name, None))
            order.append(name)
            evolved = True
        if cast or order != list(df.columns):  # columns built only here: each costs the driver JVM calls
            df = df.select(*[F.col(quoted(n)) if t is None else F.col(quoted(n)).cast(t).alias(n) for n, t in select])
        if not evolved:
            return None, df
        return dict(table_avro, fields=fields), df

    def _tasks(self, spark):
        default = spark.sparkContext.defaultParallelism
        o = self.options
        return (o.bucket_assign_tasks or default, o.write_tasks or default)

    # -- the chain -----------------------------------------------------------------------------------------
    def _run_chain(self, df, writer, txn, tasks, tag, chained=None):
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        o = self.options
        assign_tasks, write_tasks = tasks
        mode, ordering = merge_mode(writer.config.props)
        timeline = writer.timeline
        context = BatchContext(
            writer.storage,
            txn.instant,
            o.operation,
            ordering,
            tuple(df.columns),
            o.release_memory,
            writer.config.version,
            writer.timeline.dir,
        )
        recent = recent_write_commits(timeline)
        record_size = average_record_size(recent, o.record_size_estimate)
        small = small_file_profile(
            writer.storage, timeline, o.max_file_size, o.log_to_parquet_ratio, record_size, assign_tasks
        )

        schema = keyed_schema(df.schema)
        if chained is None:
            keyed = df.mapInArrow(KeyBy(context, writer.config.props), schema)
        else:  # the transform's rows keyed in its own task (key_by.py)
            _df, source, transform = chained
            keyed = source.mapInArrow(KeyBy(context, writer.config.props, transform), schema)
        keyed = keyed.withColumns(
            {
                KEY_GROUP: F.expr(key_group_expr(o.key_groups)),
                ASSIGN_TASK: F.expr(assign_task_expr(o.key_groups, assign_tasks)),
            }
        )
        routed_schema = T.StructType(
            df.schema.fields
            + [
                T.StructField(KEY, T.StringType()),
                T.StructField(PARTITION, T.StringType()),
                T.StructField(FILE_ID, T.StringType()),
                T.StructField(KIND, T.ByteType()),
                T.StructField(SEQ, T.LongType()),
                T.StructField(WRITE_TASK, T.IntegerType()),
            ]
        )
        assigner = BucketAssigner(
            context,
            AssignSpec(
                committed=timeline.committed_instants(),
                global_index=o.global_index,
                event_time=mode == "EVENT_TIME_ORDERING",
                small_files=small,
                new_file_capacity=int(o.max_file_size / record_size),
                num_tasks=assign_tasks,
                write_plan=WritePlan(write_tasks, recent_loads(recent)),
                markers=batch_markers(_arrow_schema(df.schema), o),
            ),
        )
        # sorted by key group within each task, so a bucket assigner holds one key group's rows at a time
        routed = (
            keyed.repartition(assign_tasks, ASSIGN_TASK)
            .sortWithinPartitions(KEY_GROUP)
            .mapInArrow(assigner, routed_schema)
        )
        write_fn = StreamWriteFunction(
            context,
            WriteSpec(
                avro_schema=txn.avro_schema,
                batch_size_bytes=o.batch_size_bytes,
                task_max_bytes=o.task_max_size_bytes,
                pending_compactions=pending_file_groups(timeline),
                cdc_logging=table_logging_mode(writer.config.props) in LOGGED_MODES,
            ),
        )
        # each file group to its write task (write_tasks.py: balanced by recent load, one task per file group)
        results = routed.repartition(write_tasks, WRITE_TASK).mapInArrow(
            write_fn, T.StructType([T.StructField(n, T.StringType()) for n in RESULT_SCHEMA.names])
        )
        self._chain_jobs = ChainJobs(df.sparkSession.sparkContext, tag)  # its stages timed apart (stage_times.py)
        rows = results.collect()
        self._chain_jobs.done()
        return [(r["kind"], r["payload"]) for r in rows]


def _abort(txn):
    """Roll a failed micro-batch's instant back. When that fails too (the store is unreachable: the failure that
    failed the batch, most likely), the instant stays pending, invisible to readers, and is rolled back before
    the next write; the batch's own error is the one raised, not the rollback's."""
    try:
        coordinator.abort(txn)
    except Exception:
        log.warning(
            "%s: rolling back the failed instant %s failed; it stays pending and is rolled back before the next write",
            txn.storage.uri,
            txn.instant,
            exc_info=True,
        )


def _spark_s3a_settings(path):
    """Storage options from the active Spark session's `spark.hadoop.fs.s3a.*` settings, for an s3 location."""
    if isinstance(path, Storage) or not str(path).lower().startswith(("s3://", "s3a://")):
        return None
    try:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            return None
        conf = {k: v for k, v in spark.sparkContext.getConf().getAll() if k.startswith(S3A_PREFIX)}
    except Exception:  # no Spark here, or a session without a SparkContext (Spark Connect)
        return None
    return s3a_settings(conf)


def _query_id(spark):
    """The id of the streaming query whose micro-batch this thread runs ("" outside one)."""
    return spark.sparkContext.getLocalProperty("sql.streaming.queryId") or ""


def _running_query(spark, query_id):
    """The JVM StreamExecution of running streaming query `query_id` (None when it does not run), from the registry
    of every session's running queries in their shared state. Raises where there is no JVM (Spark Connect)."""
    uuid = spark.sparkContext._jvm.java.util.UUID.fromString(query_id)
    return spark._jsparkSession.sharedState().activeStreamingQueries().get(uuid)


def _query_streams(spark, query_id):
    """The StreamingQueryManager of the session that started streaming query `query_id`. foreachBatch hands each
    micro-batch over in a clone of that session (`df.sparkSession`), whose own manager neither lists the query nor
    hears of its termination."""
    try:
        from pyspark.sql.streaming.query import StreamingQueryManager

        running = _running_query(spark, query_id)
        if running is not None:
            return StreamingQueryManager(running.sparkSession().streams())
    except Exception:  # Spark Connect (no JVM here), or a Spark without that registry
        pass
    return spark.streams


def _trigger_runs_once(spark, query_id):
    """Whether streaming query `query_id` has a trigger that runs once: availableNow or once (False when that
    cannot be told: Spark Connect, a batch write)."""
    if not query_id:
        return False
    try:
        running = _running_query(spark, query_id)
        if running is None:
            return False
        trigger = running.trigger().getClass().getSimpleName()
    except Exception:
        log.debug("the trigger of query %s could not be read", query_id, exc_info=True)
        return False
    return trigger.rstrip("$") in ("AvailableNowTrigger", "OneTimeTrigger")


def _query_active(spark, query_id):
    """Whether streaming query `query_id` still runs (True when that cannot be told: the lease then decides)."""
    try:
        return _query_streams(spark, query_id).get(query_id) is not None
    except Exception:
        return True


def _release_on_termination(spark, sink, query_id):
    """A streaming query listener that closes the sink (releasing its lease) when its query terminates."""
    from pyspark.sql.streaming import StreamingQueryListener

    class _Listener(StreamingQueryListener):
        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            try:
                if str(event.progress.id) == query_id:
                    sink._batch_metrics().progress(event.progress)  # rows in and the source's lag (batch_metrics.py)
            except Exception:
                log.debug("%s: reading the progress of query %s failed", sink.path, query_id, exc_info=True)

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            if str(event.id) != query_id:
                return

            def close():
                try:
                    if sink._query == query_id:  # not the hold of a later query the same sink was given to
                        sink.close(wait=True)
                    streams.removeListener(listener)
                except Exception:
                    log.warning("%s: closing the sink after its query ended failed", sink.path, exc_info=True)
                finally:
                    if sink._listener is listener:
                        sink._listener = None

            threading.Thread(target=close, name="hoodie-stream-close", daemon=True).start()

    listener = _Listener()
    streams = _query_streams(spark, query_id)  # the clone's manager would never report the termination
    streams.addListener(listener)
    return listener


def _delete_table_files(storage, name):
    """Delete directory `name` of the table root, keeping the writer lease's object (`.hoodie/.locks`)."""
    if name != ".hoodie":
        storage.delete_tree(name)
        return
    for name in storage.list_dirs(".hoodie"):
        if name != ".locks":
            storage.delete_tree(f".hoodie/{name}")
    for info in storage.list(".hoodie", temp=True):
        storage.delete(info.path)


def _refuse_foreign_root(storage):
    """The root's (file names, directory names) when it holds no table yet; HoodieTableError when it holds
    anything but dot-files (a path inside an existing non-Hudi directory or prefix)."""
    before = _root_entries(storage)
    foreign = sorted(n for n in before[0] | before[1] if not n.startswith("."))
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise HoodieTableError(
            storage.uri,
            f"the location is not empty and is not a Hudi table (no .hoodie/hoodie.properties; it holds {shown}); "
            "refusing to write there",
        )
    return before


def _has_properties(storage):
    return any(storage.exists(f".hoodie/{n}") for n in ("hoodie.properties", "hoodie.properties.backup"))


def _half_created(storage):
    """A .hoodie left by a table creation that died before hoodie.properties was written: no properties, no
    instant, no data file anywhere in the table."""
    if ".hoodie" not in storage.list_dirs(""):
        return False
    if _has_properties(storage):
        return False
    left = [
        info
        for info in storage.list(".hoodie", recursive=True, temp=True)
        if not info.path.startswith(".hoodie/.locks/")
    ]
    if not left or any(not info.name.startswith(".") for info in left if info.path.count("/") == 1):
        return False
    files, dirs = _root_entries(storage)
    return not [n for n in files | dirs if not n.startswith(".")]


def _root_entries(storage):
    """(file names, directory names) directly in the table root."""
    return {info.path for info in storage.list("", temp=True)}, set(storage.list_dirs(""))


# Avro's type promotions (a reader of the wider type reads data of the narrower one), which Hudi's schema
# evolution follows on write; the readers cast older data to the commit's schema.
_PROMOTIONS = {
    pa.int32(): (pa.int64(), pa.float32(), pa.float64()),
    pa.int64(): (pa.float32(), pa.float64()),
    pa.float32(): (pa.float64(),),
}


def _promotes(old, new):
    """Whether Hudi lets a table column of Arrow type `old` evolve to `new`."""
    return any(new.equals(t) for t in _PROMOTIONS.get(old, ())) or decimal_widens(old, new)


def _casts(narrow, wide):
    """Whether values of Arrow type `narrow` are written as a table column's `wide` (the table stays): a type Avro
    promotes, or a decimal of the same scale and fewer digits."""
    if pa.types.is_decimal(narrow) and pa.types.is_decimal(wide):
        return narrow.scale == wide.scale and narrow.precision < wide.precision
    return any(wide.equals(t) for t in _PROMOTIONS.get(narrow, ()))


_checked_worker_pythons: set[str] = set()


def check_worker_python(spark):
    """Refuse, before anything is written, a local Spark whose Python workers cannot import hoodie_stream.

    PySpark starts its workers with PYSPARK_PYTHON, else `python3` from the PATH (`spark.pyspark.python` takes
    effect through spark-submit, which sets PYSPARK_PYTHON). A script run as `.venv/bin/python pipeline.py` would
    fail in every task with "No module named 'hoodie_stream'"; this says what to set instead. Checked once per
    interpreter, only for local masters (the executors of a cluster run elsewhere).
    """
    try:
        sc = spark.sparkContext
        exe, master = sc.pythonExec, sc.master
    except Exception:  # Spark Connect: no SparkContext here, the workers are the server's
        return
    if exe in _checked_worker_pythons or not str(master).startswith("local"):
        return
    problem = worker_python_problem(exe)
    if problem:
        raise HoodieConfigError(problem)
    _checked_worker_pythons.add(exe)


def worker_python_problem(exe, run=subprocess.run):
    """None when interpreter `exe` (a path or a name looked up on the PATH) is this one or imports hoodie_stream,
    else the message saying what to set."""
    if os.path.isabs(exe) and os.path.realpath(exe) == os.path.realpath(sys.executable):
        return None
    where = "set by PYSPARK_PYTHON" if os.environ.get("PYSPARK_PYTHON") else "PySpark's default, from the PATH"
    try:
        done = run([exe, "-c", "import hoodie_stream"], capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        reason = f"cannot be started ({e})"
    else:
        if done.returncode == 0:
            return None
        last = (done.stderr or b"").decode(errors="replace").strip().splitlines()
        reason = f"cannot import hoodie_stream ({last[-1] if last else f'exit status {done.returncode}'})"
    return (
        f"Spark starts its Python workers with {exe!r} ({where}), which {reason}; set the environment "
        f"variable PYSPARK_PYTHON to the interpreter that has hoodie_stream (this one is {sys.executable}) "
        "before the SparkSession starts, or spark.pyspark.python when launching with spark-submit"
    )


def _arrow_schema(spark_schema):
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone="UTC")


def _cdc_props(o):
    """The CDC table config of a table the sink creates, as Hudi writes it: the mode only when CDC is enabled."""
    if not o.cdc_enabled:
        return {}
    return {CDC_ENABLED: "true", LOGGING_MODE: o.cdc_logging_mode}


def _check_cdc_options(o, cfg, path):
    """CDC is a table property set at creation: options given for an existing table must say what it has."""
    given = [k for k in (CDC_ENABLED, "cdc.enabled", LOGGING_MODE, "cdc.supplemental.logging.mode") if k in o.raw]
    if not given:
        return
    mode = table_logging_mode(cfg.props)
    if o.cdc_enabled != (mode is not None) or (mode is not None and o.cdc_logging_mode != mode):
        has = f"{CDC_ENABLED}=true, {LOGGING_MODE}={mode}" if mode else f"{CDC_ENABLED}=false"
        raise HoodieConfigError(
            f"option {given[0]!r} asks for {CDC_ENABLED}={str(o.cdc_enabled).lower()}"
            + (f", {LOGGING_MODE}={o.cdc_logging_mode}" if o.cdc_enabled else "")
            + f" but the table at {path} was created with {has}; CDC is set when a table is created"
        )


def _keygen_extra(raw):
    return {k: v for k, v in raw.items() if k.startswith(("hoodie.keygen.timebased.", "hoodie.write.complex."))}
