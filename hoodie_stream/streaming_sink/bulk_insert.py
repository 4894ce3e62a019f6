"""Bulk insert (operation `bulk_insert`, and the first micro-batch into a table without data): one shuffle, base
files, no lookup.

As Hudi's Flink bulk insert, the records are shuffled once and sorted within each write task
(`write.bulk_insert.sort_input`, default true), then written straight to new base files of the target size
(`bulk_insert_write.py`); the coordinator completes one delta commit with operation BULK_INSERT. Unlike Flink's
(which shuffles by partition path and neither pre-combines nor keeps an index), the shuffle is by key group, as the
chain's key-by: every record of a key reaches one task, which pre-combines them and saves the index state of its
key groups in the same pass, so the next micro-batches upsert into these file groups through the chain. Each task
writes its own files in each partition it receives (as Spark's bulk insert with the PARTITION_SORT mode: at least
tasks x partitions files).

The shuffle needs the key group of each record. When Spark renders the record key exactly as the table's key
generator does (`chain/sql_keys.py`: string and integral key fields), Spark computes it and sorts by the partition
fields and the key fields, and the write tasks are the only Python stage (key-by runs in them, records cross into
Python once); otherwise the key-by stage runs first, as in the chain.

A bulk insert looks no key up, as in Hudi: into a table that holds data, a record whose key is already there is
written again (a duplicate; the index state then points to the new copy), and deletes are dropped.
"""

from ..bucket_assign.markers import EntryMarker, FieldsMarker, batch_markers
from ..bucket_assign.small_files import average_record_size, recent_write_commits
from ..chain import arrow_batches
from ..chain.columns import ASSIGN_TASK, KEY, KEY_GROUP, PARTITION, SEQ
from ..chain.key_groups import assign_task_expr, key_group_expr, key_group_of
from ..chain.sql_keys import quoted, record_key_sql, sortable_fields
from ..chain.stages import BatchContext, BulkInsertSpec
from ..format.record.keygen import make_key_generator
from ..format.record.merge import merge_mode
from ..format.timeline.active_timeline import CommittedInstants
from .bulk_insert_write import BulkInsertWriteFunction, row_group_bytes
from .key_by import KeyBy, keyed_schema
from .write_function import RESULT_SCHEMA

INPUT_BATCH_ROWS = 65_536  # rows of an Arrow batch a write task receives (chain/arrow_batches.py)


def run_bulk_insert(df, writer, txn, options, tasks, committed=None):
    """Write the micro-batch `df` (the table's columns) as instant `txn` with `tasks` write tasks; returns the
    tasks' result rows [(kind, payload)]. `committed`: the table's committed instants when it holds data, None for
    an empty table."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    o = options
    mode, ordering = merge_mode(writer.config.props)
    props = dict(writer.config.props)
    context = BatchContext(
        writer.storage,
        txn.instant,
        "bulk_insert",
        ordering,
        tuple(df.columns),
        o.release_memory,
        writer.config.version,
        writer.timeline.dir,
    )
    record_size = average_record_size(recent_write_commits(writer.timeline), o.record_size_estimate)
    event_time = mode == "EVENT_TIME_ORDERING" and bool(ordering)
    routed, sort_columns, key_columns = _routed(df, context, props, o.key_groups, tasks, event_time, o.global_index)
    markers = _markers(df, o)
    if not o.bulk_insert_sort_input or (o.global_index and make_key_generator(props).partition_fields):
        # a key may meet its task in more than one run (in two partitions, or unsorted): keep its winner alone, so
        # that no losing record is written to a base file (deleting it again in the same instant would leave a
        # file group where Hudi's readers let the old record win over the key's later re-insert)
        order = [quoted(context.ordering_field)] if event_time else []
        routed = _winners(routed, key_columns, [*order, SEQ], markers)
    routed = routed.drop(ASSIGN_TASK)
    if o.bulk_insert_sort_input:
        routed = routed.sortWithinPartitions(*[F.col(c) for c in sort_columns])
    spec = BulkInsertSpec(
        avro_schema=txn.avro_schema,
        file_records=o.max_file_size / record_size,
        max_file_size=o.max_file_size,
        parquet_codec=o.parquet_codec,
        global_index=o.global_index,
        event_time=event_time,
        sorted_input=o.bulk_insert_sort_input,
        keyed=KEY in routed.columns,
        key_props=props,
        committed=CommittedInstants.of(committed),
        markers=markers,
        task_max_bytes=o.task_max_size_bytes,
    )
    schema = T.StructType([T.StructField(n, T.StringType()) for n in RESULT_SCHEMA.names])
    results = routed.mapInArrow(BulkInsertWriteFunction(context, spec), schema)
    # large input batches (a task pays a fixed cost per batch), each at most a quarter of a row group: the rows a
    # file gathers are slices of them, which keep their batches in memory until the row group is written
    with arrow_batches.batches(df.sparkSession, INPUT_BATCH_ROWS, row_group_bytes(spec.task_max_bytes) // 4):
        return [(r["kind"], r["payload"]) for r in results.collect()]


def _markers(df, options):
    """The partial-update markers of the micro-batch's columns (markers.batch_markers)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return batch_markers(to_arrow_schema(df.schema, timezone="UTC"), options)


def _winners(routed, key_columns, order_columns, markers=()):
    """The winner of each key: the greatest (ordering value, arrival) of `order_columns`, deletes included (a
    winning delete writes nothing), its partial-update markers filled as `markers.fill_runs` fills them (the latest
    earlier value of the key that is not the marker). The window is partitioned by the write task and the key, which
    the shuffle by write task already satisfies: Spark sorts within the tasks, no second shuffle; the winner and the
    filled values use the same window order, so Spark sorts once."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    last = "_hoodie_stream_last"
    window = Window.partitionBy(F.col(ASSIGN_TASK), *[F.col(c) for c in key_columns]).orderBy(
        *[F.col(c).asc() for c in order_columns]
    )
    columns = {last: F.lead(F.lit(True), 1).over(window).isNull()}
    up_to_here = window.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    by_column: dict[str, list] = {}
    for name, value in markers:
        if name in routed.columns:  # (a column may have two markers: uuid[] or text[])
            by_column.setdefault(name, []).append(value)
    for name, values in by_column.items():
        column = F.col(quoted(name))
        tests = [_marker_test(column, v) for v in values]
        is_marker = tests[0] if len(tests) == 1 else F.greatest(*tests)
        # the value wrapped in a struct, so that a null value counts as a value and only markers are skipped
        latest = F.last(F.when(~is_marker, F.struct(column.alias("v"))), ignorenulls=True).over(up_to_here)
        columns[name] = F.when(is_marker & latest.isNotNull(), latest.getField("v")).otherwise(column)
    return routed.withColumns(columns).where(F.col(last)).drop(last)


def _marker_test(column, value):
    """Spark's test of a column value being a partial-update marker (markers.marked, as a Column; null: no)."""
    from pyspark.sql import functions as F

    if isinstance(value, FieldsMarker):
        test = None
        for name, item in value.items():
            one = column.getField(name) == F.lit(item)
            test = one if test is None else test & one
    elif isinstance(value, EntryMarker):
        key, item = value
        test = (F.size(column) == 1) & (F.element_at(column, F.lit(key)) == F.lit(item))
    else:
        test = column == F.lit(value)
    return F.coalesce(test, F.lit(False))


def _routed(df, context, props, key_groups, tasks, event_time, global_index):
    """(the records shuffled to their write tasks by key group with their write task column, the sort columns of a
    task's input, the columns that identify a record: the key, and the partition unless the index is global)."""
    from pyspark.sql import functions as F

    keygen = make_key_generator(props)
    types = {f.name: f.dataType.typeName() for f in df.schema.fields}
    key_sql = record_key_sql(keygen, types)
    partition_cols = sortable_fields(keygen.partition_fields, types)
    ordering = [quoted(context.ordering_field)] if event_time else []
    if key_sql is not None and partition_cols is not None:
        group = key_group_of(key_groups, key_sql)
        routed = df.withColumns(
            {
                SEQ: F.monotonically_increasing_id(),  # arrival order, as key-by numbers the records
                KEY_GROUP: F.expr(group),
                ASSIGN_TASK: F.expr(assign_task_expr(key_groups, tasks, group)),
            }
        )
        key_cols = [quoted(f) for f in keygen.record_key_fields]
        identity = key_cols if global_index else [*partition_cols, *key_cols]
        return routed.repartition(tasks, ASSIGN_TASK), [*partition_cols, *key_cols, *ordering, SEQ], identity
    schema = keyed_schema(df.schema)
    keyed = df.mapInArrow(KeyBy(context, props), schema).withColumns(
        {
            KEY_GROUP: F.expr(key_group_expr(key_groups)),
            ASSIGN_TASK: F.expr(assign_task_expr(key_groups, tasks)),
        }
    )
    identity = [KEY] if global_index else [PARTITION, KEY]
    return keyed.repartition(tasks, ASSIGN_TASK), [PARTITION, KEY, *ordering, SEQ], identity
