"""Exactly-once bookkeeping of the sink, driven batch by batch as foreachBatch would call it."""

import os
import uuid

import pyarrow as pa
import pytest

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.checkpoints import index_state
from hoodie_stream.checkpoints.key_index import KeyIndex
from hoodie_stream.format.file_group.fs_view import FileSystemView
from hoodie_stream.format.write.writer import HoodieWriter
from oracle import rs_read
from stream_model import OPTIONS, SCHEMA_DDL, TableModel, generate_batches, table_rows


@pytest.fixture
def query(spark):
    """Set the streaming query id the sink sees (as Spark does inside a streaming query): a UUID named after `name`,
    of a query that does not run (as after it stopped)."""
    sc = spark.sparkContext

    def set_id(name):
        query_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"hoodie-stream-test/{name}"))
        sc.setLocalProperty("sql.streaming.queryId", query_id)
        return query_id

    yield set_id
    sc.setLocalProperty("sql.streaming.queryId", None)


def df_of(spark, events):
    return spark.createDataFrame(
        [tuple(e[c] for c in ["id", "city", "ts", "v", "_hoodie_is_deleted"]) for e in events], SCHEMA_DDL
    )


def test_replayed_batch_is_skipped_and_new_query_is_not(spark, location, query):
    batches = generate_batches(3, seed=3)
    model = TableModel()
    sink = location.sink(OPTIONS)
    query("q-1")
    for i, events in enumerate(batches[:2]):
        sink(df_of(spark, events), i)
        model.apply_batch(events)
    sink(df_of(spark, batches[1]), 1)  # Spark replays batch 1 after a restart: skipped
    assert sink.last_result.skipped
    assert len(location.table().timeline.commits_timeline()) == 2
    assert table_rows(location.rs_read()) == model.rows()
    query("q-2")  # a new checkpoint location starts a new query whose batch ids restart at 0
    sink(df_of(spark, batches[2]), 0)
    model.apply_batch(batches[2])
    assert not sink.last_result.skipped
    assert table_rows(location.rs_read()) == model.rows()


def test_inflight_instant_left_by_a_crash_is_rolled_back(spark, location, query):
    batches = generate_batches(2, seed=4)
    model = TableModel()
    query("q")
    sink = location.sink(OPTIONS)
    sink(df_of(spark, batches[0]), 0)
    model.apply_batch(batches[0])
    # a crashed writer left an inflight instant with a log file and an index delta behind
    storage = location.storage
    writer = HoodieWriter(storage)
    txn = writer.start()
    fs = next(iter(FileSystemView(storage).latest_slices()))
    junk = pa.table({"id": [999], "city": ["chennai"], "ts": [10**6], "v": ["junk"], "_hoodie_is_deleted": [False]})
    txn.append_log(fs.partition, fs.file_id, fs.base_instant, junk)
    index_state.save_state(storage, 0, txn.instant, KeyIndex(), index_state.empty_state(), 0)
    delta = f"{index_state.group_dir(0)}/{txn.instant}.delta.arrow"
    assert location.exists(delta)
    assert table_rows(location.rs_read()) == model.rows()
    sink(df_of(spark, batches[1]), 1)
    model.apply_batch(batches[1])
    table = location.table()
    assert not [i for i in table.timeline.pending() if i.action == "deltacommit"]
    assert any(i.action == "rollback" for i in table.timeline.completed())
    assert table_rows(location.rs_read()) == model.rows()
    assert not location.exists(delta)


def test_lost_index_state_is_rebuilt(spark, location, query):
    batches = generate_batches(4, seed=5)
    model = TableModel()
    query("q")
    sink = location.sink(OPTIONS)
    for i, events in enumerate(batches[:2]):
        sink(df_of(spark, events), i)
        model.apply_batch(events)
    location.storage.delete_tree(index_state.INDEX_DIR)
    index_state._CACHE.clear()
    for i, events in enumerate(batches[2:], start=2):
        sink(df_of(spark, events), i)
        model.apply_batch(events)
    latest = location.table().timeline.commits_timeline()[-1].timestamp
    assert index_state.read_latest(location.storage) == latest
    assert table_rows(location.rs_read()) == model.rows()


def test_empty_batches_write_nothing(spark, tmp_path, query):
    base = str(tmp_path / "t")
    query("q")
    commit_time = dict(OPTIONS)
    commit_time.pop("hoodie.datasource.write.precombine.field")  # no ordering value to keep for a delete
    sink = HoodieStreamSink(base, commit_time)
    sink(df_of(spark, generate_batches(1, seed=6)[0]), 0)
    before = sorted(os.listdir(os.path.join(base, ".hoodie")))
    sink(spark.createDataFrame([], SCHEMA_DDL), 1)
    # deletes of keys the table never held write nothing either
    sink(df_of(spark, [{"id": 10**6, "city": "x", "ts": 1, "v": "", "_hoodie_is_deleted": True}]), 2)
    assert sorted(os.listdir(os.path.join(base, ".hoodie"))) == before
    assert len(HoodieTable(base).timeline.commits_timeline()) == 1


def test_a_delete_that_comes_first_is_kept_by_its_ordering_value(spark, tmp_path, query):
    """With event-time ordering, a delete of a key the table does not hold writes no file but commits the key's
    ordering value in the index state: a version of the key that arrives later with a smaller ordering value (in
    any partition) does not bring it back, a greater one does."""
    base = str(tmp_path / "t")
    query("q")
    sink = HoodieStreamSink(base, OPTIONS)
    sink(df_of(spark, [{"id": 1, "city": "a", "ts": 1, "v": "one", "_hoodie_is_deleted": False}]), 0)
    sink(df_of(spark, [{"id": 7, "city": "x", "ts": 50, "v": "", "_hoodie_is_deleted": True}]), 1)
    table = HoodieTable(base)
    assert len(table.timeline.commits_timeline()) == 2
    assert not [p for p in os.listdir(base) if p not in (".hoodie", "city=a")]  # no data file for the delete
    sink(df_of(spark, [{"id": 7, "city": "y", "ts": 10, "v": "late", "_hoodie_is_deleted": False}]), 2)
    assert sorted(r["id"] for r in table_rows(HoodieTable(base).read())) == [1]
    sink(df_of(spark, [{"id": 7, "city": "z", "ts": 60, "v": "new", "_hoodie_is_deleted": False}]), 3)
    assert [(r["id"], r["v"]) for r in table_rows(HoodieTable(base).read())] == [(1, "one"), (7, "new")]


def test_a_late_event_never_wins_whatever_partition_it_names(spark, tmp_path, query):
    """A late event (ts=1) that names another city does not move key 5 there nor replace its row (ts=2005)."""
    base = str(tmp_path / "t")
    query("q")
    sink = HoodieStreamSink(base, OPTIONS)
    sink(df_of(spark, [{"id": 5, "city": "sf", "ts": 2005, "v": "current", "_hoodie_is_deleted": False}]), 0)
    sink(df_of(spark, [{"id": 6, "city": "sf", "ts": 3, "v": "other", "_hoodie_is_deleted": False}]), 1)
    sink(df_of(spark, [{"id": 5, "city": "nyc", "ts": 1, "v": "late", "_hoodie_is_deleted": False}]), 2)
    expected = [(5, "sf", "current"), (6, "sf", "other")]
    assert [(r["id"], r["city"], r["v"]) for r in table_rows(HoodieTable(base).read())] == expected
    assert [(r["id"], r["city"], r["v"]) for r in table_rows(rs_read(base))] == expected
    sink(df_of(spark, [{"id": 5, "city": "nyc", "ts": 2006, "v": "moved", "_hoodie_is_deleted": False}]), 3)
    expected = [(5, "nyc", "moved"), (6, "sf", "other")]
    assert [(r["id"], r["city"], r["v"]) for r in table_rows(rs_read(base))] == expected


def test_insert_operation_skips_the_index_lookup(spark, tmp_path, query):
    base = str(tmp_path / "t")
    query("q")
    HoodieStreamSink(base, OPTIONS)(
        df_of(spark, [{"id": 1, "city": "a", "ts": 1, "v": "one", "_hoodie_is_deleted": False}]), 0
    )
    insert = HoodieStreamSink(base, dict(OPTIONS, **{"hoodie.datasource.write.operation": "insert"}))
    insert(df_of(spark, [{"id": 1, "city": "b", "ts": 2, "v": "dup", "_hoodie_is_deleted": False}]), 1)
    stats = insert.last_result.stats
    assert sum(s.num_inserts for s in stats) == 1 and all(s.prev_commit == "null" for s in stats)
    rows = table_rows(rs_read(base))
    assert sorted(r["v"] for r in rows) == ["dup", "one"]


def test_partition_move_with_and_without_global_index(spark, tmp_path, query):
    query("q")
    row = {"id": 7, "city": "a", "ts": 1, "v": "first", "_hoodie_is_deleted": False}
    moved = dict(row, city="b", ts=2, v="moved")
    for global_index, expected in (("true", [("b", "moved")]), ("false", [("a", "first"), ("b", "moved")])):
        base = str(tmp_path / f"t-{global_index}")
        sink = HoodieStreamSink(base, dict(OPTIONS, **{"index.global.enabled": global_index}))
        sink(df_of(spark, [row]), 0)
        sink(df_of(spark, [moved]), 1)
        rows = table_rows(rs_read(base))
        assert sorted((r["city"], r["v"]) for r in rows) == expected, global_index


def test_files_of_failed_task_attempts_are_removed_before_commit(tmp_path):
    """A retried write task leaves the failed attempt's log file behind: it has a marker but no write stat, and the
    coordinator deletes it before the instant completes (Hudi's marker reconciliation)."""
    from hoodie_stream.streaming_sink import coordinator

    base = str(tmp_path / "t")
    writer = HoodieWriter.create(
        base,
        table_name="t",
        record_key_fields=["id"],
        schema=pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64())]),
        precombine_field="ts",
        partition_fields=["city"],
    )
    rows = pa.table({"id": [1, 2], "city": ["a", "a"], "ts": [1, 1]})
    txn = writer.start()
    failed_attempt = txn.insert_log_only("a", rows, task_id=0)
    txn.stats.clear()  # the failed attempt reported nothing
    retried = txn.insert_log_only("a", rows, task_id=1)
    txn.stats.clear()
    coordinator.commit(txn, [retried], "q", 0)
    assert not os.path.exists(os.path.join(base, failed_attempt.path))
    assert os.path.exists(os.path.join(base, retried.path))
    assert table_rows(rs_read(base)) == [
        {"id": 1, "city": "a", "ts": 1, "_hoodie_is_deleted": False},
        {"id": 2, "city": "a", "ts": 1, "_hoodie_is_deleted": False},
    ]


def test_delete_operation_with_key_columns_only(spark, tmp_path, query):
    base = str(tmp_path / "t")
    query("q")
    rows = [
        {"id": i, "city": "a" if i % 2 else "b", "ts": 1, "v": f"v{i}", "_hoodie_is_deleted": False} for i in range(6)
    ]
    HoodieStreamSink(base, OPTIONS)(df_of(spark, rows), 0)
    deleter = HoodieStreamSink(base, dict(OPTIONS, **{"hoodie.datasource.write.operation": "delete"}))
    deleter(spark.createDataFrame([(1, "a"), (4, "b"), (99, "a")], "id long, city string"), 1)
    assert sorted(r["id"] for r in table_rows(rs_read(base))) == [0, 2, 3, 5]
    assert sorted(r["id"] for r in table_rows(HoodieTable(base).read())) == [0, 2, 3, 5]


def test_crash_between_commit_and_index_pointer_keeps_deletes(spark, location, query):
    """A crash after the commit but before LATEST moves: the next batch still routes a late write of a deleted
    key to the file group holding its delete (LATEST is advanced, or the rebuild keeps deleted keys)."""
    storage = location.storage
    query("q")
    sink = location.sink(OPTIONS)
    ins = [{"id": i, "city": "a", "ts": 10, "v": "x", "_hoodie_is_deleted": False} for i in range(20)]
    sink(df_of(spark, ins), 0)
    before_delete = index_state.read_latest(storage)
    sink(df_of(spark, [dict(r, ts=50, _hoodie_is_deleted=True) for r in ins]), 1)
    late = [dict(r, ts=40, v="late") for r in ins]
    for mode in ("pointer behind", "index lost"):
        index_state.write_latest(storage, before_delete)  # the crash happened before LATEST moved
        if mode == "index lost":
            storage.delete_tree(index_state.INDEX_DIR)
            index_state._CACHE.clear()
        location.sink(OPTIONS)(df_of(spark, late), 2 if mode == "pointer behind" else 3)
        assert table_rows(location.rs_read()) == [], mode
        before_delete = index_state.read_latest(storage)


def test_half_created_table_is_created_again(spark, tmp_path, query):
    base = tmp_path / "t"
    (base / ".hoodie" / ".aux" / ".bootstrap").mkdir(parents=True)  # killed before hoodie.properties
    query("q")
    HoodieStreamSink(str(base), OPTIONS)(
        df_of(spark, [{"id": 1, "city": "a", "ts": 1, "v": "x", "_hoodie_is_deleted": False}]), 0
    )
    assert [r["id"] for r in table_rows(rs_read(str(base)))] == [1]
