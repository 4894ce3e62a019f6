"""The messages a micro-batch holds that the plan it is written with does not foresee.

After a micro-batch of one topic, DebeziumSink writes the next in one pass with that micro-batch's plan (its topic and
schemas), with no job reading it first. Each task checks the records it flattens (`first_unforeseen`, vectorized on
the Arrow batches it reads anyway): one that meets a message of another topic, or of a schema the plan does not know,
reports that message to a Spark accumulator (`report`) and flattens nothing more, without failing. The driver reads
the accumulator once the tasks have run, before the commit (`Unforeseen.reason`): a message there abandons the
micro-batch's instant and the micro-batch is planned again. An expected re-plan so makes no task fail and Spark logs
no executor error, and the common case, a micro-batch the plan foresees, costs no job and no second read.
"""

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import HoodieUnplannedInputError
from . import events
from .avro_envelope import HEADER, MAGIC


def first_unforeseen(records, spec):
    """The row of the first record of `records` (an Arrow table of `kafka.kafka_records` columns, JSON cut to its
    payloads by Spark: events.SCHEMA_CODE) that the plan `spec` (made from an earlier micro-batch:
    `spec.known_schemas`) does not foresee: a record of another topic, or a value of a schema the plan does not know
    (JSON: a schema text, by the code Spark gave it; Avro: the schema id of the value or of the key). None when the
    plan holds for every record."""
    unforeseen = pc.invert(pc.fill_null(pc.equal(records["topic"], spec.topic), False))
    values = records["value"]
    if spec.value_format == "avro":
        known = {int(i) for i in spec.known_schemas}
        unforeseen = pc.or_(unforeseen, _unknown_ids(values, known))
        unforeseen = pc.or_(unforeseen, _unknown_ids(records["key"], set(spec.avro_schemas or {})))
    elif events.SCHEMA_CODE in records.column_names:  # JSON with its schema (kafka._cut_by_schema): -1 for another
        other = pc.less(pc.fill_null(records[events.SCHEMA_CODE], -1), 0)
        unforeseen = pc.or_(unforeseen, pc.and_(pc.is_valid(values), other))
    if not pc.any(unforeseen).as_py():
        return None
    return pc.index(unforeseen, True).as_py()


def _unknown_ids(column, known):
    """Whether each Avro message of `column` (binary, nulls allowed: not unknown) starts with another header than
    Confluent's wire format gives the schema ids `known` (magic byte 0, the 4-byte big-endian id): an unknown id, or
    not that format (the plan made again names it)."""
    headers = pa.array([bytes([MAGIC]) + int(i).to_bytes(4, "big") for i in sorted(known)], pa.binary())
    heads = pc.binary_slice(column.cast(pa.binary()), 0, HEADER)
    return pc.and_(pc.is_valid(column), pc.invert(pc.is_in(heads, value_set=headers)))


class FirstOf:
    """AccumulatorParam of the first unforeseen message: (partition, offset, topic), the least kept (PySpark takes
    any object with `zero` and `addInPlace`)."""

    def zero(self, value):
        return None

    def addInPlace(self, value1, value2):  # noqa: N802 (PySpark's name)
        if value1 is None or value2 is None:
            return value1 if value2 is None else value2
        return min(value1, value2)


def report(accumulator, records, row, spec):
    """In a task: the unforeseen record at `row` of `records`, added to `accumulator`; without an accumulator (a plan
    used outside DebeziumSink), HoodieUnplannedInputError naming it."""
    place = (records["partition"][row].as_py(), records["offset"][row].as_py(), records["topic"][row].as_py())
    if accumulator is None:
        raise HoodieUnplannedInputError(describe(place, spec.topic))
    accumulator.add(place)


def describe(place, planned_topic):
    """The text of an unforeseen message: `topic 'x' partition 0 offset 12 is not in the plan of topic 'y' (a new
    schema)`."""
    partition, offset, topic = place
    return (
        f"topic {topic!r} partition {partition} offset {offset} is not in the plan of topic {planned_topic!r} "
        f"(a new {'schema' if topic == planned_topic else 'topic'})"
    )


class Unforeseen:
    """On the driver: the accumulator the tasks of a micro-batch written with a plan report to, emptied before each
    such micro-batch."""

    def __init__(self) -> None:
        self._accumulator = None
        self._context = None

    def __getstate__(self):
        return {"_accumulator": None, "_context": None}

    def start(self, spark_context):
        """The accumulator of `spark_context` (made on first use, again for another context), emptied."""
        if self._accumulator is None or self._context is not spark_context:
            self._accumulator = spark_context.accumulator(None, FirstOf())
            self._context = spark_context
        self._accumulator.value = None
        return self._accumulator

    def reason(self, planned_topic):
        """Once the tasks have run: the text of the first unforeseen message they met, None when they met none."""
        place = None if self._accumulator is None else self._accumulator.value
        return None if place is None else describe(place, planned_topic)
