"""Recovery before a micro-batch writes: roll back what a crash left pending, and make the index state current.

- Rollbacks a crash interrupted are finished; inflight or requested delta commits are rolled back (their files
  deleted through a Hudi rollback instant), and the index state files they wrote are removed.
- The index state covers the table when `LATEST` names the newest completed data instant. Otherwise (a crash
  between commit and `LATEST`, a table Apache Hudi wrote, state files lost) it is rebuilt by a Spark job that
  scans the latest file slices on the executors and writes a full state file per key group.
"""

import json

import pyarrow as pa
import pyarrow.compute as pc

from ..chain.key_groups import key_group_expr
from ..errors import HoodieError, in_task, task_errors_rebuilt
from ..format.file_group.file_names import parse_log_file_name
from ..format.file_group.fs_view import FileSlice, FileSystemView
from ..format.hoodie_table import HoodieTable
from ..format.record.merge import EVENT_TIME_ORDERING, merge_mode
from ..format.table.config import TableConfig
from ..format.table.markers import MARKERS_ROOT, marker_dir
from ..format.timeline.active_timeline import Timeline
from ..format.util.runs import run_ends
from ..format.util.string_buffers import constant_strings
from ..format.write.rollback import finish_pending_rollbacks, rollback_instant
from ..storage import storage_for
from ..storage.local import is_temp_name
from . import index_state
from .key_index import ORDERING

WRITE_ACTIONS = ("deltacommit", "commit", "replacecommit")


def remove_leftovers(storage):
    """Delete what killed writers and table services leave behind and no reader uses: temp files of log, base,
    marker and timeline writes, and marker directories of completed instants (one listing of the marker
    directories, not one per instant). Only safe while nothing writes to the table."""
    storage = storage_for(storage)
    for info in storage.list("", recursive=True, temp=True):
        if info.path.startswith((".hoodie/metadata/", ".hoodie/.aux/")):
            continue
        if is_temp_name(info.name):
            storage.delete(info.path)
    completed = {inst.timestamp for inst in Timeline(storage).completed()}
    for instant in storage.list_dirs(MARKERS_ROOT):
        if instant in completed:
            storage.delete_tree(marker_dir(instant))


def rollback_pending_writes(storage, timeline):
    """Finish interrupted rollbacks and roll back pending write instants. Returns the instants rolled back."""
    timeline.reload()
    finish_pending_rollbacks(storage, timeline)
    timeline.reload()
    done = []
    for inst in timeline.pending(list(WRITE_ACTIONS)):
        # index state files first: once the instant has left the timeline, a file of it left behind by a crash
        # would count as committed when its instant is older than the active timeline (archived, CommittedInstants)
        index_state.remove_instant(storage, inst.timestamp)
        rollback_instant(storage, timeline, inst)
        done.append(inst.timestamp)
        timeline.reload()
    return done


def latest_data_instant(timeline):
    """Newest completed instant that placed records (compaction commits keep file ids and do not count)."""
    for inst in reversed(timeline.commits_timeline()):
        if inst.action == "commit":
            meta = timeline.read_commit_metadata(inst.timestamp)
            if meta.is_compaction:
                continue
        return inst.timestamp
    return None


INDEX_MARK = "_hoodie_stream_index_state"


def _is_compaction(timeline, inst):
    return inst.action == "commit" and timeline.read_commit_metadata(inst.timestamp).is_compaction


def index_is_current(storage, timeline):
    """True when the index state covers every completed data instant.

    `LATEST` is written after each commit; a crash in between leaves it one instant behind although that instant
    saved its index deltas before committing. When every data instant after `LATEST` was written by this sink
    (its commits carry INDEX_MARK), `LATEST` is simply moved forward. Anything else (commits by another writer, no
    `LATEST` at all on a non-empty table) needs a rebuild. The commits are read newest first, down to `LATEST`'s:
    the check before each micro-batch costs the same whatever the timeline's length.
    """
    recorded = index_state.read_latest(storage)
    later = []  # the data instants after `recorded`, newest first
    for inst in reversed(timeline.commits_timeline()):
        if _is_compaction(timeline, inst):
            continue
        if inst.timestamp == recorded:
            break
        later.append(inst)
    else:  # `recorded` is not a data instant of the timeline: current only when there is none
        return not later
    if not later:
        return True
    for inst in later:
        if timeline.read_commit_metadata(inst.timestamp).extra_metadata.get(INDEX_MARK) != "1":
            return False
    index_state.write_latest(storage, later[0].timestamp)
    return True


class _ReadKeys:
    """mapInArrow: file slices in, (lookup key, partition, file id) of their records out, with their ordering value
    in a table ordered by event time (`ordering`: the field, else None)."""

    def __init__(self, storage, committed, global_index, ordering=None):
        self.storage = storage
        self.committed = committed
        self.global_index = global_index
        self.ordering = ordering

    @in_task
    def __call__(self, batches):
        table = HoodieTable(self.storage)
        schema = table.arrow_schema()
        for batch in batches:
            for row in batch.to_pylist():
                logs = [parse_log_file_name(n) for n in json.loads(row["logs"])]
                fs = FileSlice(row["partition"], row["file_id"], row["base_instant"], row["base_file"] or None, logs)
                # deleted keys stay in the index (routed to the file group holding their delete), so a late
                # write with a smaller ordering value meets the delete, as it would have without the rebuild
                records = table.read_slice(fs, self.committed, schema, keep_deletes=True)
                record_keys = records["_hoodie_record_key"].combine_chunks()
                live = pc.invert(records["__hs_del"]).combine_chunks()
                parts = constant_strings(row["partition"], records.num_rows)
                keys = record_keys
                if not self.global_index:
                    keys = pc.binary_join_element_wise(parts, record_keys, "\u0001")
                columns = [keys, parts, constant_strings(row["file_id"], records.num_rows), record_keys, live]
                names = ["key", "partition", "file_id", "record_key", "live"]
                if self.ordering:
                    columns.append(records[self.ordering].combine_chunks())
                    names.append(ORDERING)
                yield pa.record_batch(columns, names=names)


class _WriteStates:
    """mapInArrow: (key, partition, file id, key group) in, one full state file per key group; yields groups."""

    def __init__(self, storage, instant):
        self.storage = storage
        self.instant = instant

    @in_task
    def __call__(self, batches):
        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not tables:
            return
        table = pa.concat_tables(tables)
        groups = pc.unique(table["kg"]).to_pylist()
        for kg in groups:
            state = _one_location_per_key(table.filter(pc.equal(table["kg"], kg)))
            index_state.save_full(self.storage, kg, self.instant, state)
        yield pa.record_batch([pa.array(groups, pa.int32())], names=["kg"])


def _one_location_per_key(table):
    """A key found in several file groups (a delete left in its old partition after a move) maps to the file
    group holding it live; among deletes only, to the greatest file id (deterministic)."""
    columns = ["key", "partition", "file_id"] + ([ORDERING] if ORDERING in table.column_names else [])
    if table.num_rows == 0:
        return table.select(columns)
    order = pc.sort_indices(table, sort_keys=[("key", "ascending"), ("live", "ascending"), ("file_id", "ascending")])
    keys = pc.take(table["key"], order).combine_chunks()
    return table.take(pc.take(order, pa.array(run_ends(keys)))).select(columns)


def _ordering_of(storage):
    """(ordering field, its column's DDL for the key rows) of a table ordered by event time, else (None, "")."""
    from pyspark.sql.pandas.types import from_arrow_type

    try:
        mode, field = merge_mode(TableConfig.load(storage).props)
        schema = HoodieTable(storage).arrow_schema() if mode == EVENT_TIME_ORDERING and field else None
    except HoodieError:  # an unreadable table: the rebuild's tasks say why, each reading its file slices
        return None, ""
    if schema is None:
        return None, ""
    if field not in schema.names:
        return None, ""
    return field, f", {ORDERING} {from_arrow_type(schema.field(field).type).simpleString()}"


def rebuild_index(spark, storage, timeline, key_groups, global_index, tasks):
    """Rebuild the index state from the table's latest file slices, as of the newest completed data instant."""
    from pyspark.sql import functions as F

    latest = latest_data_instant(timeline)
    if latest is None:
        return None
    committed = timeline.committed_instants()
    storage = storage_for(storage)
    view = FileSystemView(storage, timeline)
    rows = [
        (fs.partition, fs.file_id, fs.base_instant, fs.base_file or "", json.dumps(fs.log_file_names()))
        for fs in view.latest_slices()
    ]
    written = []
    if rows:
        slices = spark.createDataFrame(
            rows, "partition string, file_id string, base_instant string, base_file string, logs string"
        )
        slices = slices.repartition(min(len(rows), max(1, tasks * 2)))
        ordering, ordering_ddl = _ordering_of(storage)
        keys = slices.mapInArrow(
            _ReadKeys(storage, committed, global_index, ordering),
            "key string, partition string, file_id string, record_key string, live boolean" + ordering_ddl,
        )
        keys = keys.withColumn("kg", F.expr(key_group_expr(key_groups, "record_key")))
        with task_errors_rebuilt():  # an error of a task is raised as itself
            written = [
                r.kg
                for r in keys.repartition(tasks, "kg").mapInArrow(_WriteStates(storage, latest), "kg int").collect()
            ]
    for kg in set(range(key_groups)) - set(written):
        index_state.save_full(storage, kg, latest, index_state.empty_state())
    index_state.prune(storage, range(key_groups), committed)
    index_state.write_latest(storage, latest)
    return latest
