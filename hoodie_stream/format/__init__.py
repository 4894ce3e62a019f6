"""The Hudi table-format core: timeline, files, log format, base files, views, merging, readers.

Nothing in this package imports Spark.
"""
