"""hoodie-stream: Apache Hudi merge-on-read tables (table version 6) written from Spark Structured Streaming."""

from .format.errors import HoodieError
from .format.reader import HoodieTable
from .format.writer import HoodieWriter

__all__ = ["HoodieError", "HoodieTable", "HoodieWriter"]
__version__ = "0.1.0"
