"""What `validate` compares: the data files a table holds (one listing per partition), the files its completed
commits name, the files its completed cleans and rollbacks deleted, the files the plans of its pending cleans
delete, and the state of each instant time."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..format.file_group.file_names import parse_base_file_name, parse_log_file_name
from ..format.file_group.fs_view import list_partitions
from ..format.hoodie_table import HoodieTable
from ..format.timeline.instant import COMPLETED, REQUESTED, Instant
from ..storage import join


def _name(path: str) -> str:
    return str(path).replace("\\", "/").rpartition("/")[2]


@dataclass
class TableFiles:
    listed: dict[str, int] = field(default_factory=dict)  # relative path -> size, of every base and log file
    written: dict[str, str] = field(default_factory=dict)  # relative path -> the completed instant naming it
    deleted: set[str] = field(default_factory=set)  # file names completed cleans and rollbacks deleted
    # file names the plans of pending cleans delete (a clean a crash interrupted, finished by the next writer or
    # service: some may be gone already)
    cleaning: set[str] = field(default_factory=set)
    neutralized: set[str] = field(default_factory=set)  # log files a rollback kept, its command block cancelling them
    rolled_back: set[str] = field(default_factory=set)  # instants completed rollbacks rolled back
    completed: set[str] = field(default_factory=set)  # completed commit-like instants (compactions included)
    completed_other: set[str] = field(default_factory=set)  # completed instants of other actions (rollbacks...)
    pending: set[str] = field(default_factory=set)  # instants of any action not completed
    timeline_start: str | None = None  # the earliest instant of the active timeline (older ones are archived)
    archived: set[str] = field(default_factory=set)  # instants with a completed record in the archived timeline

    def instant_state(self, ts: str) -> str:
        """completed, pending, archived (before the active timeline), rolled_back or unknown (a failed write)."""
        if ts in self.completed or ts in self.completed_other:
            return "completed"
        if ts in self.pending:
            return "pending"
        if ts in self.archived or self.timeline_start is None or ts < self.timeline_start:
            return "archived"
        return "rolled_back" if ts in self.rolled_back else "unknown"


def table_files(table: HoodieTable) -> TableFiles:
    timeline = table.timeline
    out = TableFiles()
    for partition in list_partitions(table.storage):
        for info in table.storage.list(partition):
            if parse_base_file_name(info.name) or parse_log_file_name(info.name):
                out.listed[join(partition, info.name)] = int(info.size)
    out.timeline_start = min((i.timestamp for i in timeline.instants), default=None)
    out.archived = table.archived_timeline().completed_times()
    out.pending = {i.timestamp for i in timeline.instants if i.state != COMPLETED}
    out.completed_other = {i.timestamp for i in timeline.completed()}
    for inst in timeline.commits_timeline():
        out.completed.add(inst.timestamp)
        meta = timeline.read_commit_metadata(inst.timestamp)
        for partition, stats in meta.partition_to_write_stats.items():
            for stat in stats:
                if stat.path:
                    rel = stat.path if "/" in stat.path or not partition else join(partition, stat.path)
                    out.written.setdefault(rel.lstrip("/"), inst.timestamp)
    for inst in timeline.completed(["clean", "rollback"]):
        meta = timeline.read_avro(inst)
        for record in meta if isinstance(meta, list) else [meta]:
            if inst.action == "rollback":
                out.rolled_back.update(record.get("commitsRollback") or [])
            for pm in (record.get("partitionMetadata") or {}).values():
                out.deleted.update(_name(p) for p in pm.get("successDeleteFiles") or [])
                for key in ("rollbackLogFiles", "logFilesFromFailedCommit"):
                    out.neutralized.update(_name(p) for p in pm.get(key) or {})
                if inst.action == "clean":
                    out.deleted.update(_name(p) for p in pm.get("deletePathPatterns") or [])
    for inst in timeline.pending(["clean"]):
        plans = timeline.read_avro(Instant(inst.timestamp, "clean", REQUESTED))
        for plan in plans if isinstance(plans, list) else [plans]:
            for infos in (plan.get("filePathsToBeDeletedPerPartition") or {}).values():
                out.cleaning.update(_name(info["filePath"]) for info in infos or [])
            for names in (plan.get("filesToBeDeletedPerPartition") or {}).values():  # plans of version 1
                out.cleaning.update(_name(name) for name in names or [])
    return out
