"""Wall time of the write chain's three Spark stages (key-by, bucket assign, write), from Spark's status store.

The chain is one Spark action (`collect` of the write results) of three stages split by its two shuffles, so the
driver cannot time them apart; Spark's status store can: the jobs the action ran are those carrying the micro-batch's
own job tag (`chain.job_tags`, one per micro-batch, so that finding them costs the same whatever number of jobs the
store retains), their stages (skipped ones aside) are key-by, assign and write in stage id order, and each has a
submission and a completion time. The store is fed by Spark's listener bus, a little after
the stages end: the times are read when asked (`seconds()`), None until the store has them all, or when Spark
does not tell (Spark Connect, a chain that ran other than three stages).
"""

from __future__ import annotations

import logging
from typing import Any

CHAIN_STAGES = ("key_by", "assign", "write")
log = logging.getLogger("hoodie_stream")


class ChainJobs:
    """The Spark jobs of one run of the chain: `ChainJobs(sc, tag)` before the action, `done()` after it; `tag`:
    the micro-batch's job tag (`chain.job_tags.tagged_jobs`)."""

    def __init__(self, sc: Any, tag: str) -> None:
        self._sc = sc
        self._tag = tag
        self._before = self._jobs()
        self.job_ids: list[int] = []
        self.stage_ids: list[int] | None = None
        self._seconds: dict[str, float] | None = None

    def _jobs(self) -> set[int] | None:
        """The ids of the jobs carrying the tag. (Not those of the thread's job group: a streaming query's group
        holds every job the store retains, up to spark.ui.retainedJobs, each id a call into the JVM.)"""
        try:
            return set(self._sc._jsc.sc().statusTracker().getJobIdsForTag(self._tag))
        except Exception:  # Spark Connect: no status tracker here
            return None

    def done(self) -> None:
        """Note the stages of the jobs that ran since the start."""
        after = self._jobs()
        if after is None or self._before is None:
            return
        ids: set[int] = set()
        tracker = self._sc.statusTracker()
        self.job_ids = sorted(after - self._before)
        for job in self.job_ids:
            info = tracker.getJobInfo(job)
            if info is not None:
                ids.update(info.stageIds)
        self.stage_ids = sorted(ids)

    def seconds(self) -> dict[str, float] | None:
        """{key_by, assign, write: wall seconds} of the chain's stages, once Spark's status store has them."""
        if self._seconds is not None or not self.stage_ids:
            return self._seconds
        try:
            tracker = self._sc.statusTracker()
            for job in self.job_ids:  # a job's end reaches the store after its stages' ends
                info = tracker.getJobInfo(job)
                if info is None or info.status != "SUCCEEDED":
                    return None
            store = self._sc._jsc.sc().statusStore()
            spans = []
            for stage in self.stage_ids:
                try:
                    data = store.lastStageAttempt(stage)
                except Exception:  # never submitted: skipped
                    continue
                if str(data.status().toString()) != "COMPLETE" or not data.completionTime().isDefined():
                    continue  # skipped (its shuffle output reused)
                spans.append((data.submissionTime().get().getTime(), data.completionTime().get().getTime()))
        except Exception:  # a stopped SparkContext, a store that no longer retains the stages
            log.debug("the chain's stage times could not be read", exc_info=True)
            self.stage_ids = []
            return None
        if len(spans) != len(CHAIN_STAGES):
            self.stage_ids = []  # Spark ran the chain otherwise: not told apart
            return None
        self._seconds = {name: (end - start) / 1000 for name, (start, end) in zip(CHAIN_STAGES, spans)}
        return self._seconds
