"""Spark scheduler pools the sink's jobs run in, so that ingestion and async compaction share the executors by weight.

With `spark.scheduler.mode=FAIR` the sink creates its pools on the driver's task scheduler the first time it needs
them: `hoodie_write` (weight 2) for micro-batches, `hoodie_compaction` (weight 1) for compaction keeping pace, and
`hoodie_compaction_catch_up` (weight 2) for compaction that fell behind. A pool the session already has (declared in
the user's `spark.scheduler.allocation.file`) is used as declared. In FIFO mode (Spark's default) pools do not
exist: jobs run in submission order and the compaction service falls back to yielding between micro-batches.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("hoodie_stream.scheduler")

POOL_PROPERTY = "spark.scheduler.pool"
WRITE_POOL = "hoodie_write"
COMPACTION_POOL = "hoodie_compaction"
CATCH_UP_POOL = "hoodie_compaction_catch_up"
# pool -> (weight, minShare) the sink creates it with
POOLS = {WRITE_POOL: (2, 0), COMPACTION_POOL: (1, 0), CATCH_UP_POOL: (2, 0)}


def fair_scheduling(sc: Any) -> bool:
    """Whether the SparkContext schedules its jobs by pools (`spark.scheduler.mode=FAIR`)."""
    # the context's own conf: getConf() copies every entry into a new SparkConf, a JVM call per entry
    conf = getattr(sc, "_conf", None)
    if conf is None:
        conf = sc.getConf()
    return str(conf.get("spark.scheduler.mode", "FIFO")).upper() == "FAIR"


def ensure_pool(sc: Any, name: str) -> bool:
    """Create pool `name` with the weight and minShare of POOLS unless the scheduler has it. Returns True when the
    pool exists (created now or declared by the user), False in FIFO mode."""
    if not fair_scheduling(sc):
        return False
    root = sc._jsc.sc().taskScheduler().rootPool()
    if root.getSchedulableByName(name) is None:
        weight, min_share = POOLS[name]
        scheduler = sc._jvm.org.apache.spark.scheduler
        root.addSchedulable(scheduler.Pool(name, scheduler.SchedulingMode.withName("FAIR"), min_share, weight))
        log.info("created Spark scheduler pool %s (weight %d, minShare %d)", name, weight, min_share)
    return True


def pool_weight(sc: Any, name: str) -> int | None:
    """The weight of an existing pool, None when the scheduler has no such pool."""
    pool = sc._jsc.sc().getPoolForName(name)
    return int(pool.get().weight()) if pool.isDefined() else None


@contextlib.contextmanager
def in_pool(sc: Any, name: str, keep_callers: bool = False) -> Iterator[str | None]:
    """Run this thread's Spark jobs in pool `name` (created if need be) and restore the thread's pool after.
    With `keep_callers`, a pool the caller already chose for this thread wins. Yields the pool used (None: FIFO)."""
    previous = sc.getLocalProperty(POOL_PROPERTY)
    if (keep_callers and previous) or not ensure_pool(sc, name):
        yield previous
        return
    sc.setLocalProperty(POOL_PROPERTY, name)
    try:
        yield name
    finally:
        sc.setLocalProperty(POOL_PROPERTY, previous)
