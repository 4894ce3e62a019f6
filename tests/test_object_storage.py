"""ObjectStorage (obstore) against an S3-compatible server on loopback (moto, tests/s3_server.py): the Storage
contract LocalStorage meets (test_storage.py), the store's errors without secrets, storage options (precedence, s3a
settings, refusals, redaction), hudi-rs reading with the same options, and a store cut off and brought back.
No Spark: these run under `-m "not spark"`."""

import io
import os
import pickle
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hoodie_stream.errors import (
    HoodieConfigError,
    HoodieObjectChangedError,
    HoodieObjectExistsError,
    HoodieObjectNotFoundError,
    HoodiePathError,
    HoodieStorageError,
)
from hoodie_stream.storage import LocalStorage, storage_for
from hoodie_stream.storage.object_store import MULTIPART_CHUNK, WHOLE_READ_MAX, ObjectStorage
from hoodie_stream.storage.options import is_secret, redact, resolve, s3a_settings, shown
from s3_server import SECRET_KEY, CountingS3Server, S3Server
from tcp_proxy import TcpProxy

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def store(s3_table):
    uri, options = s3_table
    return storage_for(uri, options)


@pytest.fixture(scope="module")
def counting():
    """moto in this process, counting requests by kind."""
    server = CountingS3Server()
    yield server
    server.stop()


@pytest.fixture
def counted(counting):
    """(server, a storage on a fresh location of it) with the counts reset."""
    counting.start()
    storage = storage_for(counting.new_table_uri("counted"), counting.options())
    counting.reset()
    return counting, storage


@pytest.fixture(scope="module")
def auth_server():
    """A server that checks credentials."""
    server = S3Server(auth=True)
    yield server
    server.stop()


def assert_no_secret(text, *secrets):
    for secret in (SECRET_KEY, *secrets):
        assert secret not in text


# -- the Storage contract ---------------------------------------------------------------------------------------
def test_operations(store, s3_table):
    uri, _ = s3_table
    assert isinstance(store, ObjectStorage) and store.uri == uri
    assert store.write("a/b/c.bin", b"12345") == 5
    assert store.read("a/b/c.bin") == b"12345" and store.read_range("a/b/c.bin", 1, 3) == b"234"
    assert store.read_range("a/b/c.bin", 3, 10) == b"45" and store.read_range("a/b/c.bin", 9, 3) == b""
    assert store.read_range("a/b/c.bin", 0, 0) == b""
    assert store.exists("a/b/c.bin") and store.size("a/b/c.bin") == 5 and not store.exists("a/b/x")
    with store.open_input("a/b/c.bin") as f:
        f.seek(2)
        assert f.read(2) == b"34"
    store.write("a/b/c.bin", [b"ab", b"cd"])  # write replaces
    assert store.read("a/b/c.bin") == b"abcd"
    assert store.write("a/m.bin", memoryview(b"mv")) == 2 and store.read("a/m.bin") == b"mv"
    store.create("a/d.bin", b"x")
    assert [(f.path, f.size) for f in store.list("a")] == [("a/d.bin", 1), ("a/m.bin", 2)]
    assert [f.path for f in store.list("a", recursive=True)] == ["a/b/c.bin", "a/d.bin", "a/m.bin"]
    assert store.list_dirs("") == ["a"] and store.list("nowhere") == [] and store.list_dirs("nowhere") == []
    assert store.child("a").read("d.bin") == b"x" and store.child("a").uri == uri + "/a"
    assert store.child("a").child("b").read("c.bin") == b"abcd"
    assert store.delete("a/d.bin") and not store.delete("a/d.bin")
    store.delete_tree("a")
    assert store.list("", recursive=True) == [] and not store.exists("a")
    with pytest.raises(HoodieObjectNotFoundError, match="does not exist") as err:
        store.read("a/b/c.bin")
    assert err.value.path == uri + "/a/b/c.bin"
    assert store.relative(uri + "/p/x.parquet") == "p/x.parquet" == store.relative("p/x.parquet")
    with pytest.raises(HoodiePathError):
        store.relative("s3://elsewhere/x.parquet")


def test_directories_are_prefixes(store):
    for path in ("a/x", "a/b/c", "ab/y", "top"):
        store.write(path, path.encode())
    assert [f.path for f in store.list("a")] == ["a/x"], "ab/ is not under a/"
    assert [f.path for f in store.list("a", recursive=True)] == ["a/b/c", "a/x"]
    assert [f.path for f in store.list("")] == ["top"]
    assert [(f.path, f.size) for f in store.list("", recursive=True)] == [
        ("a/b/c", 5),
        ("a/x", 3),
        ("ab/y", 4),
        ("top", 3),
    ]
    assert all(abs(f.mtime - time.time()) < 600 for f in store.list("", recursive=True))
    assert store.list("a")[0].name == "x"
    assert store.list_dirs("") == ["a", "ab"] and store.list_dirs("a") == ["b"] and store.list_dirs("a/b") == []
    assert store.exists("a") and store.exists("a/b") and store.exists("ab") and store.exists("a/b/c")
    assert not store.exists("a/b/c/d") and not store.exists("b")
    assert not store.exists("ab/y/z") and not store.exists("a/x2")
    store.delete_tree("a")
    assert [f.path for f in store.list("", recursive=True)] == ["ab/y", "top"], "delete_tree stays in its prefix"
    store.delete_tree("nothing/here")  # nothing to delete


@pytest.mark.parametrize("where", ["s3", "local"])
def test_listing_from_an_offset(store, tmp_path, where):
    """`start_after` lists only what sorts after it, on both storages the same as filtering the whole listing."""
    if where == "local":
        store = storage_for(str(tmp_path / "t"))
    names = [".hoodie/.aux/x", ".hoodie/001.deltacommit", ".hoodie/002.deltacommit.inflight", ".hoodie/003.clean"]
    names += [".hoodie/archived/a", ".hoodie/hoodie.properties", "p/f.log"]
    for name in names:
        store.write(name, b"1")
    for path, recursive in ((".hoodie", False), (".hoodie", True), ("", True)):
        whole = [f.path for f in store.list(path, recursive)]
        for after in (".hoodie/001.deltacommit", ".hoodie/002", ".hoodie/.aux", ".hoodie/zzz", ".a"):
            expected = [p for p in whole if p > after]
            assert [f.path for f in store.list(path, recursive, start_after=after)] == expected, (path, after)


def test_create_if_absent_never_overwrites(store):
    store.create("t/1.deltacommit", b"first")
    with pytest.raises(HoodieObjectExistsError, match="already exists"):
        store.create("t/1.deltacommit", b"second")
    with pytest.raises(HoodieObjectExistsError), store.open_output("t/1.deltacommit", create=True) as f:
        f.write(b"third")
    with pytest.raises(HoodieObjectExistsError):
        store.put_if("t/1.deltacommit", b"fourth", None)
    assert store.read("t/1.deltacommit") == b"first"
    assert [f.path for f in store.list("t")] == ["t/1.deltacommit"]
    with store.open_output("t/2.deltacommit", create=True) as f:
        f.write(b"created through a file")
    assert store.read("t/2.deltacommit") == b"created through a file"


def test_compare_and_swap(store):
    first = store.put_if("lock.json", b"v1", None)  # create-if-absent
    data, version = store.read_version("lock.json")
    assert data == b"v1" and version == first
    second = store.put_if("lock.json", b"v2", version)
    assert second != version and store.read_version("lock.json") == (b"v2", second)
    with pytest.raises(HoodieObjectChangedError, match="changed since it was read") as err:
        store.put_if("lock.json", b"stale", version)
    assert err.value.path == store.uri_of("lock.json")
    assert store.read("lock.json") == b"v2"
    store.delete("lock.json")
    with pytest.raises(HoodieObjectChangedError):  # vanished since it was read
        store.put_if("lock.json", b"v3", second)
    assert not store.exists("lock.json")


def _race(storages, op):
    """Run op(storage, i) in one thread per storage, started together; the outcomes by thread."""
    barrier = threading.Barrier(len(storages))
    outcomes = [None] * len(storages)

    def run(i):
        barrier.wait()
        try:
            op(storages[i], i)
            outcomes[i] = "won"
        except (HoodieObjectChangedError, HoodieObjectExistsError) as err:
            outcomes[i] = type(err).__name__

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(storages))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return outcomes


def test_one_of_two_concurrent_writers_wins(s3_table):
    # moto checks a write's condition, then writes, without a lock; nothing between the two waits, so a race of
    # two requests on its threaded server has one winner (as S3, which applies the condition atomically)
    uri, options = s3_table
    writers = [storage_for(uri, options) for _ in range(2)]  # two clients
    for w in writers:
        w.exists("warm")  # connect before the race
    for round_ in range(5):
        writers[0].write("lease", b"start")
        _, version = writers[0].read_version("lease")
        outcomes = _race(writers, lambda s, i, v=version: s.put_if("lease", b"writer %d" % i, v))
        assert sorted(outcomes) == ["HoodieObjectChangedError", "won"], outcomes
        assert writers[1].read("lease") == b"writer %d" % outcomes.index("won")
        outcomes = _race(writers, lambda s, i, n=round_: s.create(f"instant-{n}", b"writer %d" % i))
        assert sorted(outcomes) == ["HoodieObjectExistsError", "won"], outcomes
        assert writers[0].read(f"instant-{round_}") == b"writer %d" % outcomes.index("won")


def test_open_output_appears_only_when_the_block_ends(store):
    with store.open_output("x.bin") as f:
        assert f.seekable()
        f.write(b"abcdef")
        f.seek(0)
        f.write(b"A")
        f.seek(0, io.SEEK_END)
        f.write(b"g")
        assert not store.exists("x.bin")
    assert store.read("x.bin") == b"Abcdefg"
    with pytest.raises(RuntimeError), store.open_output("x.bin") as f:
        f.write(b"new, half written")
        raise RuntimeError("writer died")
    with pytest.raises(RuntimeError), store.open_output("y.bin", create=True) as f:
        f.write(b"never")
        raise RuntimeError("writer died")
    assert store.read("x.bin") == b"Abcdefg" and [f.path for f in store.list("")] == ["x.bin"]


def test_large_objects_go_up_in_parts(counted):
    server, store = counted
    size = MULTIPART_CHUNK + (1 << 20)
    data = os.urandom(size)
    with store.open_output("big.bin") as f:
        f.write(data[: size // 2])
        f.write(data[size // 2 :])
    assert server.counts() == {"LIST": 0, "GET": 0, "HEAD": 0, "PUT": 2, "POST": 2, "DELETE": 0}, "create, 2 parts"
    assert store.size("big.bin") == size and store.read("big.bin") == data
    server.reset()
    store.write("big2.bin", data)  # write() of bytes too
    assert server.counts()["POST"] == 2 and store.read("big2.bin") == data
    server.reset()
    with pytest.raises(RuntimeError), store.open_output("big3.bin") as f:
        f.write(data)
        raise RuntimeError("writer died")
    assert sum(server.counts().values()) == 0, "nothing was sent"
    assert store.delete("big.bin") and store.delete("big2.bin") and not store.exists("big3.bin")


def test_requests_are_counted_by_kind(counted):
    """The storage's own request counts agree with what the server answered (object reads and writes below the
    multipart and whole-read sizes)."""
    server, store = counted
    store.write("p/a", b"1")
    store.read("p/a")
    store.read_range("p/a", 0, 1)
    store.size("p/a")
    store.exists("p/a")
    store.list("p")
    store.list_dirs("")
    store.delete("p/a")
    # obstore deletes one object with DeleteObjects (a POST), which the storage counts as a DELETE
    assert server.counts() == {"LIST": 2, "GET": 2, "HEAD": 3, "PUT": 1, "POST": 1, "DELETE": 0}
    assert dict(store.requests) == {"LIST": 2, "GET": 2, "HEAD": 3, "PUT": 1, "DELETE": 1}
    server.reset()
    store.write("q/1", b"1")
    store.write("q/2", b"2")
    store.delete_tree("q")
    assert server.counts() == {"LIST": 1, "GET": 0, "HEAD": 0, "PUT": 2, "POST": 1, "DELETE": 0}  # DeleteObjects
    assert store.list("q") == []


def test_open_input_reads_small_objects_and_parquet(store):
    table = pa.table({"k": pa.array(["a", "b", "c"]), "v": pa.array([1, 2, 3], pa.int64())})
    with store.open_output("p/small.parquet") as f:
        pq.write_table(table, f)
    with store.open_input("p/small.parquet") as f:
        assert pq.read_table(f).equals(table)
    assert pq.ParquetFile(store.open_input("p/small.parquet")).metadata.num_rows == 3
    with store.open_input("p/small.parquet") as f:
        f.seek(-4, io.SEEK_END)
        assert f.read() == b"PAR1"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the broken reader's finalizer
def test_open_input_reads_objects_over_32_mb(store):
    blobs = [os.urandom(1 << 20) for _ in range(WHOLE_READ_MAX // (1 << 20) + 2)]
    table = pa.table({"i": pa.array(range(len(blobs)), pa.int64()), "b": pa.array(blobs, pa.binary())})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none")
    data = sink.getvalue()
    assert len(data) > WHOLE_READ_MAX
    store.write("big.parquet", data)
    try:
        with store.open_input("big.parquet") as f:
            f.seek(100)
            assert f.read(10) == data[100:110]
            f.seek(-10, io.SEEK_END)
            assert f.read() == data[-10:]
        with store.open_input("big.parquet") as f:
            assert pq.read_table(f).equals(table)
    finally:
        store.delete("big.parquet")


@pytest.mark.parametrize("path", ["/abs", "../up", "a/../../up", "a//b", "./a", "a\\b", "nul\x00", "a/"])
def test_paths_that_leave_the_root_are_refused(counted, path):
    server, store = counted
    for op in (
        lambda: store.write(path, b"x"),
        lambda: store.create(path, b"x"),
        lambda: store.put_if(path, b"x", None),
        lambda: store.read(path),
        lambda: store.read_range(path, 0, 1),
        lambda: store.exists(path),
        lambda: store.list(path),
        lambda: store.list_dirs(path),
        lambda: store.delete(path),
        lambda: store.delete_tree(path),
        lambda: store.child(path),
    ):
        with pytest.raises(HoodiePathError):
            op()
    with pytest.raises(HoodiePathError), store.open_output(path) as f:
        f.write(b"x")
    assert sum(server.counts().values()) == 0, "nothing was sent"


def test_the_root_is_not_an_object(store):
    with pytest.raises(HoodieStorageError, match="root"):
        store.write("", b"x")
    with pytest.raises(HoodieStorageError, match="whole root"):
        store.delete_tree("")


def test_a_pickled_storage_works_in_another_process(store):
    store.write("from-parent", b"parent")
    copy = pickle.loads(pickle.dumps(store))
    assert copy == store and copy.read("from-parent") == b"parent" and copy.requests["GET"] == 1
    child = (
        "import pickle, sys\n"
        "s = pickle.loads(sys.stdin.buffer.read())\n"
        "s.create('from-child', s.read('from-parent') + b' seen by the child')\n"
        "print(type(s).__name__, s.list('')[0].path)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child], input=pickle.dumps(store), capture_output=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["ObjectStorage", "from-child"]
    assert store.read("from-child") == b"parent seen by the child"


def test_repr_shows_no_secret(store):
    assert repr(store) == f"ObjectStorage({store.uri!r})" and str(store) == store.uri
    assert_no_secret(repr(store) + str(store) + repr(shown(store.options)))
    assert shown(store.options)["aws_secret_access_key"] == "***"
    assert shown(store.options)["aws_endpoint_url"] == store.options["aws_endpoint_url"]


# -- errors -----------------------------------------------------------------------------------------------------
def test_a_missing_bucket_is_named(s3_server):
    store = storage_for("s3://no-such-bucket-hoodie/t", s3_server.options())
    for op in (lambda: store.list(""), lambda: store.list_dirs("x"), lambda: store.exists("x")):
        with pytest.raises(HoodieStorageError, match="the bucket does not exist") as err:
            op()
        assert str(err.value).startswith("s3://no-such-bucket-hoodie/t") and "NoSuchBucket" in str(err.value)
        assert_no_secret(str(err.value))


def test_a_missing_bucket_is_named_on_read_and_write(s3_server):
    store = storage_for("s3://no-such-bucket-hoodie/t", s3_server.options())
    for op in (lambda: store.read("x"), lambda: store.write("x", b"1"), lambda: store.create("x", b"1")):
        with pytest.raises(HoodieStorageError, match="the bucket does not exist") as err:
            op()
        assert not isinstance(err.value, HoodieObjectNotFoundError), str(err.value)
        assert str(err.value).startswith("s3://no-such-bucket-hoodie/t/x")


def test_wrong_credentials_are_refused_without_showing_them(auth_server):
    uri = auth_server.new_table_uri("auth")
    good = storage_for(uri, auth_server.options())
    good.write("k", b"v")
    assert good.read("k") == b"v" and [f.path for f in good.list("")] == ["k"]
    wrong_secret = "wrong-secret-value-123"
    bad = storage_for(uri, auth_server.options(aws_secret_access_key=wrong_secret))
    for op, what in ((lambda: bad.write("k2", b"x"), "write"), (lambda: bad.read("k"), "read"), (bad.list, "list")):
        with pytest.raises(HoodieStorageError) as err:
            op()
        message = str(err.value)
        assert type(err.value) is HoodieStorageError and message.startswith(uri)
        assert f"{what} refused: 403" in message and "SignatureDoesNotMatch" in message
        assert "check the credentials" in message
        assert_no_secret(message, wrong_secret, auth_server.secret_key)
    unknown = storage_for(uri, auth_server.options(aws_access_key_id="AKIAUNKNOWNKEY000000"))
    with pytest.raises(HoodieStorageError, match="403.*InvalidAccessKeyId") as err:
        unknown.read("k")
    assert_no_secret(str(err.value), auth_server.secret_key)
    assert not good.exists("k2")


@pytest.mark.parametrize("uri", ["ftp://host/t", "bogus://b/t", "s4://b/t", "hdfs://namenode/t", "c:/t"])
def test_an_unknown_scheme_is_refused_and_creates_nothing(tmp_path, monkeypatch, uri):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(HoodieConfigError) as err:
        storage_for(uri, {"aws_region": "us-east-1"})
    assert str(err.value).startswith(uri)
    assert os.listdir(tmp_path) == []
    with pytest.raises(HoodieConfigError):
        ObjectStorage(f"file://{tmp_path}/t")


def test_a_file_uri_is_a_local_path(tmp_path):
    s = storage_for(f"file://{tmp_path}/t")
    assert isinstance(s, LocalStorage) and s.uri == str(tmp_path / "t")
    s.write("p/x", b"1")
    assert storage_for(str(tmp_path / "t")).read("p/x") == b"1"
    assert (tmp_path / "t" / "p" / "x").read_bytes() == b"1"


def test_an_unknown_storage_option_is_refused_naming_it(s3_table):
    uri, options = s3_table
    with pytest.raises(HoodieConfigError, match="unknown storage option 'bogus_option'"):
        storage_for(uri, {**options, "bogus_option": "1"})
    with pytest.raises(HoodieConfigError, match="'google_service_account' \\(a google option; this location is s3\\)"):
        storage_for(uri, {**options, "google_service_account": "x"})
    store = storage_for(uri, {**options, "aws_not_a_setting": "1"})  # aws_ keys are the client's to check
    with pytest.raises(HoodieConfigError, match="'aws_not_a_setting'") as err:
        store.write("x", b"1")
    assert_no_secret(str(err.value))
    with pytest.raises(HoodieConfigError, match="'timeout': 'soon' is not a duration"):
        storage_for(uri, {**options, "timeout": "soon"}).read("x")
    store = storage_for(uri, {**options, "timeout": "30", "connect_timeout": "500ms"})  # a bare number is seconds
    store.write("x", b"1")
    assert store.read("x") == b"1"


@pytest.mark.parametrize("option", [{"max_retries": "many"}, {"retry_timeout": "soon"}])
def test_a_malformed_retry_setting_is_refused_naming_it(s3_table, option):
    uri, options = s3_table
    (key,) = option
    with pytest.raises(HoodieConfigError, match=key):
        storage_for(uri, {**options, **option}).write("x", b"1")


@pytest.mark.parametrize(
    "option", [{"aws_randomize_addresses": "true"}, {"aws_default_content_type": "application/octet-stream"}]
)
def test_client_settings_are_taken_with_the_aws_prefix(s3_table, option):
    uri, options = s3_table
    try:
        store = storage_for(uri, {**options, **option})
        store.write("x", b"1")
    except BaseException as err:  # noqa: B036 - the client's panic is what is checked for
        raise AssertionError(f"{type(err).__name__}: {err}") from None
    assert store.read("x") == b"1"


# -- storage options ----------------------------------------------------------------------------------------------
def test_storage_options_precedence(monkeypatch):
    monkeypatch.setenv("AWS_REGION", "from-the-real-environment")
    fallback = {"aws_region": "spark", "aws_access_key_id": "spark-key", "aws_endpoint_url": "http://spark:9000"}
    environ = {"AWS_REGION": "env-region", "AWS_ACCESS_KEY_ID": "env-key", "AWS_SECRET_ACCESS_KEY": ""}
    got = resolve("s3://b/t", {"AWS_Region": "explicit", "aws_allow_http": True}, fallback, environ=environ)
    assert got == {
        "aws_region": "explicit",  # given > environment > fallback
        "aws_access_key_id": "env-key",  # environment > fallback
        "aws_endpoint_url": "http://spark:9000",  # only the fallback has it; an empty variable is no value
        "aws_allow_http": "true",
    }
    assert resolve("s3://b/t", None, fallback, environ={})["aws_region"] == "spark"
    assert resolve("s3://b/t", environ={}) == {}, "environ= replaces the process environment"
    assert resolve("s3://b/t", environ={"AWS_DEFAULT_REGION": "d"}) == {"aws_region": "d"}
    assert resolve("s3://b/t", environ={"AWS_DEFAULT_REGION": "d", "AWS_REGION": "r"}) == {"aws_region": "r"}
    endpoints = {"AWS_ENDPOINT_URL": "http://generic", "AWS_ENDPOINT_URL_S3": "http://s3-only"}
    assert resolve("s3a://b/t", environ=endpoints) == {"aws_endpoint_url": "http://s3-only"}
    assert resolve("s3://b/t", {"aws_endpoint": "http://alias", "aws_region": None}, environ={}) == {
        "aws_endpoint_url": "http://alias"
    }
    assert resolve("gs://b/t", environ={"GOOGLE_APPLICATION_CREDENTIALS": "/k.json", "AWS_REGION": "x"}) == {
        "google_application_credentials": "/k.json"
    }
    assert resolve("/local/t", {"anything": 1}, fallback, environ=environ) == {"anything": "1"}, "local: as given"
    with pytest.raises(HoodieConfigError, match="unknown storage option 'aws_region' \\(a aws option"):
        resolve("gs://b/t", {"aws_region": "x"}, environ={})


def test_s3a_settings_reach_the_server(s3_server):
    """Spark's fs.s3a settings as the fallback options: an http endpoint without a scheme, path style access."""
    prefix = "spark.hadoop.fs.s3a."
    conf = {
        prefix + "access.key": "hoodie-test-key",
        prefix + "secret.key": SECRET_KEY,
        prefix + "endpoint": f"{s3_server.host}:{s3_server.port}",
        prefix + "connection.ssl.enabled": "false",
        prefix + "path.style.access": "true",
        prefix + "endpoint.region": "us-east-1",
        prefix + "session.token": "",
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    settings = s3a_settings(conf)
    assert settings == {
        "aws_access_key_id": "hoodie-test-key",
        "aws_secret_access_key": SECRET_KEY,
        "aws_endpoint_url": s3_server.endpoint,
        "aws_allow_http": "true",
        "aws_virtual_hosted_style_request": "false",
        "aws_region": "us-east-1",
    }
    assert s3a_settings({prefix + "endpoint": "s3.example.com"}) == {"aws_endpoint_url": "https://s3.example.com"}
    assert s3a_settings({prefix + "endpoint": "http://h:1", prefix + "path.style.access": "false"}) == {
        "aws_endpoint_url": "http://h:1",
        "aws_virtual_hosted_style_request": "true",
    }
    uri = s3_server.new_table_uri("s3a")
    store = ObjectStorage(uri, resolve(uri, None, settings, environ={}))
    store.write("x", b"through s3a settings")
    assert storage_for(uri, s3_server.options()).read("x") == b"through s3a settings"


def test_redact():
    options = {"aws_secret_access_key": SECRET_KEY, "aws_session_token": "tok-12345", "aws_region": "us-east-1"}
    options["azure_storage_sas_key"] = "abc"  # shorter than 4: not looked for (it would blank out common words)
    text = (
        f"failed: secret {SECRET_KEY} token tok-12345 in us-east-1 at "
        "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA/2024&X-Amz-Signature=deadbeef&X-Amz-Security-Token=t0k "
        "https://acct.blob.core.windows.net/c/k?sv=2022&se=2030&sig=s1gn4ture abc"
    )
    out = redact(text, options)
    assert_no_secret(out, "tok-12345", "deadbeef", "AKIA/2024", "s1gn4ture", "t0k")
    assert "us-east-1" in out and "X-Amz-Signature=***" in out and "sig=***" in out and out.endswith(" abc")
    assert out.count("***") == 8
    assert redact("nothing secret", None) == "nothing secret"
    secret = ["aws_secret_access_key", "aws_session_token", "azure_storage_account_key", "google_service_account_key"]
    assert all(is_secret(k) for k in secret + ["azure_client_secret", "azure_storage_sas_key"])
    plain = ["aws_region", "aws_endpoint_url", "aws_allow_http", "azure_endpoint", "timeout", "max_retries"]
    assert not any(is_secret(k) for k in plain + ["azure_storage_account_name"])


# -- hudi-rs, the reader of the tests, with the same options ---------------------------------------------------------
def test_hudi_rs_reads_a_table_on_the_server_with_the_same_options(s3_server, fixture_table):
    from hudi import HudiReadOptions, HudiTableBuilder

    local = fixture_table("sample-cow-v6_nonpartitioned")
    uri = s3_server.new_table_uri("hudi-rs")
    store = storage_for(uri, s3_server.options())
    for root, _dirs, files in os.walk(local):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                store.write(os.path.relpath(path, local).replace(os.sep, "/"), f.read())

    def rows(base, options):
        table = HudiTableBuilder.from_base_uri(base).with_storage_options(options).build()
        return pa.Table.from_batches(table.read(HudiReadOptions())).sort_by("_hoodie_record_key").to_pylist()

    remote = rows(uri, s3_server.options())
    assert remote and remote == rows(str(local), {})


# -- a store cut off --------------------------------------------------------------------------------------------------
def test_a_store_cut_off_fails_fast_and_comes_back(s3_server):
    uri = s3_server.new_table_uri("cut")
    with TcpProxy(s3_server.host, s3_server.port) as proxy:
        store = storage_for(uri, s3_server.options(aws_endpoint_url=proxy.endpoint))
        store.write("before", b"1")
        proxy.cut()
        for op, path in ((lambda: store.write("during", b"2"), "during"), (lambda: store.read("before"), "before")):
            started = time.monotonic()
            with pytest.raises(HoodieStorageError) as err:
                op()
            assert time.monotonic() - started < 12, "max_retries 2, retry_timeout 10 s"
            assert str(err.value).startswith(f"{uri}/{path}: ") and "failed" in str(err.value)
            assert not isinstance(err.value, HoodieObjectNotFoundError)
            assert_no_secret(str(err.value))
        proxy.restore()
        assert not store.exists("during")
        store.write("during", b"2")
        assert store.read("during") == b"2" and store.read("before") == b"1"


def test_a_counting_server_stopped_and_started_keeps_its_objects(counted):
    server, store = counted
    store.write("kept", b"1")
    port = server.port
    server.stop()
    assert not server.running
    with pytest.raises(HoodieStorageError, match="write failed"):
        store.write("lost", b"2")
    server.start()
    assert server.port == port and store.read("kept") == b"1" and not store.exists("lost")
    assert server.counts()["PUT"] == 1, "requests while stopped reached nothing"
