"""What the driver reads of the timeline around each micro-batch does not grow with the table's history: the checks
before and after a commit (is the index state current, is a compaction due) read the newest commits only, and a
completed instant this process wrote is never read back from the store (the shared timeline keeps its size and
content, also when its file completed while a newer instant was pending, so that no later listing window covers
it)."""

import pyarrow as pa

from hoodie_stream.checkpoints import index_state, recovery
from hoodie_stream.compaction.plan import should_schedule
from hoodie_stream.format.avro.models import write_container
from hoodie_stream.format.timeline import active_timeline as timeline
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.commit_metadata import CommitMetadata
from hoodie_stream.format.timeline.instant import Instant
from hoodie_stream.format.write.writer import HoodieWriter
from hoodie_stream.options import parse_compaction_options
from hoodie_stream.storage import LocalStorage

SCHEMA = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64())])
EMPTY_PLAN = {"operations": [], "extraMetadata": None, "version": 2, "strategy": None, "preserveHoodieMetadata": True}


class CountingStorage(LocalStorage):
    """A local storage that notes the instant files of the timeline it reads."""

    def __init__(self, root):
        super().__init__(root)
        self.reads = []

    def read(self, path):
        folder, _, name = path.rpartition("/")
        if folder == ".hoodie" and Instant.from_file_name(name) is not None:
            self.reads.append(path)
        return super().read(path)


def delta_commit(storage, n, before_commit=None):
    writer = HoodieWriter(storage)
    txn = writer.start()
    txn.insert_log_only("", pa.table({"id": [n], "city": ["a"], "ts": [n]}, schema=SCHEMA))
    if before_commit is not None:
        before_commit()
    txn.commit()
    return txn.instant


def table_with_compactions(storage, rounds):
    """`rounds` x (a delta commit, then a compaction that completes while the next delta commit is pending), then a
    last delta commit; the index state's LATEST names it."""
    HoodieWriter.create(storage, table_name="t", record_key_fields=["id"], schema=SCHEMA)
    tl = Timeline(storage)
    delta_commit(storage, 0)
    for n in range(rounds):
        plan = tl.create_new("compaction", write_container("HoodieCompactionPlan", EMPTY_PLAN))
        tl.transition_to_inflight(plan, "compaction", b"")

        def complete(plan=plan):
            tl.complete(plan, "compaction", CommitMetadata({}, True, {}, "COMPACT").to_json())

        delta_commit(storage, n + 1, before_commit=complete)
    last = delta_commit(storage, rounds + 1)
    index_state.write_latest(storage, last)
    return last


def test_the_checks_around_a_commit_read_the_same_whatever_the_history(tmp_path):
    opts = parse_compaction_options({"compaction.delta_commits": "5"})
    reads = {}
    for rounds in (2, 12):
        storage = CountingStorage(tmp_path / f"t{rounds}")
        table_with_compactions(storage, rounds)
        tl = Timeline(storage)
        assert len(tl.completed(["commit"])) == rounds
        storage.reads.clear()
        assert recovery.index_is_current(storage, tl)
        due, deltas, _seconds = should_schedule(tl, opts)
        assert (due, deltas) == (False, 2)  # the last compaction completed within the second-to-last delta commit
        reads[rounds] = list(storage.reads)
    assert len(reads[12]) == len(reads[2]) <= 3


def test_index_is_current_moves_latest_forward_over_the_sinks_commits_only(tmp_path):
    storage = CountingStorage(tmp_path / "t")
    last = table_with_compactions(storage, 3)
    tl = Timeline(storage)
    data = [i.timestamp for i in tl.completed(["deltacommit"])]
    index_state.write_latest(storage, data[-3])  # LATEST two data instants behind, a compaction among them
    assert not recovery.index_is_current(storage, tl)  # commits of another writer (no index mark)
    index_state.write_latest(storage, tl.completed(["commit"])[-1].timestamp)  # a compaction: no data instant
    assert not recovery.index_is_current(storage, tl)
    index_state.write_latest(storage, last)
    assert recovery.index_is_current(storage, tl)


def test_a_completed_instant_written_here_is_never_read_back(tmp_path, shared):
    storage = CountingStorage(tmp_path / "t")
    table_with_compactions(storage, 3)
    tl = Timeline(storage)
    metas = [tl.read_commit_metadata(i.timestamp) for i in tl.commits_timeline()]
    assert sum(m.is_compaction for m in metas) == 3
    assert storage.reads == []
    # another process (or this one after an invalidation) lists and reads them once, then keeps them
    timeline.invalidate(storage.uri)
    tl = Timeline(storage)
    for _ in range(2):
        for inst in tl.commits_timeline():
            tl.read_commit_metadata(inst.timestamp)
    assert sorted(storage.reads) == sorted(f".hoodie/{i.file_name}" for i in tl.commits_timeline())
