"""Offline compaction: `python -m hoodie_stream compact --path P [--schedule] [--run] [--clean]`."""

from ..format.table_config import TableConfig
from ..format.timeline import Timeline
from ..local_spark import local_session_builder
from ..options import parse_compaction_options
from ..storage import storage_for
from . import clean
from .plan import schedule_compaction
from .service import recover, run_pending_compactions


def compact_table(path, schedule=True, run=True, clean_after=False, options=None, spark=None):
    """Schedule a plan (regardless of the trigger) and/or run pending plans on a local Spark. Yields report lines."""
    storage = storage_for(path)
    TableConfig.load(storage).check_writable()
    opts = parse_compaction_options(options)
    reverted = recover(storage)
    for instant in reverted:
        yield f"reverted interrupted compaction {instant} to requested"
    if schedule:
        instant = schedule_compaction(storage, Timeline(storage), opts, force=True)
        yield f"scheduled compaction {instant}" if instant else "nothing to compact (no file slice has log files)"
    if run:
        own = spark is None
        if own:
            spark = local_session_builder("local[*]", "hoodie-stream-compact").getOrCreate()
        try:
            for instant in run_pending_compactions(spark, storage, opts):
                yield f"completed compaction {instant}"
        finally:
            if own:
                spark.stop()
    if clean_after:
        yield f"cleaned {clean.clean(storage, Timeline(storage), opts)} files"
