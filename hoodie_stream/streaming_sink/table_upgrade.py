"""The sink's `hoodie.write.table.version`: a table at a lower version is upgraded to the one asked, as Hudi's
writer upgrades a table when its write version is higher (UpgradeDowngrade): failed writes rolled back, every file
group with log files compacted, then the upgrade (`format/write/upgrade.py`). Only when asked, never silently; a
table at a higher version than asked is refused (tables are not downgraded)."""

from __future__ import annotations

import dataclasses
import logging

from ..checkpoints import recovery
from ..compaction.clean import finish_pending_cleans
from ..compaction.plan import schedule_compaction
from ..compaction.service import run_pending_compactions
from ..errors import HoodieConfigError
from ..format.table.config import TableConfig
from ..format.timeline.active_timeline import Timeline
from ..format.write.upgrade import upgrade

log = logging.getLogger(__name__)
MAX_ROUNDS = 100  # compaction rounds before the upgrade (each plan bounded by compaction.target_io when set)


def upgrade_to_asked(spark, storage, asked, compaction_opts, guard=None):
    """Upgrade the table to version `asked` when it is lower; returns the upgrade's report, or None when nothing
    was to be done. The caller holds the writer lease (`guard()` checks it)."""
    version = TableConfig.load(storage).version
    if asked is None or asked == version:
        return None
    if asked < version:
        raise HoodieConfigError(
            f"option 'hoodie.write.table.version' is {asked} but the table at {storage.uri} is at version {version}; "
            "tables are not downgraded (leave the option unset to write the table at its version)"
        )
    log.warning(
        "%s: upgrading the table from version %s to %s (hoodie.write.table.version)", storage.uri, version, asked
    )
    recovery.rollback_pending_writes(storage, Timeline(storage))
    finish_pending_cleans(storage, Timeline(storage))
    if version < 8:  # a version 6 log file holds several commits' blocks: every one is compacted first, as Hudi does
        opts = dataclasses.replace(compaction_opts, target_io_mb=None)
        run_pending_compactions(spark, storage, opts, guard=guard)
        for _ in range(MAX_ROUNDS):
            if schedule_compaction(storage, Timeline(storage), opts, force=True) is None:
                break
            run_pending_compactions(spark, storage, opts, guard=guard)
    if guard is not None:
        guard()
    return upgrade(storage, asked)
