"""key-by: the first operator of the write chain, run as a Spark `mapInArrow` task on the executors.

It builds every record's key and partition path with the table's key generator, checks the record (key present,
ordering value present), marks deletes, and leaves the key-group hash and the shuffle to Spark
(`chain/key_groups.py`).
"""

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..chain import worker_memory
from ..chain.columns import CHAIN_PREFIX, DELETE, IS_DELETED, KEY, PARTITION, SEQ
from ..chain.stages import BatchContext
from ..errors import HoodieKeyError, HoodiePathError, in_task
from ..format.record import partition_path
from ..format.record.keygen import field_column, make_key_generator


def keyed_schema(schema):
    """The Spark schema of key-by's output: the input's fields, then the arrival number, record key, partition path
    and delete flag it adds."""
    from pyspark.sql import types as T

    return T.StructType(
        schema.fields
        + [
            T.StructField(SEQ, T.LongType()),
            T.StructField(KEY, T.StringType()),
            T.StructField(PARTITION, T.StringType()),
            T.StructField(DELETE, T.BooleanType()),
        ]
    )


def describe_row(table, row, limit=6):
    """A short text of one record for error messages: its first columns and values."""
    values = []
    for name in table.column_names[:limit]:
        if name.startswith(CHAIN_PREFIX):
            continue
        value = table[name][row].as_py()
        text = repr(value)
        values.append(f"{name}={text[:40]}")
    return "{" + ", ".join(values) + "}"


class KeyBy:
    """Picklable mapInArrow function: RecordBatches in, the same rows plus key, partition path and delete flag.

    With a `transform` (a picklable mapInArrow function of the source's batches into the micro-batch's rows, such as
    a Debezium topic's flatten), the operator is chained to it as Flink chains a source's map to the key-by: the task
    reads the source's batches and keys the rows the transform makes of them, which never go back to the JVM."""

    def __init__(self, context: BatchContext, key_props: Mapping[str, str], transform=None) -> None:
        self.context = context
        self.key_props = dict(key_props)  # the table's hoodie.properties: its key generator
        self.transform = transform

    @in_task
    def __call__(self, batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        # arrival order: the partition id in the upper 31 bits, the row within the partition in the lower 33,
        # as Spark's monotonically_increasing_id
        seq = (ctx.partitionId() << 33) if ctx is not None else 0
        with worker_memory.task(self.context.release_memory):
            keygen = make_key_generator(self.key_props)
            if self.transform is not None:
                batches = self.transform(batches)
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                table = pa.Table.from_batches([batch])
                table = table.append_column(SEQ, pa.array(np.arange(seq, seq + table.num_rows, dtype=np.int64)))
                seq += table.num_rows
                yield from self.key_batch(keygen, table).to_batches()

    def key_batch(self, keygen, table):
        try:
            keys = keygen.record_keys(table)
        except HoodieKeyError as e:
            row = _first_missing_key(keygen, table)
            raise HoodieKeyError(f"{e}; record {describe_row(table, row)}") from None
        partitions = keygen.partition_paths(table)
        _check_partition_paths(keygen, table, partitions)
        operation, ordering_field = self.context.operation, self.context.ordering_field
        if operation == "delete":
            deletes = pa.array(np.ones(table.num_rows, np.bool_))
        elif IS_DELETED in table.column_names:
            deletes = pc.fill_null(table[IS_DELETED], False).combine_chunks()
        else:
            deletes = pa.array(np.zeros(table.num_rows, np.bool_))
        if ordering_field and operation != "delete":
            ordering = table[ordering_field]
            if ordering.null_count:
                row = pc.index(pc.is_null(ordering), True).as_py()
                raise HoodieKeyError(
                    f"ordering (precombine) field {ordering_field!r} is null in record with key "
                    f"{keys[row].as_py()!r}: {describe_row(table, row)}"
                )
        return table.append_column(KEY, keys).append_column(PARTITION, partitions).append_column(DELETE, deletes)


def _check_partition_paths(keygen, table, partitions):
    """HoodiePathError naming the first record whose partition path could leave the table (or is no directory name),
    before anything is written; vectorized, the rule of format/record/partition_path.py."""
    row = partition_path.first_refused(partitions)
    if row is None:
        return
    path = partitions[row].as_py()
    fields = ", ".join(f"{f!r} = {_field_value(table, f, row)!r}" for f in keygen.partition_fields)
    raise HoodiePathError(
        f"partition path {path!r} of the record {describe_row(table, row)} (partition field {fields}) is refused: "
        f"{partition_path.problem(path)}"
    )


def _field_value(table, field, row):
    try:
        return field_column(table, field)[row].as_py()
    except HoodieKeyError:  # a field the key generator does not read from the records
        return None


def _first_missing_key(keygen, table):
    mask = None
    for field in keygen.record_key_fields:
        col = table[field] if field in table.column_names else None
        if col is None:
            return 0
        bad = pc.is_null(col)
        if pa.types.is_string(col.type):
            bad = pc.or_(bad, pc.equal(col, ""))
        bad = pc.fill_null(bad, True)
        mask = bad if mask is None else pc.and_(mask, bad)
    return pc.index(mask, True).as_py() if mask is not None else 0
