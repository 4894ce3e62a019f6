"""Fields a JSON payload holds that the schema its message carries does not declare.

Kafka Connect's JsonConverter reads a struct by its schema's fields and passes over any other field of the payload
(`JsonConverter.convertToConnect`); the sink does the same, and says so once per topic and field: the tasks that meet
such fields add (topic, field) to a Spark accumulator, which the driver reads after each micro-batch and logs what is
new (`UndeclaredFields`). Without an accumulator (`flatten()` outside a sink) each Python worker logs them once.
"""

import logging

log = logging.getLogger("hoodie_stream")

_logged_here: set = set()  # (topic, field) this process logged (tasks without an accumulator)


class _Union:
    """AccumulatorParam of frozensets (PySpark takes any object with `zero` and `addInPlace`)."""

    def zero(self, value):
        return frozenset()

    def addInPlace(self, value1, value2):  # noqa: N802 (PySpark's name)
        return frozenset(value1) | frozenset(value2)


def message(topic, field):
    """The log line of one undeclared field."""
    return (
        f"topic {topic!r}: field {field!r} of the payloads is not declared by the schema their messages carry; it is "
        f"ignored, as Kafka Connect's JsonConverter ignores it"
    )


def report(accumulator, topic, fields):
    """In a task: the undeclared `fields` (paths) met in `topic`, added to `accumulator`, or logged here once."""
    if not fields:
        return
    if accumulator is not None:
        accumulator.add(frozenset((topic, f) for f in fields))
        return
    for field in sorted(fields):
        if (topic, field) not in _logged_here:
            _logged_here.add((topic, field))
            log.warning(message(topic, field))


class UndeclaredFields:
    """On the driver: the accumulator the tasks report to, and the (topic, field) pairs logged so far."""

    def __init__(self) -> None:
        self._accumulator = None
        self._context = None
        self._logged: set = set()

    def __getstate__(self):
        return {"_accumulator": None, "_context": None, "_logged": set(self._logged)}

    def accumulator(self, spark_context):
        """The accumulator of `spark_context` (made on first use, again for another context)."""
        if self._accumulator is None or self._context is not spark_context:
            self._accumulator = spark_context.accumulator(frozenset(), _Union())
            self._context = spark_context
        return self._accumulator

    def log_new(self):
        """Logs, once each, the (topic, field) pairs the tasks reported since the last call; returns them."""
        if self._accumulator is None:
            return []
        new = sorted(set(self._accumulator.value) - self._logged)
        for topic, field in new:
            log.warning(message(topic, field))
        self._logged.update(new)
        return new
