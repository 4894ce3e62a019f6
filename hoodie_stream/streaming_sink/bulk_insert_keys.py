"""The keys a bulk insert write task placed: pre-combined across the task's runs, then saved as index state.

A write task receives every record of its key groups (the shuffle is by key group, as the chain's), sorted by
partition and key, and pre-combines each run of one key in one partition as it goes. A key can still meet the task
in more than one run: in two partitions (with the global index, a key lives in one partition), or in the runs of
an unsorted input (`write.bulk_insert.sort_input=false`). Such keys are combined here once the task has seen its
input: the greatest (ordering value, arrival) wins, as in the bucket assigner; the runs that lost were already
written to base files, so they are deleted again in the same instant (a DELETE block in their file group, applied by
arrival). A delete that wins removes the key. Duplicates are only possible when partitions or an unsorted input
allow them: otherwise nothing but the key, its key group and its file is kept per record.

The winners' locations are saved per key group at the commit's instant: a full state file per key group when the
table had no data (no state to merge with), else the key group's state updated as the bucket assigner updates it (a
delta, or a full file on its turn). Every key group belongs to one task, so no two tasks write one key group.
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..bucket_assign.assigner import index_storage
from ..chain.columns import KEY, KEY_GROUP, PARTITION, SEQ
from ..checkpoints import index_state, key_index
from ..format.util.runs import run_ends, runs

LOOKUP, GROUP, CODE, ORDERING = "key", "kg", "code", "ordering"
DELETED = -1  # the code of a run whose winner is a delete (nothing written)


class WrittenKeys:
    """Lookup key, key group and file (a code into the task's files) of every run winner a task placed."""

    def __init__(self, global_index, track, ordering_field=None, event_time=False):
        self.global_index = global_index
        self.track = track  # keys may meet the task in more than one run: combined in `placed`
        self.ordering_field = ordering_field if event_time else None
        self.parts = []

    def lookup_keys(self, rows):
        """The index's key of each row: the record key (global index), else partition path and record key."""
        if self.global_index:
            return rows[KEY]
        return pc.binary_join_element_wise(rows[PARTITION], rows[KEY], "\u0001")

    def record(self, rows, code):
        """Rows written to the file of `code` (DELETED: run winners that are deletes, written nowhere)."""
        if not rows.num_rows or (code == DELETED and not self.track and not self.ordering_field):
            return
        columns = {
            LOOKUP: _owned(self.lookup_keys(rows)),
            GROUP: _owned(rows[KEY_GROUP]),
            CODE: pa.array(np.full(rows.num_rows, code, np.int32)),
        }
        if self.ordering_field:  # event-time ordering: the index keeps each key's ordering value
            columns[ORDERING] = _owned(rows[self.ordering_field])
        if self.track:
            columns[SEQ] = _owned(rows[SEQ])
        self.parts.append(pa.table(columns))

    def placed(self):
        """(winners, losers): tables of lookup key, key group and file code, one row per key that stays (codes of
        written files), and the runs that lost to another run of their key but were written (to be deleted)."""
        if not self.parts:
            empty = pa.table(
                {LOOKUP: pa.array([], pa.string()), GROUP: pa.array([], pa.int32()), CODE: pa.array([], pa.int32())}
            )
            return empty, empty
        table = pa.concat_tables(self.parts, promote_options="permissive")
        self.parts = []
        if not self.track:  # every key met the task once (its deletes kept only with their ordering value)
            return _written(table, tombstones=True), table.slice(0, 0)
        keys = table[LOOKUP].combine_chunks()
        hashes = key_index.key_hashes(keys)
        tombstones = ORDERING in table.column_names  # deletes kept with their ordering value (event-time order)
        if len(np.unique(hashes)) == table.num_rows:  # distinct hashes: distinct keys, every run is the only one
            return _written(table, tombstones), table.slice(0, 0)
        sort_keys = [(LOOKUP, "ascending")]
        if ORDERING in table.column_names:
            sort_keys.append((ORDERING, "ascending"))
        sort_keys.append((SEQ, "ascending"))
        order = pc.sort_indices(table, sort_keys=sort_keys).to_numpy()
        last = order[run_ends(pc.take(keys, pa.array(order)))]
        lost = np.ones(table.num_rows, bool)
        lost[last] = False
        winners = table.take(pa.array(np.sort(last)))
        losers = table.filter(pa.array(lost))
        return _written(winners, tombstones), _written(losers)


def _owned(values):
    """The values in buffers of their own: a column of an input batch is a slice of the batch's whole message body,
    which a kept slice would keep in memory (~100 bytes a record instead of the ~20 kept here)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return pa.concat_arrays([values])


def _written(table, tombstones=False):
    """The rows of a table of placed keys that went to a file, and with `tombstones` the winning deletes too (kept
    in the index with their ordering value and no location)."""
    columns = [LOOKUP, GROUP, CODE] + ([ORDERING] if ORDERING in table.column_names else [])
    codes = table[CODE]
    if tombstones or not pc.any(pc.equal(codes, DELETED)).as_py():
        return table.select(columns)
    return table.filter(pc.not_equal(codes, DELETED)).select(columns)


def record_keys_of(losers, global_index):
    """The record keys of lookup keys (the part after the partition path without the global index)."""
    keys = losers[LOOKUP]
    if global_index:
        return keys
    return pc.list_element(pc.split_pattern(keys, "\u0001", max_splits=1), 1)


def save_index(storage, instant, winners, partitions, file_ids, committed=None):
    """Save the placed keys in the index state of their key groups at `instant`. `partitions` and `file_ids`: the
    partition path and file id of each file code. `committed`: the table's committed instants when it has data
    (each key group's state is loaded and updated), None for an empty table (a full file per key group)."""
    if not winners.num_rows:
        return []
    by_group = pc.sort_indices(winners[GROUP])
    winners = winners.take(by_group).combine_chunks()
    codes = winners[CODE].chunk(0)
    if pc.any(pc.equal(codes, DELETED)).as_py():  # deletes kept by their ordering value: no location
        codes = pc.if_else(pc.equal(codes, DELETED), pa.scalar(None, pa.int32()), codes)
    columns = {
        "key": winners[LOOKUP],
        "partition": pa.DictionaryArray.from_arrays(codes, pa.array(partitions, pa.string())),
        "file_id": pa.DictionaryArray.from_arrays(codes, pa.array(file_ids, pa.string())),
    }
    if ORDERING in winners.column_names:
        columns[key_index.ORDERING] = winners[ORDERING]
    state = pa.table(columns)
    groups, bounds = runs(winners[GROUP].chunk(0))
    if committed is None:
        for i, kg in enumerate(groups):
            index_state.save_full(storage, kg, instant, state.slice(bounds[i], bounds[i + 1] - bounds[i]))
        return groups
    listed = index_storage(storage, groups[0])
    loaded = index_state.load_indexes(listed, groups, committed)
    for i, kg in enumerate(groups):
        change = key_index.coded(state.slice(bounds[i], bounds[i + 1] - bounds[i])).combine_chunks()
        index, deltas = loaded[kg]
        index_state.save_state(listed, kg, instant, index.updated(change), change, deltas)
    return groups
