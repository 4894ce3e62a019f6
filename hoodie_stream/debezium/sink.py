"""DebeziumSink: `kafka_df.writeStream.foreachBatch(DebeziumSink(base_path, options, tables=...))`.

Every topic of the stream goes to its own MERGE_ON_READ table, created when the topic is first seen: named after the
topic (every character outside [A-Za-z0-9_] replaced by `_`), at `<base path>/<table name>`, its record key the
Debezium key's fields, its ordering field `_event_order` with Hudi's DefaultHoodieRecordPayload (the greatest
position wins, as Apache Hudi and hudi-rs both merge it; events.py). A micro-batch is read once from Kafka (persisted
on the executors), its schemas are found by one small job, then each topic's rows are written by that table's
HoodieStreamSink as one delta commit carrying the batch id: a micro-batch replayed after a crash between two tables'
commits writes only the tables that had not committed it.
"""

import contextlib
import dataclasses
import json
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import (
    HoodieConfigError,
    HoodieError,
    HoodieFormatError,
    HoodieUnplannedInputError,
    rebuild_task_error,
)
from ..format.avro.schema import META_FIELDS, avro_to_arrow_schema, decimal_widens
from ..format.write.writer import HoodieWriter
from ..options import parse_options
from ..storage import storage_for
from ..streaming_sink.batch_metrics import METRICS_SCHEMA
from ..streaming_sink.sink import HoodieStreamSink
from . import avro_envelope, ddl, events, kafka
from .replan import Unforeseen
from .schema_registry import SchemaRegistry
from .undeclared import UndeclaredFields

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("hoodie_stream")

PAYLOAD_CLASS = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
RECORD_KEY = "hoodie.datasource.write.recordkey.field"
TRUNCATE = "hoodie.stream.debezium.truncate"
MESSAGE = "hoodie.stream.debezium.message"
VARIABLE_SCALE = "hoodie.stream.debezium.variable.scale.decimal"
DEBEZIUM_OPTIONS = {TRUNCATE: "fail", MESSAGE: "skip", VARIABLE_SCALE: "38,10"}
VALUE_FORMATS = ("json", "avro")


@contextlib.contextmanager
def _task_errors():
    """This package's errors raised in Spark tasks, rebuilt on the driver with their class and message."""
    try:
        yield
    except Exception as exc:
        mine = rebuild_task_error(exc)
        if mine is not None:
            raise mine from None
        raise


def table_name(topic):
    """The default table name of a topic: every character outside [A-Za-z0-9_] replaced by `_`."""
    return re.sub(r"[^A-Za-z0-9_]", "_", topic)


def _variable_scale(text):
    if text.strip().lower() == "string":
        return "string"
    try:
        precision, scale = (int(x) for x in text.split(","))
    except ValueError:
        raise HoodieConfigError(f"option {VARIABLE_SCALE!r}: 'string' or 'precision,scale', got {text!r}") from None
    if not 0 <= scale <= precision <= 38 or precision == 0:
        raise HoodieConfigError(f"option {VARIABLE_SCALE!r}: precision 1..38 and scale 0..precision, got {text!r}")
    return (precision, scale)


def _policy(key, value):
    value = str(value).lower()
    if value not in events.POLICIES:
        raise HoodieConfigError(f"option {key!r}: one of {list(events.POLICIES)}, got {value!r}")
    return value


class DebeziumSink:
    """A picklable foreachBatch function writing each topic of a Debezium stream to its own Hudi table."""

    def __init__(
        self,
        base_path: str,
        options: Mapping[str, Any] | None = None,
        tables: Mapping[str, Mapping[str, Any]] | None = None,
        value_format: str = "json",
        schemas: Mapping[Any, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        schema_registry_url: str | None = None,
    ) -> None:
        """`options`: Hudi-named sink options for every table, plus `hoodie.stream.debezium.truncate` and
        `.message` (`fail` or `skip`) and `.variable.scale.decimal` (`precision,scale` or `string`); `tables`:
        per topic, `path`, `hoodie.table.name` and any sink option; `value_format`: "json" (Kafka Connect's
        JsonConverter) or "avro" (Confluent's wire format); `schemas`: for JSON, per topic, the Connect schema (JSON
        text or dict) of messages written without one (`schemas.enable=false`), the envelope's or the row's, or a
        Spark DDL of the row (ddl.py: Debezium's default encoding of each type); for
        Avro, the Avro schemas by id (else, or also, fetched from `schema_registry_url`)."""
        if value_format not in VALUE_FORMATS:
            raise HoodieConfigError(
                f"value_format {value_format!r} is not supported; supported: {list(VALUE_FORMATS)} (Kafka Connect "
                f"JSON, with or without schemas)"
            )
        self.base_path = str(base_path).rstrip("/")
        self.value_format = value_format
        self.storage_options = dict(storage_options or {})
        self.options = {str(k): str(v) for k, v in (options or {}).items()}
        self.tables = {str(t): {str(k): str(v) for k, v in o.items()} for t, o in (tables or {}).items()}
        self.schemas = {}
        self.registry = None
        if value_format == "avro":
            self.registry = SchemaRegistry(schema_registry_url, schemas)
        elif schema_registry_url is not None:
            raise HoodieConfigError("schema_registry_url is for value_format='avro'")
        else:
            for topic, schema in (schemas or {}).items():
                try:
                    if ddl.looks_like_ddl(schema):
                        schema = ddl.row_schema(schema, f"schemas[{topic!r}]")
                    self.schemas[str(topic)] = events.bare_envelope(schema)
                except (ValueError, HoodieFormatError) as e:
                    raise HoodieConfigError(f"schemas[{topic!r}]: {e}") from None
        for topic in self.tables:  # options are checked now, not at the topic's first event
            self._table_options(topic, ["id"])
        self._sinks: dict[str, HoodieStreamSink] = {}
        self._planned = None  # (topic, TopicSpec) when the last micro-batch held that topic alone
        self._undeclared = UndeclaredFields()  # payload fields the schemas do not declare, logged once each
        self._unforeseen = Unforeseen()  # the first message a micro-batch's plan does not foresee (replan.py)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_sinks"] = {}
        state["_planned"] = None
        return state

    def __repr__(self) -> str:
        return f"DebeziumSink({self.base_path!r}, tables={sorted(self._sinks)})"

    @property
    def sinks(self) -> dict[str, HoodieStreamSink]:
        """The table sinks of the topics seen so far, by topic."""
        return dict(self._sinks)

    @property
    def path(self) -> str:
        """The base path of the topics' tables."""
        return self.base_path

    def metrics(self) -> pa.Table:
        """One row per micro-batch and table written (`HoodieStreamSink.metrics()`, after the table's name), in the
        order the micro-batches finished."""
        parts = []
        for topic, sink in sorted(self._sinks.items()):
            rows = sink.metrics()
            name = pa.array([table_name(topic)] * rows.num_rows, pa.string())
            parts.append(rows.add_column(0, "table", name))
        if not parts:
            return METRICS_SCHEMA.insert(0, pa.field("table", pa.string())).empty_table()
        rows = pa.concat_tables(parts)
        return rows.take(pc.sort_indices(rows, [("finished_at", "ascending"), ("table", "ascending")]))

    def table_path(self, topic):
        """Where a topic's table is: tables[topic]["path"], else `<base path>/<table name>`."""
        given = self.tables.get(topic, {})
        if "path" in given:
            return given["path"]
        name = given.get("hoodie.table.name") or self.options.get("hoodie.table.name") or table_name(topic)
        return f"{self.base_path}/{name}"

    def _debezium_options(self, topic):
        merged = {**DEBEZIUM_OPTIONS, **self.options, **self.tables.get(topic, {})}
        return {
            "truncate": _policy(TRUNCATE, merged[TRUNCATE]),
            "message": _policy(MESSAGE, merged[MESSAGE]),
            "variable_scale": _variable_scale(merged[VARIABLE_SCALE]),
        }

    def _table_options(self, topic, key_fields):
        given = {**self.options, **self.tables.get(topic, {})}
        given.pop("path", None)
        for key in DEBEZIUM_OPTIONS:
            given.pop(key, None)
        if "hoodie.table.name" not in given:
            given["hoodie.table.name"] = table_name(topic)
        # Debezium's placeholder of an unchanged TOASTed column keeps the stored value (hoodie.write.partial.*)
        given.setdefault("hoodie.write.partial.update.mode", "IGNORE_MARKERS")
        given.setdefault(RECORD_KEY, ",".join(key_fields))
        for key, value in (
            ("hoodie.datasource.write.precombine.field", events.ORDER),
            ("hoodie.datasource.write.payload.class", PAYLOAD_CLASS),
        ):
            if given.setdefault(key, value) != value:
                raise HoodieConfigError(
                    f"tables[{topic!r}]: {key} is {value!r} for a Debezium table (the order of a key's changes), "
                    f"not {given[key]!r}"
                )
        parse_options(self.table_path(topic), given)  # unknown or invalid options fail now
        return given

    def close(self, wait: bool = True) -> None:
        """Close every table sink (their background table services and leases)."""
        for sink in self._sinks.values():
            sink.close(wait)

    # -- the micro-batch -----------------------------------------------------------------------------------------
    def __call__(self, df: "DataFrame", batch_id: int) -> None:
        try:
            self._write(df, batch_id)
        finally:
            self._undeclared.log_new()

    def _write(self, df, batch_id):
        if self._planned is not None:  # the topic and schemas of the last micro-batch: written in one pass
            topic, spec = self._planned
            self._planned = None
            records = kafka.kafka_records(df, self.value_format)
            unforeseen = self._unforeseen.start(df.sparkSession.sparkContext)
            source, flatten = kafka.topic_source(records, spec, self._fields(df), unforeseen)
            try:
                self._sink(topic, spec.key_fields).write_chained(
                    source, flatten, batch_id, lambda: self._unforeseen.reason(topic)
                )
            except HoodieUnplannedInputError as e:  # a message of a new topic or schema: nothing was committed
                log.info("micro-batch %s planned again: %s", batch_id, e)
            else:
                self._planned = (topic, spec)
                return
        self._write_planned(df, batch_id)

    def _fields(self, df):
        """The accumulator the tasks report the payloads' undeclared fields to (undeclared.py)."""
        return self._undeclared.accumulator(df.sparkSession.sparkContext)

    def _write_planned(self, df, batch_id):
        """The micro-batch read once (kept on the executors), its topics and schemas found by one small job, then
        each topic's table written."""
        from pyspark import StorageLevel

        records = kafka.kafka_records(df, self.value_format).persist(StorageLevel.MEMORY_AND_DISK)
        flattened = []
        try:
            with _task_errors():
                found = kafka.discover(records, frozenset(self.schemas), self.value_format)
            plans = [(topic, self._spec(topic, entry)) for topic, entry in sorted(found.items())]
            plans = [(topic, spec) for topic, spec in plans if spec is not None]
            if len(plans) == 1:  # one table: its own commit is atomic, the events are decoded as it writes them
                topic, spec = plans[0]
                source, flatten = kafka.topic_source(records, spec, self._fields(df))
                self._sink(topic, spec.key_fields).write_chained(source, flatten, batch_id)
                if len(found) == 1:  # the next micro-batch of this topic and schemas goes in one pass
                    known = tuple(t for t, _ in found[topic]["schemas"]) + tuple(
                        str(i) for i, _ in found[topic][kafka.VALUE_ID]
                    )
                    self._planned = (topic, dataclasses.replace(spec, known_schemas=known))
                return
            # several tables: every topic is decoded (and kept on the executors) before any table is written, so
            # that a message that cannot be read stops the micro-batch with no table changed
            for topic, spec in plans:
                rows = kafka.flatten_topic(records, spec, self._fields(df)).persist(StorageLevel.MEMORY_AND_DISK)
                flattened.append((topic, spec, rows))
                with _task_errors():
                    rows.count()
            for topic, spec, rows in flattened:
                self._sink(topic, spec.key_fields)(rows, batch_id)
        finally:
            for _topic, _spec, rows in flattened:
                rows.unpersist()
            records.unpersist()

    def _sink(self, topic, key_fields):
        sink = self._sinks.get(topic)
        if sink is None:
            sink = HoodieStreamSink(
                self.table_path(topic), self._table_options(topic, key_fields), self.storage_options
            )
            sink.log_name = f"topic {topic!r}, {sink.log_name}"
            self._sinks[topic] = sink
        return sink

    def _spec(self, topic, entry, table_columns=True):
        if topic is None:
            raise HoodieFormatError("a record without a topic in the micro-batch")
        policies = self._debezium_options(topic)
        if self.value_format == "avro":
            return self._avro_spec(topic, entry, policies, table_columns)
        if topic in self.schemas:
            if entry["present"] is None:  # tombstones alone: nothing to write
                return None
            partition, offset = entry["present"]
            envelopes = [(self.schemas[topic], f"topic {topic!r} partition {partition} offset {offset}")]
            value_schema = self.schemas[topic]
        else:
            if entry["bare"] is not None:
                text, (partition, offset) = entry["bare"]
                raise HoodieFormatError(
                    f"topic {topic!r} partition {partition} offset {offset}: the message carries no schema (Kafka "
                    f"Connect's JSON with schemas.enable=false): give the topic's Connect schema in "
                    f"schemas={{{topic!r}: ...}}; message starts {text[:80]!r}"
                )
            envelopes = []
            for text, (partition, offset) in entry["schemas"]:
                where = f"topic {topic!r} partition {partition} offset {offset}"
                try:
                    envelopes.append((json.loads(text), where))
                except ValueError:
                    raise HoodieFormatError(f"{where}: the message's schema is not JSON") from None
            value_schema = None
        if not envelopes:  # tombstones alone: nothing to write
            return None
        key_fields = self._key_fields(topic, entry)
        if not key_fields:
            place = envelopes[0][1]
            raise HoodieConfigError(
                f"{place}: the topic's messages have no Kafka key (a table without a primary key?): name the record "
                f"key in tables={{{topic!r}: {{{RECORD_KEY!r}: 'column,...'}}}}"
            )
        spec = events.topic_spec(topic, envelopes, key_fields, value_schema, **policies)
        return self._with_table_columns(topic, spec, envelopes) if table_columns else spec

    def _avro_spec(self, topic, entry, policies, table_columns):
        if not entry[kafka.VALUE_ID]:  # tombstones alone: nothing to write
            return None
        schemas, envelopes = {}, []
        for schema_id, (partition, offset) in entry[kafka.VALUE_ID]:
            where = f"topic {topic!r} partition {partition} offset {offset}"
            schemas[schema_id] = self.registry.get(schema_id, where)
            envelopes.append((avro_envelope.connect_schema(schemas[schema_id]), where))
        key_fields = self._configured_key(topic)
        for schema_id, (partition, offset) in entry[kafka.KEY_ID]:
            where = f"topic {topic!r} partition {partition} offset {offset}"
            schemas[schema_id] = self.registry.get(schema_id, where)
            if not key_fields:
                key = avro_envelope.connect_schema(schemas[schema_id])
                if key.get("type") != "struct":
                    raise HoodieFormatError(f"{where}: the Kafka key is not a struct of key columns")
                key_fields = [f["field"] for f in key["fields"]]
        if not key_fields:
            raise HoodieConfigError(
                f"{envelopes[0][1]}: the topic's messages have no Kafka key (a table without a primary key?): name "
                f"the record key in tables={{{topic!r}: {{{RECORD_KEY!r}: 'column,...'}}}}"
            )
        spec = events.topic_spec(topic, envelopes, key_fields, value_format="avro", avro_schemas=schemas, **policies)
        return self._with_table_columns(topic, spec, envelopes) if table_columns else spec

    def _configured_key(self, topic):
        given = {**self.options, **self.tables.get(topic, {})}.get(RECORD_KEY)
        return [f.strip() for f in given.split(",") if f.strip()] if given else []

    def _key_fields(self, topic, entry):
        given = self._configured_key(topic)
        if given:
            return given
        if entry["key"] is None:  # no keyed message in the micro-batch (a truncate alone): the table's own key
            return self._table_key(topic)
        text, (partition, offset) = entry["key"]
        where = f"topic {topic!r} partition {partition} offset {offset}"
        try:
            key = json.loads(text)
        except ValueError:
            raise HoodieFormatError(
                f"{where}: the Kafka key {text[:80]!r} is not JSON; name the record key in tables={{{topic!r}: "
                f"{{{RECORD_KEY!r}: ...}}}}"
            ) from None
        if isinstance(key, dict) and "schema" in key and "payload" in key:
            fields = (key.get("schema") or {}).get("fields") or []
            return [f.get("field") for f in fields]
        if isinstance(key, dict):
            return list(key)
        raise HoodieFormatError(f"{where}: the Kafka key {text[:80]!r} is not a struct of key columns")

    def _table_key(self, topic):
        """The record key fields of the topic's table when it exists ([] when not)."""
        try:
            writer = HoodieWriter(storage_for(self.table_path(topic), self.storage_options))
        except HoodieError:  # no table yet
            return []
        return list(writer.config.record_key_fields)

    def _with_table_columns(self, topic, spec, envelopes):
        """The spec checked against the table's columns and with those the batch's events lack (a column dropped at
        the source stays in the table, null in new rows). A column whose type changed in a way Hudi cannot follow
        is an error naming the topic, the column and the first record of that schema."""
        try:
            writer = HoodieWriter(storage_for(self.table_path(topic), self.storage_options))
        except HoodieError:  # no table yet
            return spec
        table = avro_to_arrow_schema(writer.avro_schema())
        for schema, where in envelopes:
            rows = events.row_schema(events.row_fields(schema, where), spec.variable_scale)
            for f in rows:
                if f.name in table.names and not _follows(table.field(f.name).type, f.type):
                    raise HoodieFormatError(
                        f"{where}: column {f.name!r} is {f.type} in the change events but "
                        f"{table.field(f.name).type} in the table {self.table_path(topic)}, a change Hudi cannot "
                        f"follow (ints widen to longer ints, float to double, decimals to more digits in the same Avro "
                        f"fixed size); no table "
                        f"was changed"
                    )
        added = {n for n, _ in events.added_columns(spec.connector)}
        missing = [
            f for f in table if f.name not in META_FIELDS and f.name not in added and f.name not in spec.schema.names
        ]
        if not missing:
            return spec
        rows = [f for f in spec.schema if f.name not in added] + [pa.field(f.name, f.type) for f in missing]
        schema = events.table_schema(pa.schema(rows), spec.connector, f"topic {topic!r}")
        return dataclasses.replace(spec, schema=schema)


def _follows(table_type, event_type):
    """Whether a table column of `table_type` can take `event_type` values: the same, narrower (written as the
    table's) or wider as Hudi lets a table evolve (a decimal only within its Avro fixed's size)."""
    if pa.types.is_timestamp(table_type) and pa.types.is_timestamp(event_type):
        return True  # the table's Avro keeps no zone: read back as UTC
    to = events.wider(table_type, event_type)
    if to is not None and pa.types.is_decimal(to) and not to.equals(table_type):
        return decimal_widens(table_type, to)
    return to is not None


def flatten(
    df: "DataFrame",
    topic: str | None = None,
    options: Mapping[str, Any] | None = None,
    tables: Mapping[str, Mapping[str, Any]] | None = None,
    schemas: Mapping[Any, Any] | None = None,
    value_format: str = "json",
    schema_registry_url: str | None = None,
) -> "DataFrame":
    """The rows of one Debezium topic of a Kafka-source DataFrame, as DebeziumSink writes them (row columns, Hudi's
    Debezium columns, `_event_order`, `_hoodie_is_deleted`), for those who route tables themselves. `topic` may be
    left out when the DataFrame holds one; the other arguments are DebeziumSink's. Runs one small Spark job to find
    the schemas."""
    sink = DebeziumSink(
        "", options, tables=tables, schemas=schemas, value_format=value_format, schema_registry_url=schema_registry_url
    )
    records = kafka.kafka_records(df, value_format)
    with _task_errors():
        found = kafka.discover(records, frozenset(sink.schemas), value_format)
    if topic is None:
        if len(found) != 1:
            raise HoodieConfigError(f"flatten: the DataFrame holds the topics {sorted(found)}; name one (topic=)")
        topic = next(iter(found))
    entry = found.get(topic)
    spec = None if entry is None else sink._spec(topic, entry, table_columns=False)
    if spec is None:
        raise HoodieFormatError(f"flatten: topic {topic!r} has no change event in the DataFrame")
    return kafka.flatten_topic(records, spec)
