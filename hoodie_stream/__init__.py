"""hoodie-stream: Apache Hudi merge-on-read tables (table version 6) written from Spark Structured Streaming
(`HoodieStreamSink`) and from batch DataFrames (`write`)."""

from .debezium import DebeziumSink
from .errors import HoodieError
from .format.hoodie_table import HoodieTable
from .format.write.writer import HoodieWriter
from .streaming_sink.batch_write import write
from .streaming_sink.sink import HoodieStreamSink

__all__ = ["DebeziumSink", "HoodieError", "HoodieStreamSink", "HoodieTable", "HoodieWriter", "write"]
__version__ = "0.1.0"
