"""Debezium change events (Kafka topics of a database's changes) into Hudi tables."""

from .sink import DebeziumSink, flatten, table_name

__all__ = ["DebeziumSink", "flatten", "table_name"]
