"""The size of the Arrow record batches Spark hands a stage's Python function (mapInArrow).

Spark cuts a task's input into record batches of at most `spark.sql.execution.arrow.maxRecordsPerBatch` rows
(10,000 by default) and `spark.sql.execution.arrow.maxBytesPerBatch` bytes, as the session's conf says when the
job's plan is made. A bulk insert task receives millions of rows, and its function pays a fixed cost per batch (the
batch read from the JVM's stream, its runs of one key found, its rows handed to the open files): with batches of
65,536 rows, a 1M-row first load's write tasks read 18 batches instead of 103, and the time they spent reading them
fell from 1.44 to 0.96 s (cProfile, both tasks; benchmarks/README.md). The chain's micro-batches (tens of thousands
of rows per task) showed no difference beyond the noise, and keep Spark's batches.

`batches(session, rows, max_bytes)` raises the row limit to `rows` and lowers the byte limit to `max_bytes` (the
memory a task may give one input batch) for the jobs planned within it, then puts the session's values back. Threads
of one session inside it together share the settings: the last one out restores them.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import Any

ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"

_lock = threading.Lock()
_held: dict[int, list] = {}  # id of a session -> [threads inside, the session's values to restore]


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def _limit(value: Any) -> int:
    """A batch limit of the conf: a number of rows, or of bytes as Spark writes them ("64m", "67108864b"); 0 or
    less: no limit."""
    match = re.fullmatch(r"\s*(-?\d+)\s*([bkmgtp]?)b?\s*", str(value).lower())
    return int(match.group(1)) * _UNITS[match.group(2)] if match else 0


@contextlib.contextmanager
def batches(session: Any, rows: int, max_bytes: int) -> Iterator[None]:
    """Arrow batches of up to `rows` rows and at most `max_bytes` bytes for the jobs planned inside (a user's larger
    row limit or smaller byte limit stays)."""
    key = id(session)
    with _lock:
        held = _held.get(key)
        if held is None:
            saved = {name: session.conf.get(name, None) for name in (ROWS, BYTES)}  # None: not set
            current_rows, current_bytes = _limit(session.conf.get(ROWS)), _limit(session.conf.get(BYTES))
            if 0 < current_rows < rows:
                session.conf.set(ROWS, str(rows))
            if current_bytes <= 0 or current_bytes > max_bytes:
                session.conf.set(BYTES, str(max(1, max_bytes)))
            held = _held[key] = [0, saved]
        held[0] += 1
    try:
        yield
    finally:
        with _lock:
            held[0] -= 1
            if held[0] == 0:
                del _held[key]
                for name, value in held[1].items():
                    if value is None:
                        session.conf.unset(name)
                    else:
                        session.conf.set(name, value)
