"""Spark job tags on a micro-batch's (or a compaction's) jobs, to wait for their tasks after a failure.

When a task fails, Spark fails its job at once and only asks the job's other running tasks to stop: a task writing
files can go on for a while. Before the driver rolls a failed instant back (or removes the table a failed first
micro-batch created), it waits until none of those tasks runs any more, so that the rollback finds what they wrote.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("hoodie_stream.chain")

# how long a failed micro-batch waits for the tasks Spark asked to stop (Spark stops a Python worker that does not
# answer the kill after spark.python.task.killTimeout, 2 s by default)
STOP_WAIT_S = 30.0


def new_tag(what: str) -> str:
    """A tag no other job carries, naming `what` its jobs do."""
    return f"hoodie-stream-{what}-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def tagged_jobs(sc: Any, what: str, tag: str | None = None) -> Iterator[str]:
    """Tag the Spark jobs this thread starts inside the block (with `tag`, or a new one); yields the tag."""
    tag = tag or new_tag(what)
    sc.addJobTag(tag)
    try:
        yield tag
    finally:
        sc.removeJobTag(tag)


def running_tasks(sc: Any, tag: str) -> int:
    """How many tasks of the jobs tagged `tag` still run (as the driver's status store knows it)."""
    tracker = sc._jsc.sc().statusTracker()
    running = 0
    for job_id in tracker.getJobIdsForTag(tag):
        job = tracker.getJobInfo(job_id)
        if job.isEmpty():
            continue
        if str(job.get().status()) == "RUNNING":  # its end (and every task start before it) is not in the store yet
            running += 1
        for stage_id in job.get().stageIds():
            stage = tracker.getStageInfo(stage_id)
            if not stage.isEmpty():
                running += int(stage.get().numActiveTasks())
    return running


def wait_for_tasks(sc: Any, tag: str, timeout_s: float = STOP_WAIT_S) -> bool:
    """Wait until no task of the jobs tagged `tag` runs; False (logged) when some still ran after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    while True:
        try:
            left = running_tasks(sc, tag)
        except Exception:  # the context is stopping: nothing runs any more
            log.debug("could not read the status of the jobs tagged %s", tag, exc_info=True)
            return True
        if not left:
            return True
        if time.monotonic() >= deadline:
            log.warning(
                "%d task(s) of the failed jobs tagged %s still ran after %.0f s; cleaning up anyway",
                left,
                tag,
                timeout_s,
            )
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
