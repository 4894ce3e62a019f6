"""The Spark side of the table's Arrow schema: the StructType a read declares, and the record batches it yields.

Spark checks that every `pa.RecordBatch` a Python data source yields has exactly the Arrow schema of the declared
StructType (`to_arrow_schema(schema, timezone="UTC")`): microsecond timestamps, nullable fields. The table's rows
are cast to it, column by column, with Arrow.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

ROWS_PER_BATCH = 10_000  # Spark's spark.sql.execution.arrow.maxRecordsPerBatch default


def spark_schema(arrow_schema: pa.Schema) -> StructType:
    """The Spark schema of a table's Arrow schema: same names and order, every column nullable."""
    return from_arrow_schema(pa.schema([f.with_nullable(True) for f in arrow_schema]), prefer_timestamp_ntz=True)


def record_batches(table: pa.Table, schema: StructType) -> Iterator[pa.RecordBatch]:
    """`table` as record batches of `schema`'s Arrow form (nothing when it is empty)."""
    if table.num_rows == 0:
        return
    target = to_arrow_schema(schema, timezone="UTC")
    table = table.select(target.names).cast(target)
    yield from table.to_batches(max_chunksize=ROWS_PER_BATCH)
