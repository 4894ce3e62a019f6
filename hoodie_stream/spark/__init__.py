"""Spark reads of hoodie-stream tables with no jar: the "hoodie" Python data source (pyspark >= 4).

    import hoodie_stream.spark
    hoodie_stream.spark.register(spark)
    df = spark.read.format("hoodie").load(path)                 # snapshot, read_optimized, incremental
    stream = spark.readStream.format("hoodie").load(path)       # the records of each new commit
    changes = spark.readStream.format("hoodie")                  # the changelog: inserts, updates, deletes
        .option("hoodie.datasource.query.type", "incremental")
        .option("hoodie.datasource.query.incremental.format", "cdc").load(path)

The options, the input partitions and the streaming offsets: `read_options`, `file_splits`, `stream_reader`.
"""

from .changelog import changelog_rows
from .data_source import FORMAT, HoodieDataSource, register

__all__ = ["FORMAT", "HoodieDataSource", "changelog_rows", "register"]
