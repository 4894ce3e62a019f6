"""`timeline`, `commits` and `slices`: hudi-cli's `timeline show active` and `commits show` (each with the archived
instants first, as `timeline show archived` and `commits showarchived` list them; the column `archived` tells them
apart) and `show fsview latest`, from the Arrow tables of `format/views/table_info.py`."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..format.hoodie_table import HoodieTable
from ..format.timeline.instant import COMMIT_ACTIONS, COMPLETED
from ..format.views.table_info import archived_commits, commits, file_slices

TIMELINE_COLUMNS = ["instant", "action", "state", "requested_time", "inflight_time", "completed_time", "archived"]
COMMIT_COLUMNS = [
    "instant",
    "action",
    "operation",
    "completed_time",
    "partitions_written",
    "files_written",
    "log_files_written",
    "records_written",
    "records_inserted",
    "records_updated",
    "records_deleted",
    "records_moved",
    "bytes_written",
    "batch_id",
    "archived",
]


def with_archived(table: HoodieTable) -> pa.Table:
    """The rows of `commits` for the archived instants then the active ones, with a boolean column `archived` (an
    instant on both, left by an interrupted archiving run, shows as active)."""
    active = commits(table)
    archived = archived_commits(table)
    if archived.num_rows:
        keys = pa.array([f"{i}/{a}" for i, a in zip(active["instant"].to_pylist(), active["action"].to_pylist())])
        both = pc.binary_join_element_wise(archived["instant"], archived["action"], "/")
        archived = archived.filter(pc.invert(pc.is_in(both, value_set=keys)))
    flags = [False] * active.num_rows
    out = pa.concat_tables([archived, active])
    return out.append_column("archived", pa.array([True] * archived.num_rows + flags, pa.bool_()))


def timeline(table: HoodieTable) -> pa.Table:
    """Every instant of the archived and the active timeline in its highest state, with its times."""
    return with_archived(table).select(TIMELINE_COLUMNS)


def completed_commits(table: HoodieTable, limit: int | None = None) -> pa.Table:
    """The completed commit, delta commit and replace commit instants, archived ones included, with what they wrote
    (newest last; the last `limit` only when given)."""
    info = with_archived(table)
    done = pc.and_(
        pc.equal(info["state"], COMPLETED), pc.is_in(info["action"], value_set=pa.array(list(COMMIT_ACTIONS)))
    )
    info = info.filter(done).select(COMMIT_COLUMNS)
    if limit is not None and info.num_rows > limit:
        info = info.slice(info.num_rows - limit)
    return info


def latest_slices(table: HoodieTable, partition: str | None = None) -> pa.Table:
    """The latest file slice of every file group (of one partition when given)."""
    slices = file_slices(table)
    if partition is not None:
        slices = slices.filter(pc.equal(slices["partition"], partition))
    return slices
