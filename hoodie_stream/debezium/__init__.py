"""Debezium change events (Kafka topics of a database's changes) into Hudi tables."""
