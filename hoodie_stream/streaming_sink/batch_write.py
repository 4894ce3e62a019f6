"""Batch writes: `hoodie_stream.write(df, path, options, mode=...)`, a DataFrame as one commit (backfills, fixes).

The DataFrame goes through the sink's chain as one micro-batch would (`HoodieStreamSink.write_once`): key-by,
bucket assign with the keyed index state, the write function, one delta commit by the coordinator; or bulk insert
(operation `bulk_insert`, and `upsert` into a table without data). The write holds the table's lease, so it waits
for (and then refuses, naming it) a streaming query that writes the table; it records no streaming batch id and
carries the streaming checkpoints on, so a stream that continues afterwards stays exactly-once. Its compaction and
cleaning run inline after the commit.

Save modes, as Spark names them and Hudi's Spark writer (HoodieSparkSqlWriter) applies them: `append` writes into
the table (creating it), `errorifexists` (`error`, `default`) refuses an existing table, `ignore` leaves an existing
table untouched. `overwrite` is refused: Hudi's writer deletes the table's directory and writes a new table, which
loses the timeline (time travel, incremental reads, the streaming checkpoints of every query writing the table) and
leaves readers without a table meanwhile. Operation `delete` takes `append` only, as in Hudi.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..chain.sql_keys import quoted
from ..errors import HoodieConfigError, HoodieError
from ..format.hoodie_table import HoodieTable
from ..storage import Storage
from .coordinator import BatchResult
from .sink import HoodieStreamSink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Spark's save mode names (DataFrameWriter.mode, in any case) -> the mode written
SAVE_MODES = {
    "append": "append",
    "errorifexists": "errorifexists",
    "error": "errorifexists",
    "default": "errorifexists",
    "ignore": "ignore",
}


def save_mode(mode: str, operation: str) -> str:
    """The save mode `mode` names (Spark's names, any case), checked against the write operation."""
    name = str(mode).strip().lower()
    if name == "overwrite":
        raise HoodieConfigError(
            "save mode 'overwrite' is not supported: Hudi's Spark writer deletes the whole table directory and "
            "writes a new table, losing its timeline (time travel, incremental reads, the streaming checkpoints of "
            "the queries writing it) and leaving readers without a table meanwhile. Delete the table path yourself "
            "(with no stream writing it) and write with mode 'append', or replace rows with operation 'upsert' and "
            "remove them with operation 'delete'"
        )
    if name not in SAVE_MODES:
        raise HoodieConfigError(f"save mode {mode!r} is not one of {sorted([*SAVE_MODES, 'overwrite'])}")
    if operation == "delete" and SAVE_MODES[name] != "append":
        raise HoodieConfigError(
            f"save mode {mode!r}: 'append' is the only save mode of operation 'delete' (as in Hudi)"
        )
    return SAVE_MODES[name]


def write(
    df: DataFrame,
    path: str | Storage,
    options: Mapping[str, Any] | None = None,
    mode: str = "append",
    storage_options: Mapping[str, Any] | None = None,
    **shortcuts: Any,
) -> BatchResult:
    """Write DataFrame `df` into the Hudi table at `path` as one commit; returns what was committed (its `instant`,
    None when nothing was: an empty DataFrame, mode `ignore` on an existing table).

    `options`, `storage_options` and the keyword shortcuts are HoodieStreamSink's (Hudi's key names);
    `hoodie.datasource.write.operation` (or Flink's `write.operation`) picks `upsert` (default), `insert`,
    `bulk_insert` or `delete`. A delete deletes every key of `df`, whatever its ordering value: `df` needs the
    record key fields, and the partition fields unless `index.global.enabled` is false (the global index finds
    each key's partition). `mode`: Spark's save mode (`append`, `errorifexists`, `ignore`; see the module)."""
    sink = HoodieStreamSink(path, options, storage_options, **shortcuts)
    chosen = save_mode(mode, sink.options.operation)
    if sink.options.operation == "delete":
        df = _keys_only(df, sink)
    try:
        return sink.write_once(df, chosen)
    finally:
        sink.close()


def _keys_only(df, sink):
    """The columns a delete needs: the record key fields and the partition fields, the latter as typed nulls when
    `df` lacks them and the global index locates the keys. Without the ordering field the deletes are applied by
    arrival (each deletes its key whatever ordering value is stored), as Hudi's delete operation does. A column
    `df` lacks otherwise is left for the sink to name."""
    from pyspark.sql import functions as F

    o = sink.options
    missing = [f for f in o.partition_fields if f not in df.columns]
    types = _table_types(sink.storage, missing) if missing and o.global_index else {}
    columns = []
    for name in dict.fromkeys([*o.record_key_fields, *o.partition_fields]):
        if name in df.columns:
            columns.append(F.col(quoted(name)))
        elif name in types:
            columns.append(F.lit(None).cast(types[name]).alias(name))
        else:
            return df
    return df.select(*columns)


def _table_types(storage, names):
    """{name: Spark type} of the table's columns among `names` ({} when there is no table: the sink refuses)."""
    from pyspark.sql.pandas.types import from_arrow_type

    try:
        schema = HoodieTable(storage).arrow_schema()
    except HoodieError:
        return {}
    return {f.name: from_arrow_type(f.type) for f in schema if f.name in names}


__all__ = ["SAVE_MODES", "save_mode", "write"]
