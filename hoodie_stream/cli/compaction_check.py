"""`validate`'s pending_compaction check: a pending compaction plan that cannot run.

A plan runs only when every base and log file its operations name exists and its marker directory
(`.hoodie/.temp/<instant>/`) holds only marker names (the storage layer's own temporary files are not listed).
A plan that cannot run keeps failing, and the file groups it holds are left out of every later plan
(`compaction/plan.py` skips file groups in a pending compaction): they are never compacted again.
"""

from __future__ import annotations

from ..compaction.operation import plan_operations
from ..compaction.plan import pending_plans
from ..format.hoodie_table import HoodieTable
from ..format.table.markers import invalid_markers, marker_dir
from ..storage import join
from .problems import Problem
from .table_files import TableFiles


def _stuck(instant: str, groups: int) -> str:
    return f"pending compaction {instant} cannot run; its {groups} file group(s) are left out of every later plan"


def check_pending_compactions(table: HoodieTable, files: TableFiles) -> tuple[int, list[Problem]]:
    """(pending plans checked, problems): each file a plan names that does not exist, each marker entry that is not
    a marker name."""
    plans = pending_plans(table.timeline)
    out = []
    for instant, plan in plans.items():
        ops = plan_operations(plan)
        for op in ops:
            names = ([op.base_file] if op.base_file else []) + list(op.log_files)
            for name in names:
                path = join(op.partition, name) if op.partition else name
                if path not in files.listed:
                    message = f"named by the plan (file group {op.file_id}), but does not exist: " + _stuck(
                        instant, len(ops)
                    )
                    out.append(Problem("pending_compaction", path, instant, message))
        for entry in invalid_markers(table.storage, instant):
            message = "in the plan's marker directory, but not a marker name: " + _stuck(instant, len(ops))
            out.append(Problem("pending_compaction", join(marker_dir(instant), entry), instant, message))
    return len(plans), out
