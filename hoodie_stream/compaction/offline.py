"""Offline compaction and cleaning (archiving after it): `python -m hoodie_stream compact --path P [--schedule] [--run]
[--clean]`.

The run holds the table's writer lease (`format/table/lock.py`) from start to end, as a sink does: it waits up
to `hoodie.write.lock.wait_time_ms` for a running writer, then fails naming it. Holding it, no other writer runs:
it first removes what killed writers and services left and no reader uses (the storage layer's temporary files of
timeline, marker and data files, marker directories of completed instants), rolls back the pending delta commits
a dead writer left (a holder whose lease it took over), as a sink's next micro-batch would, and removes a metadata
table the table has (`format/table/metadata_table.py`), as Hudi's writer with hoodie.metadata.enable=false.
"""

from ..checkpoints.recovery import remove_leftovers, rollback_pending_writes
from ..format.table.config import TableConfig
from ..format.table.lock import TableLease
from ..format.table.metadata_table import remove_metadata_table
from ..format.timeline.active_timeline import Timeline
from ..local_spark import local_session_builder
from ..options import parse_table_service_options
from ..storage import storage_for
from .archiver import clean_and_archive
from .plan import pending_plans, schedule_compaction
from .service import recover, run_pending_compactions


def _nothing_to_schedule(pending):
    """Why no plan was written: no slice has log files, or only slices that pending plans hold have them."""
    if pending:
        return f"no new compaction plan: every file slice with log files is in pending compaction {', '.join(pending)}"
    return "nothing to compact (no file slice has log files)"


def compact_table(path, schedule=True, run=True, clean_after=False, options=None, spark=None, storage_options=None):
    """Schedule a plan (regardless of the trigger) and/or run pending plans on a local Spark. Yields report lines,
    one per outcome: a plan scheduled, or why none was (unless pending plans are run then), and each compaction
    completed; Spark starts only when there is a plan to run."""
    storage = storage_for(path, storage_options)
    opts, lock_opts = parse_table_service_options(options)
    TableConfig.load(storage)  # a location that holds no table is refused before the lease is taken
    with TableLease(storage, lock_opts, query="offline-compaction") as lease:
        remove_leftovers(storage)
        for instant in rollback_pending_writes(storage, Timeline(storage)):
            yield f"rolled back delta commit {instant}, left pending by a writer that stopped"
        if remove_metadata_table(storage, guard=lease.ensure):
            yield "removed the metadata table: hoodie-stream does not maintain one, readers list the table's files"
        reverted = recover(storage)
        for instant in reverted:
            yield f"reverted interrupted compaction {instant} to requested"
        scheduled = None
        if schedule:
            lease.ensure()
            scheduled = schedule_compaction(storage, Timeline(storage), opts, force=True)
        pending = sorted(pending_plans(Timeline(storage)))
        if scheduled:
            yield f"scheduled compaction {scheduled}"
        elif schedule and not (run and pending):
            yield _nothing_to_schedule(pending)
        if run and not pending:
            if not schedule:
                yield "no pending compaction plan to run"
        elif run:
            own = spark is None
            if own:
                spark = local_session_builder("local[*]", "hoodie-stream-compact").getOrCreate()
            try:
                for instant in run_pending_compactions(spark, storage, opts, guard=lease.ensure):
                    yield f"completed compaction {instant}"
            finally:
                if own:
                    spark.stop()
        if clean_after:
            lease.ensure()
            yield f"cleaned {clean_and_archive(storage, opts)} files"


def clean_table(path, options=None, storage_options=None):
    """Run the cleaner once under the writer lease. Returns the number of files removed."""
    storage = storage_for(path, storage_options)
    opts, lock_opts = parse_table_service_options(options)
    TableConfig.load(storage)  # a location that holds no table is refused before the lease is taken
    with TableLease(storage, lock_opts, query="offline-clean") as lease:
        remove_leftovers(storage)
        rollback_pending_writes(storage, Timeline(storage))
        remove_metadata_table(storage, guard=lease.ensure)
        recover(storage)
        lease.ensure()
        return clean_and_archive(storage, opts)
