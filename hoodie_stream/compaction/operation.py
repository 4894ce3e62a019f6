"""One operation of a compaction plan: a file slice (a base file or none, and its log files) to merge into a new
base file. In the plan it is Hudi's Avro record `HoodieCompactionOperation` (version 2: file names, not paths);
`to_avro()` gives that record exactly as the plan stores it and `from_avro()` reads one back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CompactionOperation:
    file_id: str
    partition: str  # the partition path, "" for a non-partitioned table
    base_instant: str | None  # the slice's base instant
    log_files: tuple[str, ...]  # the slice's log file names (deltaFilePaths), in the partition
    base_file: str | None = None  # the slice's base file name (dataFilePath); None for a log-only slice
    metrics: Mapping[str, float] = field(default_factory=dict)  # TOTAL_LOG_FILES, TOTAL_IO_MB, ...
    bootstrap_file: str | None = None  # bootstrapFilePath (never set by this writer)

    def to_avro(self) -> dict[str, Any]:
        """The HoodieCompactionOperation record."""
        return {
            "baseInstantTime": self.base_instant,
            "deltaFilePaths": list(self.log_files),
            "dataFilePath": self.base_file,
            "fileId": self.file_id,
            "partitionPath": self.partition,
            "metrics": dict(self.metrics),
            "bootstrapFilePath": self.bootstrap_file,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> CompactionOperation:
        """The operation of a HoodieCompactionOperation record (as read from a plan, or its JSON)."""
        return cls(
            file_id=record["fileId"],
            partition=record.get("partitionPath") or "",
            base_instant=record.get("baseInstantTime"),
            log_files=tuple(record.get("deltaFilePaths") or ()),
            base_file=record.get("dataFilePath"),
            metrics=dict(record.get("metrics") or {}),
            bootstrap_file=record.get("bootstrapFilePath"),
        )


def plan_operations(plan: Mapping[str, Any]) -> list[CompactionOperation]:
    """The operations of a HoodieCompactionPlan record."""
    return [CompactionOperation.from_avro(op) for op in plan.get("operations") or []]
