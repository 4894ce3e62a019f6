"""Applying a changelog downstream: the flat changelog of one table (`spark.readStream.format("hoodie")` with
`hoodie.datasource.query.type=incremental`, `hoodie.datasource.query.incremental.format=cdc` and
`hoodie.stream.read.cdc.flat=true`) turned into the rows a HoodieStreamSink writes into the next table, so that a
chain of tables (bronze -> silver) stays exact, deletes included:

    changes = (spark.readStream.format("hoodie").option(...).load(bronze))
    silver_sink = HoodieStreamSink(silver, options)              # bronze's key, partition and ordering fields
    changes.writeStream.foreachBatch(lambda df, batch_id: silver_sink(changelog_rows(df), batch_id)).start()

A micro-batch may hold several changes of one key (one per commit it spans, and a delete in the old partition with
an insert in the new one when a commit moved the key): `changelog_rows` keeps the key's last change, the latest
commit's, an insert or update before a delete of the same commit. That row carries the record as the upstream
table holds it after the micro-batch's commits, or its last image with `_hoodie_is_deleted` true when it was
deleted; the sink merges it with the downstream table as the upstream sink merged its own writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..format.avro.schema import META_FIELDS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

IS_DELETED = "_hoodie_is_deleted"
_RANK = "__hoodie_stream_change_rank"


def changelog_rows(changes: DataFrame) -> DataFrame:
    """The rows to write downstream for a flat changelog micro-batch: per record key its last change, deletes
    marked `_hoodie_is_deleted`, without `op`, `ts_ms` and the meta columns."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    missing = [c for c in ("op", "ts_ms", "_hoodie_record_key") if c not in changes.columns]
    if missing:
        raise ValueError(
            f"changelog_rows takes a flat changelog (hoodie.stream.read.cdc.flat=true); the DataFrame lacks {missing}"
        )
    last = Window.partitionBy("_hoodie_record_key").orderBy(F.col("ts_ms").desc(), (F.col("op") == "d").asc())
    ranked = changes.withColumn(_RANK, F.row_number().over(last)).filter(F.col(_RANK) == 1)
    rows = ranked.withColumn(IS_DELETED, F.col("op") == "d")
    return rows.drop(_RANK, "op", "ts_ms", *[c for c in META_FIELDS if c in changes.columns])
