"""The caches that keep a micro-batch's storage requests flat follow every change of the table: the shared timeline
(incremental listing from its window), the shared file listings (synced from the completed instants' metadata:
commits, compactions, cleans, rollbacks) and the bucket assigner's one listing of the index state. Each is compared
with what an uncached read of the same table gives, after writes, a rollback, compactions and cleans."""

import pyarrow as pa

from hoodie_stream import HoodieStreamSink
from hoodie_stream.bucket_assign import assigner
from hoodie_stream.checkpoints import index_state
from hoodie_stream.format.file_group import fs_view
from hoodie_stream.format.file_group.fs_view import FileSystemView
from hoodie_stream.format.timeline import active_timeline as timeline
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.write.writer import HoodieWriter
from hoodie_stream.storage import LocalStorage
from stream_model import OPTIONS, events_df, generate_batches

SCHEMA = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64())])


def uncached_timeline(base, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(timeline, "SHARED", False)
        return Timeline(base)


def view_state(view):
    return sorted(
        (fs.partition, fs.file_id, fs.base_instant, fs.base_file, tuple(fs.log_file_names()), fs.file_size)
        for fs in view.latest_slices()
    )


def all_slices(view):
    return sorted(
        (s.partition, s.file_id, s.base_instant, s.base_file, tuple(s.log_file_names()), s.file_size)
        for g in view.file_groups()
        for s in view.slices(g)
    )


def check_same(base, monkeypatch):
    cached = Timeline(base)
    plain = uncached_timeline(base, monkeypatch)
    assert cached.instants == plain.instants
    with monkeypatch.context() as m:
        m.setattr(fs_view, "SHARED", False)
        expected = FileSystemView(base, plain)
        expected_latest, expected_all = view_state(expected), all_slices(expected)
    got = FileSystemView(base, cached)
    assert got._listings is not None
    assert view_state(got) == expected_latest
    assert all_slices(got) == expected_all
    return cached


def write_commit(base, rows):
    writer = HoodieWriter(base)
    txn = writer.start()
    txn.insert_log_only("", pa.table(rows, schema=SCHEMA))
    txn.commit()
    return txn.instant


# -- the timeline --------------------------------------------------------------------------------------------
def test_timeline_window_follows_new_instants_deletes_and_rollbacks(tmp_path, shared, monkeypatch):
    base = str(tmp_path / "t")
    HoodieWriter.create(base, table_name="t", record_key_fields=["id"], schema=SCHEMA)
    first = write_commit(base, {"id": [1], "city": ["a"], "ts": [1]})
    tl = check_same(base, monkeypatch)
    # a pending instant: the window starts there; its completion is seen although newer instants exist
    writer = HoodieWriter(base)
    pending = writer.start()
    assert Timeline(base).pending() == uncached_timeline(base, monkeypatch).pending()
    pending.insert_log_only("", pa.table({"id": [2], "city": ["a"], "ts": [2]}, schema=SCHEMA))
    pending.rollback()  # deletes the pending instant's files, completes a rollback instant
    check_same(base, monkeypatch)
    second = write_commit(base, {"id": [3], "city": ["a"], "ts": [3]})
    tl.reload()
    assert [i.timestamp for i in tl.commits_timeline()] == [first, second]
    # a file of the window deleted behind the cache's back: the next read lists everything again
    storage = LocalStorage(base)
    storage.delete(f".hoodie/{second}.deltacommit")
    tl.reload()
    assert tl.instants == uncached_timeline(base, monkeypatch).instants
    assert second not in [i.timestamp for i in tl.commits_timeline()]


def test_timeline_file_cache_is_keyed_by_size(tmp_path, shared, monkeypatch):
    base = str(tmp_path / "t")
    HoodieWriter.create(base, table_name="t", record_key_fields=["id"], schema=SCHEMA)
    ts = write_commit(base, {"id": [1], "city": ["a"], "ts": [1]})
    tl = Timeline(base)
    before = tl.read_commit_metadata(ts)
    assert tl.read_commit_metadata(ts) == before
    # rewritten with other content (never done to a completed instant, but a cache must not hide it once listed)
    path = tmp_path / "t" / ".hoodie" / f"{ts}.deltacommit"
    path.write_bytes(path.read_bytes().replace(b"{", b"{ ", 1))
    timeline.invalidate(LocalStorage(base).uri)
    assert Timeline(base).read_bytes(tl.get(ts)) == path.read_bytes()


# -- the file listings, through the sink: compactions, cleans, a rollback ------------------------------------
def test_cached_view_follows_commits_compactions_cleans_and_rollbacks(spark, tmp_path, shared, monkeypatch):
    base = str(tmp_path / "t")
    options = dict(
        OPTIONS,
        **{
            "compaction.schedule.enabled": "true",
            "compaction.delta_commits": "2",
            "compaction.async.enabled": "false",
            "clean.retain_commits": "1",
        },
    )
    sink = HoodieStreamSink(base, options)
    resets = []
    reset = fs_view._Listings.reset
    monkeypatch.setattr(fs_view._Listings, "reset", lambda self: (resets.append(1), reset(self)))
    try:
        batches = generate_batches(7, seed=5, monotonic=True)
        for i, events in enumerate(batches):
            sink(events_df(spark, events), i)
            check_same(base, monkeypatch)
            if i == 3:
                # a write that fails after placing a file: rolled back by the next batch's recovery
                writer = HoodieWriter(base)
                txn = writer.start()
                row = {"id": [999], "city": ["x"], "ts": [1], "v": ["x"], "_hoodie_is_deleted": [False]}
                txn.insert_log_only("city=x", pa.table(row).cast(txn.arrow_schema))
        plain = uncached_timeline(base, monkeypatch)
        actions = {i.action for i in plain.completed()}
        assert {"commit", "clean", "rollback", "deltacommit"} <= actions, actions
        assert len(resets) <= 2, "the listings were synced from the instants' metadata, never listed again"
    finally:
        sink.close()


# -- the index state listed once per bucket-assign task ------------------------------------------------------
def test_listed_index_loads_what_the_storage_lists(tmp_path):
    storage = LocalStorage(str(tmp_path / "t"))
    keys = [f"k{i}" for i in range(40)]
    state = pa.table({"key": keys, "partition": [""] * 40, "file_id": ["f1"] * 40})
    committed = {"20240101000000001", "20240101000000002", "20240101000000003"}
    for kg in (3, 4, 9):
        index_state.save_full(storage, kg, "20240101000000001", state)
    change = pa.table({"key": ["k1", "new"], "partition": ["", ""], "file_id": ["f2", "f2"]})
    index_state._write(storage, f"{index_state.group_dir(4)}/20240101000000002.delta.arrow", change)
    index_state._write(storage, f"{index_state.group_dir(9)}/20240101000000009.delta.arrow", change)  # not committed
    index_state._CACHE.clear()
    listed = assigner.index_storage(storage, 3)
    assert isinstance(listed, LocalStorage)  # local tables are listed per key group
    listed = assigner.ListedIndex(storage, 4)
    for kg in (4, 9):
        index_state._CACHE.clear()
        expected = index_state.load_index(storage, kg, committed)
        index_state._CACHE.clear()
        got = index_state.load_index(listed, kg, committed)
        assert got[1] == expected[1]
        assert got[0].to_table().sort_by("key").equals(expected[0].to_table().sort_by("key"))
    # a key group before the first one listed, and a directory written since, are listed from the storage
    assert listed.list(index_state.group_dir(3)) == storage.list(index_state.group_dir(3))
    index_state._write(listed, f"{index_state.group_dir(9)}/20240101000000003.delta.arrow", change)
    assert listed.list(index_state.group_dir(9)) == storage.list(index_state.group_dir(9))
    assert [f.name for f in listed.list(index_state.group_dir(9))][-1].startswith("20240101000000009")


def test_a_table_on_s3_reads_as_the_model_with_every_cache_on(spark, s3_table, monkeypatch):
    """On an object store the caches are on by default (driver and executors): after writes, inline compactions,
    cleans and a rolled-back write, the table reads as the model, and the cached timeline and file listings equal
    fresh ones."""
    from hoodie_stream import HoodieTable
    from hoodie_stream.storage import storage_for
    from stream_model import TableModel, table_rows

    uri, storage_options = s3_table
    options = dict(
        OPTIONS,
        **{
            "compaction.schedule.enabled": "true",
            "compaction.delta_commits": "2",
            "compaction.async.enabled": "false",
            "clean.retain_commits": "1",
        },
    )
    sink = HoodieStreamSink(uri, options, storage_options=storage_options)
    model = TableModel()
    try:
        for i, events in enumerate(generate_batches(6, seed=11, monotonic=True)):
            sink(events_df(spark, events), i)
            model.apply_batch(events)
            if i == 2:
                txn = HoodieWriter(uri, storage_options).start()
                row = {"id": [999], "city": ["x"], "ts": [1], "v": ["x"], "_hoodie_is_deleted": [False]}
                txn.insert_log_only("city=x", pa.table(row).cast(txn.arrow_schema))
    finally:
        sink.close()
    assert table_rows(HoodieTable(uri, storage_options).read()) == model.rows()
    storage = storage_for(uri, storage_options)
    cached = Timeline(storage)
    assert cached._snapshot is not None
    with monkeypatch.context() as m:
        m.setattr(timeline, "SHARED", False)
        m.setattr(fs_view, "SHARED", False)
        plain = Timeline(storage)
        expected = all_slices(FileSystemView(storage, plain))
    assert cached.instants == plain.instants
    assert {"commit", "clean", "rollback"} <= {i.action for i in plain.completed()}
    assert all_slices(FileSystemView(storage, cached)) == expected
