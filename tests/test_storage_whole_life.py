"""The table's whole life — create, stream (upserts, deletes, partition moves), roll back a failed write, compact,
clean, read — against a storage that records every call and keeps its objects where no path built from the
table's location could find them: nothing bypasses the storage layer.

Checked three ways: (1) the table works at all (a bypass would miss the objects: `rec://` is no local path and the
objects are stored under reversed names), and reads back exactly as a plain-Python model and, after copying it out
under its real names, as hudi-rs reads it; (2) on the driver, an audit hook sees every file operation Python makes on
the backing directory and finds each one inside hoodie_stream/storage/; (3) the recorded calls include the table's
writes from the Spark tasks and every kind of operation the layer offers.
"""

import os
import sys

import pytest
from pyspark import cloudpickle

import recording_storage
from hoodie_stream import HoodieStreamSink, HoodieTable, HoodieWriter
from oracle import rs_read
from recording_storage import RecordingStorage, read_calls
from stream_model import COLUMNS, OPTIONS, TableModel, events_df, generate_batches, table_rows

cloudpickle.register_pickle_by_value(recording_storage)

_AUDIT = {"watch": None, "bypass": [], "seen": 0}
_STORAGE_DIR = os.path.join("hoodie_stream", "storage") + os.sep


def _audit(event, args):
    watch = _AUDIT["watch"]
    if watch is None or not args or event not in _FILE_EVENTS:
        return
    paths = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
    if not any(os.fsdecode(p).startswith(watch) for p in paths):
        return
    _AUDIT["seen"] += 1
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if _STORAGE_DIR in filename or filename.endswith("recording_storage.py"):
            return
        frame = frame.f_back
    _AUDIT["bypass"].append((event, [os.fsdecode(p) for p in paths]))


_FILE_EVENTS = {
    "open",
    "os.rename",
    "os.replace",
    "os.remove",
    "os.unlink",
    "os.listdir",
    "os.scandir",
    "os.mkdir",
    "os.rmdir",
    "os.link",
    "os.truncate",
    "shutil.rmtree",
    "shutil.copyfile",
    "os.chmod",
    "os.utime",
}
sys.addaudithook(_audit)

BATCHES = 7


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a bypass that took rec://... for a relative local path would create rec:/ here
    backing = tmp_path / "backing"
    backing.mkdir()
    storage = RecordingStorage(f"life-{os.getpid()}-{tmp_path.name}", backing, tmp_path / "calls.jsonl")
    _AUDIT.update(watch=str(backing), bypass=[], seen=0)
    yield storage, tmp_path
    _AUDIT["watch"] = None


def test_whole_life_goes_through_the_storage_layer(spark, recorded):
    storage, tmp_path = recorded
    options = dict(
        OPTIONS,
        **{
            "compaction.schedule.enabled": "true",
            "compaction.async.enabled": "false",
            "compaction.delta_commits": "2",
            "clean.async.enabled": "false",
            "clean.policy": "KEEP_LATEST_FILE_VERSIONS",
            "clean.retain_file_versions": "1",
        },
    )
    sink = HoodieStreamSink(storage, options)
    model = TableModel()
    batches = generate_batches(BATCHES, seed=5)
    for i, events in enumerate(batches):
        if i == 3:
            # a write that dies half-way leaves an inflight instant with a file: the next batch rolls it back
            txn = HoodieWriter(storage).start()
            txn.append_log(
                "city=chennai",
                "00000000-dead-4bad-8000-000000000000-0",
                txn.instant,
                events_df(spark, events[:3]).toArrow().drop_columns([]).select(COLUMNS),
                num_inserts=3,
                new_file_group=True,
            )
        sink(events_df(spark, events), i)
        model.apply_batch(events)
        assert table_rows(HoodieTable(storage).read()) == model.rows(), f"after batch {i}"
    sink.close()

    table = HoodieTable(storage)
    actions = [(i.action, i.state) for i in table.timeline.instants]
    assert ("rollback", "completed") in actions
    assert ("commit", "completed") in actions, "an inline compaction completed"
    assert ("clean", "completed") in actions, "a clean completed"
    assert not table.timeline.pending()

    # (1) the objects are a Hudi table: hudi-rs reads the same rows from a copy under the real names
    copy = storage.unhidden_copy(str(tmp_path / "copy"))
    assert table_rows(rs_read(copy)) == model.rows()
    assert not os.path.exists(tmp_path / "rec:"), "something took the table's URI for a local path"

    # (2) every file operation the driver made on the backing directory went through hoodie_stream/storage/
    assert _AUDIT["seen"] > 100
    assert _AUDIT["bypass"] == []

    # (3) what was recorded: every kind of operation, and the chain's writes from the Spark tasks
    calls = read_calls(tmp_path / "calls.jsonl")
    ops = {c["op"] for c in calls}
    assert {"read", "create", "write", "list", "list_dirs", "exists", "delete", "delete_tree", "open_input"} <= ops, ops
    from_tasks = [c for c in calls if c["worker"]]
    assert any(c["op"] == "create" and ".log." in c["path"] for c in from_tasks), "log files written by tasks"
    assert any(c["op"] == "write" and c["path"].startswith(".hoodie/.aux/hoodie_stream/index/") for c in from_tasks)
    assert any(
        c["op"] == "create" and c["path"].startswith(".hoodie/") and c["path"].endswith(".deltacommit") for c in calls
    )
