"""Change splits: the input partitions of a changelog (CDC) read, one per file group a window's data-changing
commits wrote (`format.cdc.query.plan_changes`, on the driver); a task reads the group's states from the slices named
and returns its changes (`format.cdc.query.group_changes`): no task lists files or reads the timeline."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..format.cdc.query import GroupChanges, group_changes, plan_changes
from ..format.hoodie_table import HoodieTable


class ChangeSplit(InputPartition):
    """One Spark input partition of a changelog read: the changes of one file group."""

    def __init__(self, plan: GroupChanges) -> None:
        super().__init__(None)
        self.plan = plan

    def __repr__(self) -> str:
        return (
            f"ChangeSplit({self.plan.partition or '<root>'}/{self.plan.file_id}, {len(self.plan.states) - 1} commits)"
        )


def change_splits(table: HoodieTable, start: str | None, end: str | None) -> list[ChangeSplit]:
    """The splits of a changelog read over (start, end] (parsed instant times; None: open)."""
    return [ChangeSplit(plan) for plan in plan_changes(table, start, end)]


def read_change_split(table: HoodieTable, split: ChangeSplit, schema: pa.Schema, flat: bool = False) -> pa.Table:
    """The changes of one split (format.cdc.query.changes_schema rows); `schema`: the table's records' (meta fields
    first)."""
    return group_changes(table, split.plan, schema, flat)
