"""Spark's discovery of Python data sources: Spark imports every top-level module named `pyspark_*` that has a
`DefaultSource`, so that, once hoodie-stream is installed, `spark.read.format("hoodie")` needs no
`hoodie_stream.spark.register(spark)` call (an editable install is not seen by that scan: register there)."""

from hoodie_stream.spark.data_source import HoodieDataSource as DefaultSource

__all__ = ["DefaultSource"]
