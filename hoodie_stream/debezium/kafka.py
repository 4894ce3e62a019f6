"""Debezium topics read by Spark's Kafka source (or the same columns read from files) into table rows, on the
executors.

`flatten(df, ...)` returns one topic's rows as a DataFrame; `discover(df)` is the small Spark job that finds, per
topic, the distinct value schemas of the micro-batch (JsonConverter messages with their schema) and a key to learn
the record key from: one row per (topic, kind, text), never the messages themselves, reaches the driver.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import HoodieFormatError, in_task
from . import avro_envelope, events, json_envelope, replan, undeclared

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset")
_ENVELOPE = '{"schema":'
VALUE_SCHEMA, KEY, BARE_VALUE, PRESENT = "value_schema", "key", "bare_value", "present"
VALUE_ID, KEY_ID = "value_id", "key_id"  # Avro: the schema ids values and keys name
DISCOVERED = pa.schema(
    [
        ("topic", pa.string()),
        ("kind", pa.string()),
        ("text", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
    ]
)


def kafka_records(df, value_format="json"):
    """The Kafka source's columns with key and value as text (the source gives binary; files may give text), or as
    binary for Avro."""
    from pyspark.sql import functions as F

    missing = [c for c in KAFKA_COLUMNS if c not in df.columns]
    if missing:
        raise HoodieFormatError(
            f"the micro-batch lacks the Kafka source's column(s) {missing} (it has {df.columns}); Debezium topics "
            f"are read with spark.readStream.format('kafka')"
        )
    kind = "binary" if value_format == "avro" else "string"
    return df.select(
        F.col("key").cast(kind).alias("key"),
        F.col("value").cast(kind).alias("value"),
        F.col("topic").cast("string").alias("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
    )


@dataclass(frozen=True)
class Discover:
    """Picklable mapInArrow function: per task, the distinct value schemas per topic (with the first record that
    has each), a first key per topic, and the first bare message of each topic."""

    bare_topics: frozenset  # topics whose messages carry no schema (their schema is given)
    value_format: str = "json"

    @in_task
    def __call__(self, batches):
        seen = {}
        for batch in batches:
            table = pa.Table.from_batches([batch])
            for topic in pc.unique(table["topic"]).to_pylist():
                part = table.filter(pc.equal(table["topic"], topic)) if topic is not None else table
                if self.value_format == "avro":
                    _discover_avro(topic, part, seen)
                else:
                    _discover(topic, part, topic in self.bare_topics, seen)
        rows = list(seen.values())
        if rows:
            yield pa.RecordBatch.from_pylist([dict(zip(DISCOVERED.names, r)) for r in rows], schema=DISCOVERED)


def _discover(topic, records, bare, seen):
    keys = records["key"]
    if keys.null_count < len(keys) and (topic, KEY) not in seen:
        i = pc.index(pc.is_valid(keys), True).as_py()
        seen[(topic, KEY)] = (
            topic,
            KEY,
            keys[i].as_py(),
            records["partition"][i].as_py(),
            records["offset"][i].as_py(),
        )
    live = records.filter(pc.is_valid(records["value"]))
    if live.num_rows == 0:
        return
    if bare:  # the topic's schema is given: its events are there
        if (topic, PRESENT) not in seen:
            seen[(topic, PRESENT)] = (topic, PRESENT, "", live["partition"][0].as_py(), live["offset"][0].as_py())
        return
    values = live["value"].combine_chunks()
    enveloped = pc.starts_with(values, _ENVELOPE)
    if not pc.all(enveloped).as_py():
        i = pc.index(enveloped, False).as_py()
        if (topic, BARE_VALUE) not in seen:
            seen[(topic, BARE_VALUE)] = (
                topic,
                BARE_VALUE,
                values[i].as_py()[:200],
                live["partition"][i].as_py(),
                live["offset"][i].as_py(),
            )
        live = live.filter(enveloped)
        values = live["value"].combine_chunks()
        if not len(values):
            return
    try:
        schemas, _payloads = json_envelope.split_envelopes(values)
    except HoodieFormatError as e:
        row = json_envelope.failed_message(e)
        place = (
            f"topic {topic!r}"
            if row is None
            else f"topic {topic!r} partition {live['partition'][row].as_py()} offset {live['offset'][row].as_py()}"
        )
        raise HoodieFormatError(f"{place}: {e}") from None
    codes = schemas.indices.to_numpy(zero_copy_only=False)
    for code, text in enumerate(schemas.dictionary.to_pylist()):
        if (topic, text) in seen:
            continue
        hits = (codes == code).nonzero()[0]
        if len(hits):
            i = int(hits[0])
            seen[(topic, text)] = (topic, VALUE_SCHEMA, text, live["partition"][i].as_py(), live["offset"][i].as_py())


def _discover_avro(topic, records, seen):
    for column, kind in (("value", VALUE_ID), ("key", KEY_ID)):
        part = records.filter(pc.is_valid(records[column]))
        if part.num_rows == 0:
            continue
        ids, bad = avro_envelope.schema_ids(part[column].combine_chunks())
        if bad is not None:
            raise HoodieFormatError(
                f"topic {topic!r} partition {part['partition'][bad].as_py()} offset {part['offset'][bad].as_py()}: "
                f"the {column} is not in Confluent's Avro wire format (magic byte 0, 4-byte schema id)"
            )
        distinct, first = np.unique(ids, return_index=True)
        for schema_id, i in zip(distinct.tolist(), first.tolist()):
            if (topic, kind, schema_id) not in seen:
                place = (part["partition"][i].as_py(), part["offset"][i].as_py())
                seen[(topic, kind, schema_id)] = (topic, kind, str(schema_id), *place)


def discover(records, bare_topics=frozenset(), value_format="json"):
    """{topic: {"schemas": [(schema text, (partition, offset))], "key": (text, (partition, offset)) or None,
    "bare": (text, (partition, offset)) or None, "present": (partition, offset) of the first event of a topic in
    `bare_topics`, or None}} of a micro-batch (`kafka_records` columns)."""
    rows = records.mapInArrow(Discover(frozenset(bare_topics), value_format), _spark_schema(DISCOVERED)).collect()
    found = {}
    for topic, kind, text, partition, offset in sorted(rows, key=lambda r: (r[0] or "", r[3], r[4])):
        entry = found.setdefault(
            topic, {"schemas": [], "key": None, "bare": None, "present": None, VALUE_ID: [], KEY_ID: []}
        )
        place = (partition, offset)
        if kind == VALUE_SCHEMA:
            if text not in [t for t, _ in entry["schemas"]]:
                entry["schemas"].append((text, place))
        elif kind == KEY:
            entry["key"] = entry["key"] or (text, place)
        elif kind in (VALUE_ID, KEY_ID):
            if int(text) not in [i for i, _ in entry[kind]]:
                entry[kind].append((int(text), place))
        elif kind == PRESENT:
            entry["present"] = entry["present"] or place
        elif kind == BARE_VALUE:
            entry["bare"] = entry["bare"] or (text, place)
    return found


@dataclass(frozen=True)
class Flatten:
    """Picklable mapInArrow function: one topic's Kafka records into its rows (`events.flatten`).
    `undeclared_fields`: the accumulator the payloads' undeclared fields are reported to (undeclared.py), or None;
    `unforeseen`: with a plan made from an earlier micro-batch (`spec.known_schemas`), the accumulator a record the
    plan does not foresee is reported to (replan.py: the task then flattens nothing more), or None to raise
    HoodieUnplannedInputError."""

    spec: events.TopicSpec
    undeclared_fields: Any = None
    unforeseen: Any = None

    @property
    def schema(self):
        """The Arrow schema of the rows."""
        return self.spec.schema

    @in_task
    def __call__(self, batches):
        found: set = set()
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                table = pa.Table.from_batches([batch])
                if self.spec.known_schemas is not None:
                    row = replan.first_unforeseen(table, self.spec)
                    if row is not None:
                        replan.report(self.unforeseen, table, row, self.spec)
                        for _rest in batches:  # read, not flattened: the micro-batch is planned again
                            pass
                        return
                table = events.flatten(table, self.spec, found)
                if table.num_rows:
                    yield from table.to_batches()
        finally:
            undeclared.report(self.undeclared_fields, self.spec.topic, found)


def flatten_topic(records, spec, undeclared_fields=None):
    """The DataFrame of a topic's rows from `kafka_records` columns (all topics or that topic's; with a plan made
    from earlier micro-batches, `spec.known_schemas`, all of them must be that topic's). `undeclared_fields`: the
    accumulator of the payloads' undeclared fields (Flatten)."""
    source, flatten = topic_source(records, spec, undeclared_fields)
    return source.mapInArrow(flatten, _spark_schema(spec.schema))


def topic_source(records, spec, undeclared_fields=None, unforeseen=None):
    """(the Kafka records a topic's rows are made of, the mapInArrow function making them: Flatten), for
    `flatten_topic` or a sink chaining the flatten to its key-by (HoodieStreamSink.write_chained). The accumulators:
    Flatten's."""
    from pyspark.sql import functions as F

    if spec.known_schemas is not None:
        if spec.value_format == "json" and spec.value_schema is None and spec.known_schemas:
            records = _cut_by_schema(records, spec.known_schemas)
        return records, Flatten(spec, undeclared_fields, unforeseen)
    return records.where(F.col("topic") == spec.topic), Flatten(spec, undeclared_fields)


def _cut_by_schema(records, known):
    """JsonConverter messages of known schemas cut to their payload by Spark, on their bytes (each message's first
    bytes compared with each schema's `{"schema":...,"payload":` prefix, then a byte substring), with the schema's
    position in `known` (events.SCHEMA_CODE; -1 for a message of another schema, left whole): the schema, most of a
    message's bytes, never reaches the Python workers. (On text, Spark's substring counts characters: 4x slower.)"""
    from pyspark.sql import functions as F

    raw = F.col("value").cast("binary")
    closed = F.substring(raw, -1, 1) == F.lit(bytearray(b"}"))
    code, payload = F.lit(-1), raw
    for i, text in enumerate(known):
        prefix = ('{"schema":' + text + ',"payload":').encode("utf-8")
        hit = (F.substring(raw, 1, len(prefix)) == F.lit(bytearray(prefix))) & closed
        start = len(prefix) + 1  # Spark's substring counts from 1
        code = F.when(hit, F.lit(i)).otherwise(code)
        payload = F.when(
            hit, F.expr(f"substr(cast(value as binary), {start}, length(cast(value as binary)) - {start})")
        ).otherwise(payload)
    return records.select(
        "key",
        payload.cast("string").alias("value"),
        "topic",
        "partition",
        "offset",
        code.cast("int").alias(events.SCHEMA_CODE),
    )


def _spark_schema(schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
