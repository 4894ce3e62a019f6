"""The storage layer on its own: the operations, create-if-absent, durability (fsync of file and directory), paths
that would leave the root, and local copies for memory-mapping."""

import os
import stat

import pytest

import hoodie_stream.storage.local as local_module
from hoodie_stream.errors import HoodieObjectExistsError, HoodieObjectNotFoundError, HoodiePathError
from hoodie_stream.storage import LocalStorage, storage_for
from hoodie_stream.storage.local_cache import LocalCache
from recording_storage import RecordingStorage, read_calls


def test_operations(tmp_path):
    s = storage_for(f"file://{tmp_path}")
    assert isinstance(s, LocalStorage) and s.uri == str(tmp_path)
    assert s.write("a/b/c.bin", b"12345") == 5
    assert s.read("a/b/c.bin") == b"12345" and s.read_range("a/b/c.bin", 1, 3) == b"234"
    assert s.exists("a/b/c.bin") and s.size("a/b/c.bin") == 5 and not s.exists("a/b/x")
    with s.open_input("a/b/c.bin") as f:
        f.seek(2)
        assert f.read(2) == b"34"
    s.write("a/b/c.bin", [b"ab", b"cd"])  # write replaces
    assert s.read("a/b/c.bin") == b"abcd"
    s.create("a/d.bin", b"x")
    assert [(f.path, f.size) for f in s.list("a")] == [("a/d.bin", 1)]
    assert [f.path for f in s.list("a", recursive=True)] == ["a/b/c.bin", "a/d.bin"]
    assert s.list_dirs("") == ["a"] and s.list("nowhere") == [] and s.list_dirs("nowhere") == []
    assert s.child("a").read("d.bin") == b"x" and s.child("a").uri == os.path.join(str(tmp_path), "a")
    assert s.delete("a/d.bin") and not s.delete("a/d.bin")
    s.delete_tree("a")
    assert s.list("", recursive=True) == []
    with pytest.raises(HoodieObjectNotFoundError, match="does not exist"):
        s.read("a/b/c.bin")
    assert s.relative(f"file:{tmp_path}/p/x.parquet") == "p/x.parquet" == s.relative(f"{tmp_path}/p/x.parquet")
    with pytest.raises(HoodiePathError):
        s.relative("/elsewhere/x.parquet")


def test_create_if_absent_never_overwrites(tmp_path):
    s = LocalStorage(tmp_path)
    s.create("t/1.deltacommit", b"first")
    with pytest.raises(HoodieObjectExistsError, match="already exists"):
        s.create("t/1.deltacommit", b"second")
    with pytest.raises(HoodieObjectExistsError), s.open_output("t/1.deltacommit", create=True) as f:
        f.write(b"third")
    assert s.read("t/1.deltacommit") == b"first"
    assert os.listdir(tmp_path / "t") == ["1.deltacommit"], "no temporary file left behind"


def test_a_failed_write_leaves_nothing(tmp_path):
    s = LocalStorage(tmp_path)
    s.write("x", b"old")
    with pytest.raises(RuntimeError), s.open_output("x") as f:
        f.write(b"new, half written")
        raise RuntimeError("writer died")
    assert s.read("x") == b"old" and os.listdir(tmp_path) == ["x"]


def test_writes_fsync_the_file_and_its_directory(tmp_path, monkeypatch):
    synced = []

    def recording(sync):
        def record(fd):
            synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
            sync(fd)

        return record

    monkeypatch.setattr(local_module.os, "fsync", recording(os.fsync))
    monkeypatch.setattr(local_module.os, "fdatasync", recording(os.fdatasync))
    s = LocalStorage(tmp_path)
    for op in (lambda: s.write("a/w", b"1"), lambda: s.create("a/c", b"2"), lambda: s.delete("a/w")):
        synced.clear()
        op()
        assert "dir" in synced
    synced.clear()
    s.create("a/c2", b"3")
    assert synced == ["file", "dir"]


@pytest.mark.parametrize(
    "path", ["/abs", "../up", "a/../../up", "a//b", "./a", "a/.", "a\\b", "nul\x00", "tab\tx", "a/"]
)
def test_paths_that_leave_the_root_are_refused(tmp_path, path):
    s = LocalStorage(tmp_path / "root")
    for op in (
        lambda: s.write(path, b"x"),
        lambda: s.create(path, b"x"),
        lambda: s.read(path),
        lambda: s.exists(path),
        lambda: s.list(path),
        lambda: s.delete(path),
        lambda: s.delete_tree(path),
        lambda: s.local_file(path),
        lambda: s.child(path),
    ):
        with pytest.raises(HoodiePathError):
            op()
    assert not os.path.exists(tmp_path / "root") and sorted(os.listdir(tmp_path)) == []


def test_local_copies_for_memory_mapping(tmp_path):
    (tmp_path / "backing").mkdir()
    remote = RecordingStorage("cache-test", tmp_path / "backing", tmp_path / "calls.jsonl")
    remote.local_cache = LocalCache(str(tmp_path / "cache"))
    remote.write("idx/0001/1.full.arrow", b"state")
    local = remote.local_file("idx/0001/1.full.arrow")
    assert local.startswith(str(tmp_path / "cache")) and open(local, "rb").read() == b"state"
    assert remote.local_file("idx/0001/1.full.arrow") == local
    reads = [c for c in read_calls(tmp_path / "calls.jsonl") if c["op"] == "read"]
    assert len(reads) == 1, "copied once"
    with pytest.raises(HoodiePathError):
        remote.local_file("../escape")
    # a local storage maps its own file, no copy
    s = LocalStorage(tmp_path / "t")
    s.write("f", b"1")
    assert s.local_file("f") == str(tmp_path / "t" / "f")
