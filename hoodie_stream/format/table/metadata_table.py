"""The metadata table of a table Hudi wrote, removed before a writer's first commit, as Hudi's own writer removes it
when `hoodie.metadata.enable=false`.

Hudi 0.14/0.15 writers keep a metadata table by default: a MERGE_ON_READ table of its own under `.hoodie/metadata`
(its own `.hoodie/hoodie.properties` and timeline, partitions such as `files`, `column_stats`, `bloom_filters` and
`record_index` holding HFile base files and log files), announced to readers by the data table's
`hoodie.table.metadata.partitions` (partitions ready to read) and `hoodie.table.metadata.partitions.inflight`
(partitions being built). Java readers take the table's file listing from it once `files` is among the ready
partitions; hudi-rs 0.5.0 reads no metadata table of a version-6 table. This project does not maintain one, and a
metadata table left behind would show Java readers a file listing without the files written since. So the writers
that hold the table's lease (the sink before its first micro-batch commits, offline compaction and cleaning) remove
it first, in the order of Hudi's `HoodieTableMetadataUtil.deleteMetadataTable`:

1. `hoodie.properties` is rewritten without the metadata table's keys (`table_config.delete_properties`, Hudi's
   backup protocol): from then on no reader uses the metadata table;
2. `.hoodie/metadata` is deleted.

A removal interrupted at any step is finished by the next writer: an interrupted rewrite of `hoodie.properties` is
recovered (`table_config.recover_properties`), keys still there are removed, a directory still there is deleted.
Readers (`HoodieTable`) never remove it: they list files and ignore the metadata table.
"""

import logging

from ...storage import storage_for
from .config import (
    METADATA_ENABLE,
    METADATA_PARTITIONS,
    METADATA_PARTITIONS_INFLIGHT,
    METADATA_TABLE_DIR,
    TableConfig,
    delete_properties,
    recover_properties,
)

log = logging.getLogger("hoodie_stream")

METADATA_TABLE_KEYS = (METADATA_PARTITIONS, METADATA_PARTITIONS_INFLIGHT, METADATA_ENABLE)


def remove_metadata_table(storage, guard=None):
    """Remove the table's metadata table, if it has one or a removal was interrupted: its keys from
    hoodie.properties, then its directory; log a warning naming the table. Call it holding the table's writer
    lease; `guard` (the lease's `ensure`) runs before each change. Returns True when something was removed or an
    interrupted change finished."""
    storage = storage_for(storage)
    check = guard or (lambda: None)
    check()
    recovered = recover_properties(storage)
    config = TableConfig.load(storage)
    declared = config.metadata_table_keys
    present = storage.exists(METADATA_TABLE_DIR)
    if not declared and not present:
        return recovered
    removed = []
    if declared:
        check()
        delete_properties(storage, [k for k in METADATA_TABLE_KEYS if k in config.props])
        removed.append(f"{', '.join(declared)} from hoodie.properties")
    if present:
        check()
        storage.delete_tree(METADATA_TABLE_DIR)
        removed.append(METADATA_TABLE_DIR)
    log.warning(
        "%s: removed the table's metadata table (%s): hoodie-stream does not maintain a metadata table; readers list "
        "the table's files, as after a Hudi writer with hoodie.metadata.enable=false",
        storage.uri,
        " and ".join(removed),
    )
    return True
