"""key-by: the first operator of the write chain, run as a Spark `mapInArrow` task on the executors.

It builds every record's key and partition path with the table's key generator, checks the record (key present,
ordering value present), marks deletes, and leaves the key-group hash and the shuffle to Spark
(`chain/key_groups.py`).
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import HoodieKeyError
from ..format.keygen import make_key_generator
from ..chain import worker_memory
from ..chain.columns import CHAIN_PREFIX, DELETE, IS_DELETED, KEY, PARTITION, SEQ

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
    """Picklable mapInArrow function: RecordBatches in, the same rows plus key, partition path and delete flag."""

    def __init__(self, table_props, ordering_field, operation, release_memory=True):
        self.table_props = table_props
        self.ordering_field = ordering_field
        self.operation = operation
        self.release_memory = release_memory

    def __call__(self, batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        # arrival order: the partition id in the upper 31 bits, the row within the partition in the lower 33,
        # as Spark's monotonically_increasing_id
        seq = (ctx.partitionId() << 33) if ctx is not None else 0
        with worker_memory.task(self.release_memory):
            keygen = make_key_generator(self.table_props)
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
        try:
            partitions = keygen.partition_paths(table)
        except HoodieKeyError as e:
            raise HoodieKeyError(f"{e}") from None
        if self.operation == "delete":
            deletes = pa.array([True] * table.num_rows, pa.bool_())
        elif IS_DELETED in table.column_names:
            deletes = pc.fill_null(table[IS_DELETED], False).combine_chunks()
        else:
            deletes = pa.array([False] * table.num_rows, pa.bool_())
        if self.ordering_field and self.operation != "delete":
            ordering = table[self.ordering_field]
            if ordering.null_count:
                row = pc.index(pc.is_null(ordering), True).as_py()
                raise HoodieKeyError(
                    f"ordering (precombine) field {self.ordering_field!r} is null in record with key "
                    f"{keys[row].as_py()!r}: {describe_row(table, row)}")
        return (table.append_column(KEY, keys).append_column(PARTITION, partitions)
                .append_column(DELETE, deletes))


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
