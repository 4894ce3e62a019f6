"""`timeline`, `commits` and `slices`: hudi-cli's `timeline show active`, `commits show` and `show fsview latest`,
from the Arrow tables of `format/table_info.py`."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..format.instant import COMMIT_ACTIONS, COMPLETED
from ..format.reader import HoodieTable
from ..format.table_info import commits, file_slices

TIMELINE_COLUMNS = ["instant", "action", "state", "requested_time", "inflight_time", "completed_time"]
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
]


def timeline(table: HoodieTable) -> pa.Table:
    """Every instant of the active timeline in its highest state, with its times."""
    return commits(table).select(TIMELINE_COLUMNS)


def completed_commits(table: HoodieTable, limit: int | None = None) -> pa.Table:
    """The completed commit, delta commit and replace commit instants with what they wrote (newest last; the last
    `limit` only when given)."""
    info = commits(table)
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
