"""The one builder of local SparkSessions: the demo, offline compaction, the tests and the benchmarks use it.

Its Python workers run this interpreter (the one that has hoodie_stream installed, not `python3` from the PATH), the
Spark UI and console progress are off, the session time zone is UTC, jobs are scheduled FAIR (by pools), and shuffles use as many partitions as the master
has cores (not Spark's 200). Pyspark is imported only when a builder is asked for.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["local_cores", "local_session_builder"]


def local_cores(master: str) -> int:
    """Cores of a `local`, `local[N]` or `local[*]` master (the machine's for `*`); 2 for any other master."""
    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if not m:
        return 2
    if m.group(1) is None:
        return 1
    return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))


def local_session_builder(
    master: str = "local[2]",
    app: str = "hoodie-stream",
    conf: Mapping[str, str | int | float | bool] | None = None,
) -> SparkSession.Builder:
    """A SparkSession builder for `master` whose Python workers run this interpreter; `conf` adds or overrides
    Spark settings. Sets PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON in this process's environment, which the
    SparkContext reads when it starts."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    cores = str(local_cores(master))
    settings: dict[str, str | int | float | bool] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": cores,
        "spark.default.parallelism": cores,
        "spark.scheduler.mode": "FAIR",  # the sink's micro-batches and async compaction share the cores by weight
    }
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)  # pyspark writes booleans as true/false
    return builder
