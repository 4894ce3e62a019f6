"""The index check of `validate`: the keyed index state (`checkpoints/index_state.py`) against the latest snapshot.

The state as of now is read as the writers read it (per key group: the newest full file of a completed instant and
the deltas after it, the newest row of a key winning), without changing anything (no pruning, no cache). Then:
- every key the latest snapshot holds is in the index at its partition and file id;
- every key the index places (with a location) is held there by the table: live, or as a delete the slice still
  holds, or in a file group whose base file a compaction wrote (a deleted key stays routed to its file group
  after the compaction dropped its delete). Entries with no location (a delete that came before any record of
  its key) are tombstones and are not checked.
Index keys are record keys with the global index (the default), else `<partition path>\\x01<record key>`: which one
is told by the keys themselves.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..checkpoints import index_state
from ..checkpoints.index_state import INDEX_DIR
from ..format.file_group.fs_view import FileSystemView
from ..format.hoodie_table import HoodieTable
from ..format.util.runs import run_ends
from ..format.util.string_buffers import constant_strings
from .problems import Problem
from .progress import progress

SEPARATOR = "\u0001"  # between partition path and record key in the keys of a non-global index
_DELETED = "__hs_del"


def _latest_rows(tables: list[pa.Table]) -> pa.Table:
    """Key, partition, file id of each key's last row among `tables` (applied in order)."""
    plain = [
        pa.table({c: t[c].cast(pa.string()) for c in ("key", "partition", "file_id")}) for t in tables if t.num_rows
    ]
    if not plain:
        return pa.table({c: pa.array([], pa.string()) for c in ("key", "partition", "file_id")})
    table = pa.concat_tables(plain)
    table = table.append_column("row", pa.array(range(table.num_rows), pa.int64()))
    table = table.sort_by([("key", "ascending"), ("row", "ascending")])
    return table.take(pa.array(run_ends(table["key"].combine_chunks()))).drop_columns(["row"])


def read_index(table: HoodieTable, committed: AbstractSet[str], show_progress: bool | None = None) -> pa.Table | None:
    """(key, partition, file_id, key_group) of the index state as of the completed instants; None without one."""
    storage = table.storage
    by_dir: dict[str, list[Any]] = {}
    for info in storage.list(INDEX_DIR, recursive=True):
        parent = info.path.rpartition("/")[0]
        if parent != INDEX_DIR:
            by_dir.setdefault(parent, []).append(info)
    if not by_dir:
        return None
    groups = []
    for directory in progress(sorted(by_dir), "validate index state", total=len(by_dir), enabled=show_progress):
        full, delta, chosen, _stale = index_state._state_files(by_dir[directory], committed)
        newest = full[-1] if full else ""
        names = ([(newest, "full")] if newest else []) + [(d, "delta") for d in delta if d > newest]
        tables = [index_state._read_path(storage, chosen[n].path, chosen[n]) for n in names]
        state = _latest_rows(tables)
        groups.append(state.append_column("key_group", constant_strings(directory.rpartition("/")[2], state.num_rows)))
    return pa.concat_tables(groups)


def _compaction_instants(table: HoodieTable) -> set[str]:
    out = set()
    for inst in table.timeline.completed(["commit"]):
        meta = table.timeline.read_commit_metadata(inst.timestamp)
        if meta.is_compaction:
            out.add(inst.timestamp)
    return out


def table_keys(
    table: HoodieTable, committed: AbstractSet[str], global_index: bool
) -> tuple[pa.Table, set[tuple[str, str]]]:
    """(key, partition, file_id, live) of every record of the latest slices (deletes the slices hold included), and
    the (partition, file id) of the file groups whose latest base file a compaction wrote."""
    compactions = _compaction_instants(table)
    schema = table.arrow_schema()
    parts, compacted = [], set()
    for fs in FileSystemView(table.storage, table.timeline).latest_slices():
        if fs.base_file and fs.base_instant in compactions:
            compacted.add((fs.partition, fs.file_id))
        records = table.read_slice(fs, committed, schema, keep_deletes=True)
        keys = records["_hoodie_record_key"].combine_chunks().cast(pa.string())
        partition = constant_strings(fs.partition, records.num_rows)
        if not global_index:
            keys = pc.binary_join_element_wise(partition, keys, SEPARATOR)
        parts.append(
            pa.table(
                {
                    "key": keys,
                    "partition": partition,
                    "file_id": constant_strings(fs.file_id, records.num_rows),
                    "live": pc.invert(records[_DELETED].combine_chunks()),
                }
            )
        )
    if not parts:
        empty = pa.array([], pa.string())
        return pa.table({"key": empty, "partition": empty, "file_id": empty, "live": pa.array([], pa.bool_())}), set()
    return pa.concat_tables(parts), compacted


def _is_global(index: pa.Table) -> bool:
    placed = index.filter(pc.is_valid(index["file_id"]))["key"]
    if len(placed) == 0:
        return True
    return not pc.all(pc.match_substring(placed, SEPARATOR)).as_py()


def _entry(key: str, partition: str | None, file_id: str | None) -> str:
    return f"index key {key.replace(SEPARATOR, '/')!r} -> {partition or '(root)'}/{file_id}"


def check_index(table: HoodieTable, show_progress: bool | None = None) -> tuple[int, list[Problem]]:
    """(index entries checked, problems); (0, []) when the table has no index state."""
    committed = table.timeline.committed_instants()
    index = read_index(table, committed, show_progress)
    if index is None:
        return 0, []
    latest = index_state.read_latest(table.storage)
    problems = []
    dup = pc.value_counts(index["key"])
    for item in dup.filter(pc.greater(dup.field("counts"), 1)).to_pylist():
        problems.append(Problem("index_state", INDEX_DIR, latest, f"key {item['values']!r} is in several key groups"))
    expected, compacted = table_keys(table, committed, _is_global(index))
    held = expected.filter(expected["live"])
    idx = index.rename_columns(["key", "i_partition", "i_file_id", "key_group"])
    # every live key of the table is in the index, at its file group
    joined = held.join(idx, "key", join_type="left outer")
    same = pc.and_kleene(
        pc.equal(joined["i_file_id"], joined["file_id"]), pc.equal(joined["i_partition"], joined["partition"])
    )
    wrong = joined.filter(pc.invert(pc.fill_null(same, False)))
    for row in wrong.sort_by("key").to_pylist():
        where = f"{row['partition'] or '(root)'}/{row['file_id']}"
        if row["i_file_id"] is None:
            message = f"the table holds key {row['key']!r} in file group {where}; the index state does not have it"
        else:
            message = f"{_entry(row['key'], row['i_partition'], row['i_file_id'])}, but the table holds it in {where}"
        problems.append(Problem("index_state", INDEX_DIR, latest, message))
    # every placed index key is held by the table at that location (live, as a delete, or compacted away)
    placed = idx.filter(pc.is_valid(idx["i_file_id"]))
    placed = placed.filter(pc.invert(pc.is_in(placed["key"], value_set=held["key"])))
    there = expected.select(["key", "partition", "file_id"]).rename_columns(["key", "i_partition", "i_file_id"])
    there = there.append_column("there", pa.array(np.ones(there.num_rows, bool)))
    checked = placed.join(there, ["key", "i_partition", "i_file_id"], join_type="left outer")
    for row in checked.filter(pc.is_null(checked["there"])).sort_by("key").to_pylist():
        if (row["i_partition"], row["i_file_id"]) in compacted:
            continue
        message = f"{_entry(row['key'], row['i_partition'], row['i_file_id'])}, but the table does not hold it there"
        problems.append(Problem("index_state", INDEX_DIR, latest, message))
    return index.num_rows, problems
