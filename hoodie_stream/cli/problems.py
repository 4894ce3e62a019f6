"""A problem `validate` found: which check, the file (or key) and the instant it concerns, and what is wrong."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

MAX_PER_CHECK = 50  # problems named per check; the rest are counted


@dataclass(frozen=True)
class Problem:
    check: str  # missing_file, corrupt_log_block, stray_file, pending_compaction, index_state
    path: str  # the file (relative to the table root) or index entry concerned
    instant: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        at = f" (instant {self.instant})" if self.instant else ""
        return f"[{self.check}] {self.path}{at}: {self.message}"


def capped(problems: list[Problem], check: str) -> list[Problem]:
    """At most MAX_PER_CHECK problems, then one that counts the others."""
    if len(problems) <= MAX_PER_CHECK:
        return problems
    rest = len(problems) - MAX_PER_CHECK
    return problems[:MAX_PER_CHECK] + [Problem(check, "...", None, f"and {rest} more problems of this check")]
