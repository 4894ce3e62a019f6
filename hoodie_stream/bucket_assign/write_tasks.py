"""Which write task writes which file group in a micro-batch.

Every file group is written by exactly one write task in a micro-batch (all its records are shuffled to that task),
as in Hudi's Flink writer. A hash of the file id decides that in Flink; on a table of a few large file groups a
hash can leave one task with most of the batch while the others idle. So the coordinator balances the file groups
over the write tasks before the micro-batch: by the records each received in the recent delta commits, largest
first, each to the least loaded task. A file group without recent writes (a new one) goes by a hash of its file id.

The bucket assigner tags each record with its write task (`task_tags.py`), and Spark's repartitioning by the tag
delivers it there. Correctness never depends on the tags: any tag that is a function of the file id keeps each
file group on one task; only the balance does.
"""

import heapq

import pyarrow as pa
import pyarrow.compute as pc

from ..chain.task_tags import task_tags
from .small_files import owner_task


def recent_loads(commits):
    """{file id: records written} over the given delta commits' metadata (records and deletes)."""
    loads = {}
    for meta in commits:
        for s in meta.all_write_stats():
            if s.records > 0:
                loads[s.file_id] = loads.get(s.file_id, 0) + s.records
    return loads


class WritePlan:
    """file id -> write task for one micro-batch; picklable, shipped to the bucket-assign tasks."""

    def __init__(self, num_tasks, loads=None):
        self.num_tasks = num_tasks
        self.tasks = balance(loads or {}, num_tasks)
        self._tags = task_tags(num_tasks)

    def task_of(self, file_id):
        task = self.tasks.get(file_id)
        return owner_task(file_id, self.num_tasks) if task is None else task

    def tags(self, file_ids):
        """The int32 partition tag of each file id (an Arrow string array): Spark's repartition by the tag sends
        the record to its file group's write task."""
        if isinstance(file_ids, pa.ChunkedArray):
            file_ids = file_ids.combine_chunks()
        distinct = pc.unique(file_ids)
        tags = pa.array([self._tags[self.task_of(f)] for f in distinct.to_pylist()], pa.int32())
        return pc.take(tags, pc.index_in(file_ids, value_set=distinct))


def balance(loads, num_tasks):
    """{file id: task}: file groups by load, largest first (ties by file id), each to the least loaded task
    (ties to the lowest task)."""
    heap = [(0, t) for t in range(num_tasks)]
    out = {}
    for file_id, load in sorted(loads.items(), key=lambda kv: (-kv[1], kv[0])):
        total, task = heapq.heappop(heap)
        out[file_id] = task
        heapq.heappush(heap, (total + load, task))
    return out
