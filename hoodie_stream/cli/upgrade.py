"""`upgrade PATH --to 8|9`: a version 6 table upgraded to Hudi 1.x's table version 8 or 9 (`format/write/upgrade.py`),
under the table's writer lease. Only when asked: nothing else upgrades a table."""

from __future__ import annotations

from typing import Any

from ..format.table.lock import TableLease
from ..format.write.upgrade import upgrade
from ..options import parse_table_service_options
from ..storage import storage_for


def upgrade_table(
    path: str, to: int, options: dict[str, str] | None = None, storage_options: dict[str, str] | None = None
) -> dict[str, Any]:
    _opts, lock_opts = parse_table_service_options(options)
    storage = storage_for(path, storage_options)
    with TableLease(storage, lock_opts, query="cli-upgrade"):
        return upgrade(storage, to)


def upgrade_text(result: dict[str, Any]) -> str:
    if not result["instants"]:
        return (
            f"{result['table']}: already at table version {result['version']} ({result['deleted']} old files removed)"
        )
    archived = (
        f", {result['archived']} archived instants converted into .hoodie/timeline/history/"
        if result.get("archived")
        else ""
    )
    return (
        f"{result['table']}: upgraded to table version {result['version']}: {result['instants']} timeline files moved "
        f"to .hoodie/timeline/{archived}, {len(result['properties'])} properties changed, {result['deleted']} old "
        "files removed"
    )
