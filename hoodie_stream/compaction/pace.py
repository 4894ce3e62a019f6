"""The pace of async compaction, measured, and the plan IO budget it sets when `compaction.target_io` is unset.

A plan should complete before the trigger comes round again, or plans pile up. The budget is the measured pace
(MB of plan IO, TOTAL_IO_MB, compacted a second of a plan's run by one compaction task; an exponential average over
the plans run) times the compaction tasks the next plan runs with, times the trigger's interval (the median seconds between recent delta commits times `compaction.delta_commits`, or
`compaction.delta_seconds`, as the trigger strategy combines them), times MARGIN. Before any plan ran, the pace is
assumed at INITIAL_MB_PER_TASK a second per compaction task. A plan always takes at least its first operation
(see `plan.order_and_bound`: overdue slices first, then the most log bytes), so every slice is compacted in turn.
"""

from __future__ import annotations

import statistics
import time
from collections import deque

MARGIN = 0.7
INITIAL_MB_PER_TASK = 8.0  # plan IO a second of one compaction task sharing its core: a starting estimate
SMOOTHING = 0.5  # weight of the newest plan's pace in the average
COMMITS_KEPT = 20


class CompactionPace:
    def __init__(self, opts, clock=time.monotonic):
        self.opts = opts
        self.clock = clock
        self.mb_per_second: float | None = None  # per compaction task
        self._commits: deque[float] = deque(maxlen=COMMITS_KEPT)

    def delta_committed(self) -> None:
        """A delta commit completed now."""
        self._commits.append(self.clock())

    def compacted(self, io_mb: float, seconds: float, tasks: int = 1) -> None:
        """A plan of `io_mb` MB of IO ran in `seconds` with `tasks` compaction tasks at once."""
        if io_mb <= 0 or seconds <= 0:
            return
        pace = io_mb / seconds / max(1, tasks)
        old = self.mb_per_second
        self.mb_per_second = pace if old is None else SMOOTHING * pace + (1 - SMOOTHING) * old

    def seconds_between_commits(self) -> float | None:
        """The median time between the recent delta commits (a slow first load does not skew it)."""
        times = list(self._commits)
        if len(times) < 2:
            return None
        return statistics.median(b - a for a, b in zip(times, times[1:]))

    def plan_interval_seconds(self) -> float | None:
        """Seconds until the trigger strategy schedules the next plan, as the recent delta commits go."""
        opts = self.opts
        gap = self.seconds_between_commits()
        by_num = None if gap is None else gap * opts.delta_commits
        by_time = float(opts.delta_seconds)
        if opts.trigger == "num_commits":
            return by_num
        if opts.trigger == "time_elapsed":
            return by_time
        if by_num is None:
            return by_time if opts.trigger == "num_and_time" else None
        return max(by_num, by_time) if opts.trigger == "num_and_time" else min(by_num, by_time)

    def plan_budget_mb(self, tasks: int) -> float | None:
        """The IO budget of the next plan (None: not enough measured yet to bound it)."""
        interval = self.plan_interval_seconds()
        if interval is None:
            return None
        pace = self.mb_per_second if self.mb_per_second is not None else INITIAL_MB_PER_TASK
        return pace * tasks * interval * MARGIN
