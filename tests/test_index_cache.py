"""The executors' local cache of a remote table's index state (storage/local_cache.py): the sink's
`hoodie.stream.index.cache.dir` reaches the tasks and nothing of ours is written elsewhere; the default lives under
Spark's local dirs as the Python workers see them; the bound evicts the least recently used copies; a stale copy
(same path, other content or size, a re-created table, a torn copy) is fetched again; a state file just written is
kept from the bytes in memory (no GET after the PUT) and pruning deletes in bulk (no HEAD per file); Python workers
sharing the directory never map a partial copy."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sys
import tempfile
import threading
import time

import pyarrow as pa
import pytest

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.checkpoints import index_state
from hoodie_stream.errors import HoodieConfigError
from hoodie_stream.options import parse_options
from hoodie_stream.storage import storage_for
from hoodie_stream.storage.local_cache import DIR_NAME, LocalCache, spark_local_dir
from s3_server import CountingS3Server
from stream_model import OPTIONS, TableModel, events_df, generate_batches, table_rows

KEYS = [f"k{i}" for i in range(500)]


def table_dir(cache_root, uri):
    return os.path.join(cache_root, hashlib.sha256(uri.encode()).hexdigest()[:24])


def copies(root):
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names if "~" in n)


def state(keys, file_id="f1"):
    return pa.table({"key": keys, "partition": [""] * len(keys), "file_id": [file_id] * len(keys)})


@pytest.fixture(scope="module")
def counting():
    """moto in this process, counting every request it answers by kind."""
    server = CountingS3Server()
    yield server
    server.stop()


@pytest.fixture
def remote(counting, tmp_path):
    """(storage of a fresh table on the counting server with its local cache in tmp_path/cache, the server)."""
    storage = storage_for(counting.new_table_uri("idx"), counting.options())
    index_state._CACHE.clear()
    yield storage.with_local_cache(LocalCache(str(tmp_path / "cache"))), counting
    index_state._CACHE.clear()


# -- the option, on the executors ----------------------------------------------------------------------------
def test_the_option_reaches_the_executors_and_nothing_is_written_elsewhere(spark, s3_table, tmp_path):
    uri, storage_options = s3_table
    cache = tmp_path / "cache"
    # Spark gives each Python worker its executor's local dirs (PythonRunner: SPARK_LOCAL_DIRS = the block
    # manager's directories); the default cache lives under the first of them
    seen = spark.sparkContext.parallelize(range(2), 2).map(lambda _: os.environ.get("SPARK_LOCAL_DIRS")).collect()
    assert all(seen) and len(set(seen)) == 1, seen
    worker_default = os.path.join(seen[0].split(",")[0], DIR_NAME)
    assert "blockmgr-" in worker_default
    default_copies = table_dir(worker_default, uri)

    sink = HoodieStreamSink(uri, {**OPTIONS, "hoodie.stream.index.cache.dir": str(cache)}, storage_options)
    model = TableModel()
    try:
        for i, events in enumerate(generate_batches(3, seed=11)):
            sink(events_df(spark, events), i)
            model.apply_batch(events)
    finally:
        sink.close()
    assert table_rows(HoodieTable(uri, storage_options=storage_options).read()) == model.rows()

    # the tasks kept their copies (written through, memory-mapped from there) in the configured directory ...
    kept = copies(table_dir(str(cache), uri))
    assert kept and all(p.startswith(".hoodie/.aux/hoodie_stream/index/") for p in kept), kept
    # ... and none under the default one of the workers or of this process (the driver), nor the old location
    for elsewhere in (default_copies, table_dir(os.path.join(tempfile.gettempdir(), DIR_NAME), uri)):
        assert not os.path.exists(elsewhere), elsewhere
    assert not os.path.exists(table_dir(os.path.join(tempfile.gettempdir(), "hoodie_stream_cache"), uri))
    assert set(os.listdir(cache)) <= {table_dir(str(cache), uri).rpartition("/")[2], "spool", ".usage"}

    # without the option the copies go under the workers' Spark local dirs
    other = uri + "-default"
    sink = HoodieStreamSink(other, OPTIONS, storage_options)
    try:
        sink(events_df(spark, generate_batches(1, seed=12)[0]), 0)
    finally:
        sink.close()
    assert copies(table_dir(worker_default, other)), "default cache under SPARK_LOCAL_DIRS"


def test_the_driver_default_is_spark_local_dir_else_the_temp_dir(monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", "/x/one,/x/two")
    assert LocalCache().root() == os.path.join("/x/one", DIR_NAME)
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    monkeypatch.setitem(sys.modules, "pyspark", None)
    assert spark_local_dir() == tempfile.gettempdir()


@pytest.mark.parametrize("value", ["relative/dir", "s3://bucket/cache", "file:///tmp/x"])
def test_the_cache_dir_must_be_an_absolute_local_directory(value):
    with pytest.raises(HoodieConfigError, match="hoodie.stream.index.cache.dir"):
        parse_options("/t", {**OPTIONS, "hoodie.stream.index.cache.dir": value})
    options = parse_options("/t", {**OPTIONS, "hoodie.stream.index.cache.max.mb": "3"})
    assert options.index_cache_dir is None and options.index_cache_max_bytes == 3 << 20


# -- requests: write-through, bulk pruning ---------------------------------------------------------------------
def test_a_state_file_just_written_is_not_read_back(remote, tmp_path):
    storage, server = remote
    committed = {"20260101000000001", "20260101000000002"}
    server.reset()
    index_state.save_full(storage, 5, "20260101000000001", state(KEYS[:100]))
    index = index_state.load_index(storage, 5, {"20260101000000001"})[0]
    change = state(KEYS[100:110], "f2")
    index_state.save_state(storage, 5, "20260101000000002", index.updated(change), change, 0)
    assert server.counts()["GET"] == 0, "save_full mapped the copy it wrote, not a GET of it"

    # a Python worker that never held key group 5 (nothing in memory) maps the copies the writers left
    index_state._CACHE.clear()
    server.reset()
    loaded, deltas = index_state.load_index(storage, 5, committed)
    assert deltas == 1 and sorted(loaded.to_table()["key"].to_pylist()) == sorted(KEYS[:110])
    assert server.counts()["GET"] == 0 and server.counts()["LIST"] == 1, server.counts()

    # an executor with its own cache (another machine) fetches them, once
    elsewhere = storage.with_local_cache(LocalCache(str(tmp_path / "other")))
    for gets in (2, 0):
        index_state._CACHE.clear()
        server.reset()
        assert index_state.load_index(elsewhere, 5, committed)[0].to_table().num_rows == 110
        assert server.counts()["GET"] == gets
    assert copies(str(tmp_path / "other"))


def test_pruning_deletes_in_bulk_without_a_head_per_file(remote):
    storage, server = remote
    instants = [f"2026010100000000{i}" for i in range(1, 6)]
    for kg in (1, 2, 3):
        index_state.save_full(storage, kg, instants[0], state(KEYS[:20]))
        for instant in instants[1:4]:
            index_state._write(storage, f"{index_state.group_dir(kg)}/{instant}.delta.arrow", state(KEYS[:3]))
        index_state.save_full(storage, kg, instants[4], state(KEYS[:30]))
    cached = copies(storage.local_cache.root())
    assert len(cached) == 15
    server.reset()
    loaded = index_state.load_indexes(storage, [1, 2, 3], set(instants))
    assert {kg: index.to_table().num_rows for kg, (index, _) in loaded.items()} == {1: 30, 2: 30, 3: 30}
    counts = server.counts()
    assert counts["HEAD"] == 0 and counts["POST"] == 1 and counts["DELETE"] == 0, counts  # one DeleteObjects
    for kg in (1, 2, 3):
        assert [f.name for f in storage.list(index_state.group_dir(kg))] == [f"{instants[4]}.full.arrow"]
    assert len(copies(storage.local_cache.root())) == 3, "the copies of the deleted files went with them"
    # files already gone (another worker pruned them) are no error
    storage.delete_many([f"{index_state.group_dir(1)}/{instants[0]}.full.arrow", "no/such/object"])


def test_delete_many_on_a_local_table_removes_emptied_directories(tmp_path):
    storage = storage_for(str(tmp_path / "t"))
    storage.write("a/b/1", b"1")
    storage.write("a/b/2", b"2")
    storage.write("a/c", b"3")
    storage.delete_many(["a/b/1", "a/b/2", "a/missing"])
    assert sorted(os.listdir(tmp_path / "t" / "a")) == ["c"]


# -- stale copies --------------------------------------------------------------------------------------------
def test_a_changed_object_is_fetched_again(remote):
    storage, server = remote
    path = "x/0001/20260101000000001.full.arrow"
    first = storage.write_cached(path, b"a" * 64)
    server.client().put_object(Bucket=server.bucket, Key=storage.uri.split("/", 3)[3] + "/" + path, Body=b"b" * 64)
    server.reset()
    info = storage.list("x/0001")[0]
    again = storage.local_file(path, info)
    assert again != first and open(again, "rb").read() == b"b" * 64, "same path and size, other content"
    assert server.counts()["GET"] == 1
    assert storage.local_file(path) == again, "without a listing: a HEAD names the copy"
    storage.write(path, b"c" * 10)  # another size
    assert open(storage.local_file(path), "rb").read() == b"c" * 10
    # a copy torn by a crash (its size is not the object's) is fetched again
    torn = storage.local_file(path)
    with open(torn, "r+b") as f:
        f.truncate(3)
    server.reset()
    assert open(storage.local_file(path), "rb").read() == b"c" * 10 and server.counts()["GET"] == 1


def test_a_table_recreated_at_the_same_uri_is_not_served_from_old_copies(remote, counting, tmp_path):
    storage, server = remote
    instant = "20260101000000001"
    index_state.save_full(storage, 7, instant, state(KEYS[100:150]))
    assert index_state.load_index(storage, 7, {instant})[0].to_table().num_rows == 50
    size = storage.list(index_state.group_dir(7))[0].size
    # the table is dropped and written again, at the same instant, by another machine (its own cache): this
    # executor's copy of 7/<instant>.full.arrow is still there, under the same path
    prefix = storage.uri.split("/", 3)[3]
    client = server.client()
    for obj in client.list_objects_v2(Bucket=server.bucket, Prefix=prefix + "/")["Contents"]:
        client.delete_object(Bucket=server.bucket, Key=obj["Key"])
    other = storage.with_local_cache(LocalCache(str(tmp_path / "other-machine")))
    index_state.save_full(other, 7, instant, state(KEYS[150:200], "g1"))
    assert storage.list(index_state.group_dir(7))[0].size == size, "the same path and size, other content"
    index_state._CACHE.clear()
    loaded = index_state.load_index(storage, 7, {instant})[0].to_table()
    assert sorted(loaded["key"].to_pylist()) == sorted(KEYS[150:200])


# -- the bound -----------------------------------------------------------------------------------------------
def test_the_bound_evicts_the_least_recently_used_copies(tmp_path):
    cache = LocalCache(str(tmp_path / "c"), max_bytes=10_000)
    now = time.time()
    paths = {}
    for age, name in ((300, "a"), (200, "b"), (100, "c")):
        paths[name] = cache.place("s3://b/t", f"d/{name}", "v1", bytes([ord(name)]) * 3000)
        os.utime(paths[name], (now - age, now - age))
    assert cache.lookup("s3://b/t", "d/a", "v1", 3000) == paths["a"]  # used: now the most recent
    mapped = pa.memory_map(paths["b"])
    cache.place("s3://b/t", "d/d", "v1", b"d" * 3000)
    left = {n: os.path.exists(p) for n, p in paths.items()}
    assert left == {"a": True, "b": False, "c": True}, left
    assert mapped.read() == b"b" * 3000, "an evicted copy stays valid for whoever maps it"
    total = sum(os.path.getsize(os.path.join(tmp_path / "c", p)) for p in copies(str(tmp_path / "c")))
    assert total <= 10_000
    assert cache.lookup("s3://b/t", "d/b", "v1", 3000) is None


def test_the_bound_holds_for_index_state_loads(remote):
    storage, _server = remote
    storage = storage.with_local_cache(LocalCache(storage.local_cache.directory, max_bytes=64_000))
    instant = "20260101000000001"
    for kg in range(12):
        index_state.save_full(storage, kg, instant, state(KEYS[:300]))  # ~14 KB each
    root = storage.local_cache.root()
    total = sum(os.path.getsize(os.path.join(root, p)) for p in copies(root))
    assert 0 < total <= 64_000
    index_state._CACHE.clear()
    loaded = index_state.load_indexes(storage, range(12), {instant})
    assert all(index.to_table().num_rows == 300 for index, _ in loaded.values())
    total = sum(os.path.getsize(os.path.join(root, p)) for p in copies(root))
    assert total <= 64_000


# -- concurrent Python workers -------------------------------------------------------------------------------
def _content(n, size):
    return hashlib.sha256(str(n).encode()).digest() * (size // 32)


def _worker(root, seed, rounds, result):
    """Place and map copies of 8 objects (two versions each) in a directory bounded below their total size."""
    cache = LocalCache(root, max_bytes=6 << 20)
    bad = 0
    for i in range(rounds):
        n = (seed + i) % 16
        obj, version = f"idx/{n % 8:04d}/f.full.arrow", f"v{n // 8}"
        expected = _content(n, 1 << 20)
        path = cache.lookup("s3://b/t", obj, version, len(expected)) or cache.place("s3://b/t", obj, version, expected)
        try:
            with pa.memory_map(path) as f:
                bad += f.read() != expected
        except FileNotFoundError:  # evicted by another worker in between: the caller fetches it again
            pass
    result.put(bad)


def test_workers_sharing_the_directory_never_map_a_partial_copy(tmp_path):
    root = str(tmp_path / "shared")
    ctx = multiprocessing.get_context("fork")
    result = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(root, seed, 60, result)) for seed in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert [result.get(timeout=5) for _ in workers] == [0, 0, 0, 0], "a partial or wrong copy was mapped"
    names = [n for _, _, files in os.walk(root) for n in files]
    assert not [n for n in names if n.endswith(".tmp")], "temporary files left"
    total = sum(os.path.getsize(os.path.join(root, p)) for p in copies(root))
    assert 0 < total <= 6 << 20, "the bound holds for the workers together"


# -- the file operations of the index state on a remote table --------------------------------------------------
_AUDIT: dict = {"root": None, "thread": None, "outside": [], "inside": 0}
_WRITES = {"os.rename", "os.replace", "os.remove", "os.unlink", "os.mkdir", "os.rmdir", "os.link", "os.truncate"}


def _audit(event, args):
    watched = _AUDIT["root"]
    if watched is None or threading.get_ident() != _AUDIT["thread"]:  # not the S3 server's threads (moto spools)
        return
    if event == "open":
        path, mode, flags = (list(args) + [None, None, None])[:3]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        )
        paths = [path] if writing else []
    elif event in _WRITES or event == "os.utime":
        paths = list(args[:2])
    else:
        return
    for p in paths:
        if not isinstance(p, (str, bytes, os.PathLike)):
            continue
        if (os.path.abspath(os.fsdecode(p)) + os.sep).startswith(watched):
            _AUDIT["inside"] += 1
        else:
            _AUDIT["outside"].append((event, os.fsdecode(p)))


sys.addaudithook(_audit)


def test_nothing_is_written_outside_the_cache_directory(remote):
    storage, _server = remote
    root = storage.local_cache.root()
    instants = [f"2026010100000000{i}" for i in range(1, 4)]
    _AUDIT.update(root=root + os.sep, thread=threading.get_ident(), outside=[], inside=0)
    try:
        index_state.save_full(storage, 0, instants[0], state(KEYS))
        index = index_state.load_index(storage, 0, {instants[0]})[0]
        index_state.save_state(storage, 0, instants[1], index.updated(state(["new"])), state(["new"]), 0)
        index_state._CACHE.clear()
        index_state.save_full(storage, 0, instants[2], state(KEYS[:10]))
        index_state.load_index(storage, 0, set(instants))
        with storage.open_output("data/big.bin") as f:  # past the in-memory spool: a spool file
            f.write(b"x" * (9 << 20))
    finally:
        _AUDIT["root"] = None
    assert _AUDIT["outside"] == []
    assert _AUDIT["inside"] > 10 and copies(root) and os.listdir(os.path.join(root, "spool")) == []
