"""Waiting for the tasks of a failed micro-batch's jobs (chain/job_tags.py), against Spark's own task scheduling."""

import time

import pytest

from hoodie_stream.chain.job_tags import running_tasks, tagged_jobs, wait_for_tasks


def test_the_failed_jobs_other_tasks_are_waited_for(spark):
    """Task 0 fails at once, task 1 sleeps: Spark fails the job while task 1 still runs; the wait returns only once
    Spark has ended it, and jobs run outside the block carry no tag."""

    def tasks(index, rows):
        if index == 0:
            raise ValueError("refused record")
        time.sleep(8)
        yield from rows

    sc = spark.sparkContext
    with tagged_jobs(sc, "test") as tag:
        assert tag in sc.getJobTags()
        with pytest.raises(Exception, match="refused record"):
            sc.parallelize(range(2), 2).mapPartitionsWithIndex(tasks).collect()
        started = time.monotonic()
        # the job is failed, its other task not ended yet
        assert running_tasks(sc, tag) >= 1
        assert wait_for_tasks(sc, tag, timeout_s=60)
        assert running_tasks(sc, tag) == 0
        assert time.monotonic() - started > 0.5
    assert tag not in sc.getJobTags()
    assert sc.parallelize(range(2), 2).count() == 2
    assert len(list(sc._jsc.sc().statusTracker().getJobIdsForTag(tag))) == 1
