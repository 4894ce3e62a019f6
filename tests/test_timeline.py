import os
import threading

import pytest

from conftest import v6_table_zips, v8_table_zips
from hoodie_stream.errors import HoodieTimelineError
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.instant import Instant, new_instant_time

V6 = [p.stem for p in v6_table_zips()]


@pytest.mark.parametrize(
    "name,action,state,ts",
    [
        ("20250101000000000.deltacommit", "deltacommit", "completed", "20250101000000000"),
        ("20250101000000000.deltacommit.inflight", "deltacommit", "inflight", "20250101000000000"),
        ("20250101000000000.deltacommit.requested", "deltacommit", "requested", "20250101000000000"),
        ("20250101000000000.inflight", "commit", "inflight", "20250101000000000"),
        ("20250101000000000.commit", "commit", "completed", "20250101000000000"),
        ("20250101000000000.commit.requested", "commit", "requested", "20250101000000000"),
        ("20250101000000000.compaction.requested", "compaction", "requested", "20250101000000000"),
        ("20250101000000000.compaction.inflight", "compaction", "inflight", "20250101000000000"),
        ("20250101000000000.rollback", "rollback", "completed", "20250101000000000"),
        ("20240101000000.replacecommit.requested", "replacecommit", "requested", "20240101000000"),
    ],
)
def test_file_names(name, action, state, ts):
    inst = Instant.from_file_name(name)
    assert inst == Instant(ts, action, state)
    assert inst.file_name == name


def test_non_instant_names():
    for name in [
        "hoodie.properties",
        ".temp",
        "archived",
        ".20250101000000000.commit.x.tmp",
        "foo.commit",
        "20250101000000000.unknown",
        "20250101000000000_20250101000000001.commit",
    ]:
        assert Instant.from_file_name(name) is None
    assert Instant("1" * 17, "compaction", "completed").file_name == "1" * 17 + ".commit"
    assert Instant("1" * 17, "logcompaction", "completed").file_name == "1" * 17 + ".deltacommit"


@pytest.mark.parametrize(
    "name,expected",
    [
        (
            "20250101000000000_20250101000000123.deltacommit",
            ("20250101000000000", "deltacommit", "completed", "20250101000000123"),
        ),
        (
            "20250101000000000_20250101000000123.commit",
            ("20250101000000000", "commit", "completed", "20250101000000123"),
        ),
        (
            "20250101000000000_20250101000000123.indexing",
            ("20250101000000000", "indexing", "completed", "20250101000000123"),
        ),
        ("20250101000000000.deltacommit.requested", ("20250101000000000", "deltacommit", "requested", None)),
        ("20250101000000000.inflight", ("20250101000000000", "commit", "inflight", None)),
        ("20250101000000000.compaction.inflight", ("20250101000000000", "compaction", "inflight", None)),
        ("20250101000000000.deltacommit", ("20250101000000000", "deltacommit", "completed", None)),  # legacy: no C
        ("20250101000000000_20250101000000123.deltacommit.inflight", None),  # a completion time on a pending file
        ("20250101000000000_2025.deltacommit", None),
        ("20250101000000000_20250101000000123.compaction", None),  # a completed compaction is a commit
        ("history", None),
    ],
)
def test_layout_2_file_names(name, expected):
    """Table version 8 and later (timeline layout 2): a completed instant's file names its completion time."""
    inst = Instant.from_file_name(name, completion_times=True)
    assert inst == (None if expected is None else Instant(*expected))
    if inst is not None:
        assert inst.file_name == name


V8 = [p.stem for p in v8_table_zips()]


@pytest.mark.parametrize("name", V8)
def test_layout_2_fixture_timelines(fixture_table, name):
    """The v8 fixtures' timelines in .hoodie/timeline/: every completed instant with its completion time, after
    its instant time; commit metadata read from Avro."""
    base = fixture_table(name)
    tl = Timeline(base)
    assert tl.layout == 2 and tl.dir == ".hoodie/timeline"
    files = [f for f in os.listdir(base / ".hoodie" / "timeline") if Instant.from_file_name(f, True)]
    assert {i.timestamp for i in tl.instants} == {Instant.from_file_name(f, True).timestamp for f in files}
    done = [f for f in files if "_" in f]
    assert sorted(i.file_name for i in tl.completed()) == sorted(done)
    for inst in tl.commits_timeline():
        assert inst.completion_time > inst.timestamp
        meta = tl.read_commit_metadata(inst.timestamp)
        assert meta.operation_type != "UNKNOWN", meta
        if "-mor-" in name:  # a merge-on-read table's commits are its compactions
            assert meta.is_compaction == (inst.action == "commit"), meta
        assert all(s.file_id for s in meta.all_write_stats())
    from hoodie_stream import HoodieTable

    commits = HoodieTable(base).commits()  # the notebook's and the command line's view: times from the names
    done = {i.timestamp: i.completion_time for i in tl.completed()}
    for instant, completed, inflight in zip(
        *(commits[c].to_pylist() for c in ("instant", "completed_time", "inflight_time"))
    ):
        assert completed.strftime("%Y%m%d%H%M%S%f")[:17] == done[instant]
        assert inflight is not None or instant not in {i.timestamp for i in tl.commits_timeline()}


def test_new_instant_time_strictly_increasing():
    times = [new_instant_time() for _ in range(10000)]
    assert all(len(t) == 17 and t.isdigit() for t in times)
    assert all(a < b for a, b in zip(times, times[1:]))
    assert new_instant_time("29991231235959999") == "30000101000000000"
    assert new_instant_time("20240101000000") > "20240101000000"


def test_new_instant_time_threads():
    out = []
    lock = threading.Lock()

    def work():
        mine = [new_instant_time() for _ in range(2000)]
        with lock:
            out.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == len(out) == 8000


@pytest.mark.parametrize("name", V6)
def test_fixture_timelines(fixture_table, name):
    base = fixture_table(name)
    tl = Timeline(base)
    files = [f for f in os.listdir(base / ".hoodie") if Instant.from_file_name(f)]
    assert {i.timestamp for i in tl.instants} == {Instant.from_file_name(f).timestamp for f in files}
    assert all(i.is_completed for i in tl.instants)
    assert tl.pending() == []
    commits = tl.commits_timeline()
    assert [i.timestamp for i in commits] == sorted(i.timestamp for i in commits)
    if "empty" in name:
        assert commits == [] and tl.last_instant_time() is None
        return
    assert commits and tl.last_instant_time() == tl.instants[-1].timestamp
    for inst in commits:
        meta = tl.read_commit_metadata(inst.timestamp)
        assert meta.operation_type
        assert tl.is_completed(inst.timestamp) and tl.get(inst.timestamp) == inst
    for inst in tl.completed(["rollback"]):
        assert tl.read_avro(inst)["commitsRollback"]
        assert tl.read_avro(Instant(inst.timestamp, "rollback", "requested"))["instantToRollback"]


def test_transitions(tmp_path):
    (tmp_path / ".hoodie").mkdir()
    tl = Timeline(tmp_path)
    t1 = new_instant_time()
    tl.create_requested(t1, "deltacommit")
    assert tl.pending() == [Instant(t1, "deltacommit", "requested")]
    tl.transition_to_inflight(t1, "deltacommit", b"{}")
    assert tl.get(t1).state == "inflight"
    with pytest.raises(HoodieTimelineError, match="already exists"):
        tl.transition_to_inflight(t1, "deltacommit", b"{}")
    tl.complete(
        t1, "deltacommit", b'{"partitionToWriteStats":{},"compacted":false,"extraMetadata":{},"operationType":"UPSERT"}'
    )
    assert tl.commits_timeline() == [Instant(t1, "deltacommit", "completed")]
    assert tl.read_commit_metadata(t1).operation_type == "UPSERT"
    with pytest.raises(HoodieTimelineError, match="already completed"):
        tl.complete(t1, "deltacommit", b"{}")
    with pytest.raises(HoodieTimelineError, match="completed"):
        tl.delete_instant_files(t1, "deltacommit")
    with pytest.raises(HoodieTimelineError, match="not greater"):
        tl.create_requested(t1, "deltacommit")
    with pytest.raises(HoodieTimelineError, match="not greater"):
        tl.create_requested("20000101000000000", "commit")
    with pytest.raises(HoodieTimelineError, match="invalid instant"):
        tl.create_requested("abc", "commit")
    t2 = new_instant_time(tl.last_instant_time())
    with pytest.raises(HoodieTimelineError, match="not requested"):
        tl.transition_to_inflight(t2, "commit")
    tl.create_requested(t2, "commit")
    with pytest.raises(HoodieTimelineError, match="not inflight"):
        tl.complete(t2, "commit", b"{}")
    tl.transition_to_inflight(t2, "commit")
    assert (tmp_path / ".hoodie" / f"{t2}.inflight").exists()
    assert tl.pending(["commit"]) == [Instant(t2, "commit", "inflight")]
    assert len(tl.delete_instant_files(t2, "commit")) == 2
    assert tl.get(t2) is None and tl.last_instant_time() == t1
    # compaction completes as T.commit and then shows as a completed commit
    t3 = new_instant_time(tl.last_instant_time())
    tl.create_requested(t3, "compaction", b"plan")
    tl.transition_to_inflight(t3, "compaction")
    assert tl.pending(["compaction"]) == [Instant(t3, "compaction", "inflight")]
    tl.complete(t3, "compaction", b'{"compacted":true,"operationType":"COMPACT"}')
    assert (tmp_path / ".hoodie" / f"{t3}.commit").exists()
    assert tl.pending() == [] and tl.commits_timeline()[-1] == Instant(t3, "commit", "completed")
    assert tl.read_commit_metadata(t3).compacted
    assert not [f for f in os.listdir(tmp_path / ".hoodie") if f.endswith(".tmp")]


def test_delete_completed_when_asked(tmp_path):
    (tmp_path / ".hoodie").mkdir()
    tl = Timeline(tmp_path)
    t = new_instant_time()
    tl.create_requested(t, "deltacommit")
    tl.transition_to_inflight(t, "deltacommit")
    tl.complete(t, "deltacommit", b"{}")
    assert len(tl.delete_instant_files(t, "deltacommit", only_pending=False)) == 3
    assert tl.instants == []


@pytest.mark.parametrize("shared", [False, True])
def test_layout_2_transitions(tmp_path, monkeypatch, shared):
    """Layout 2 (table versions 8, 9) written as Hudi 1.x writes it: files in .hoodie/timeline/, every state's file
    kept, a completed instant named `T_C.<action>` with a completion time after every time on the timeline, commit
    metadata in Avro; with and without the process's shared timeline snapshot (object stores)."""
    from hoodie_stream.format.avro.models import read_container
    from hoodie_stream.format.timeline import active_timeline
    from hoodie_stream.format.timeline.commit_metadata import CommitMetadata

    monkeypatch.setattr(active_timeline, "SHARED", shared)
    active_timeline.invalidate()
    (tmp_path / ".hoodie" / "timeline").mkdir(parents=True)
    tl = Timeline(tmp_path, layout=(2, ".hoodie/timeline"))
    t1 = tl.create_new("deltacommit")
    tl.transition_to_inflight(t1, "deltacommit", CommitMetadata({}, False, {}, "UPSERT", None))
    tl.complete(t1, "deltacommit", CommitMetadata({}, False, {"checkpoint": "7"}, "UPSERT", None))
    done = tl.get(t1)
    assert done.state == "completed" and done.completion_time > t1
    names = sorted(os.listdir(tmp_path / ".hoodie" / "timeline"))
    assert names == [
        f"{t1}.deltacommit.inflight",
        f"{t1}.deltacommit.requested",
        f"{t1}_{done.completion_time}.deltacommit",
    ]
    data = (tmp_path / ".hoodie" / "timeline" / names[-1]).read_bytes()
    assert data.startswith(b"Obj\x01") and read_container(data)["extraMetadata"] == {"checkpoint": "7"}
    assert tl.read_commit_metadata(t1).extra_metadata == {"checkpoint": "7"}
    with pytest.raises(HoodieTimelineError, match="already completed"):
        tl.complete(t1, "deltacommit", b"")
    with pytest.raises(HoodieTimelineError, match="completed"):
        tl.delete_instant_files(t1, "deltacommit")
    # a compaction completes as T_C.commit; its completion comes after the delta commit's
    t2 = tl.create_new("compaction", b"plan")
    assert t2 > done.completion_time
    tl.transition_to_inflight(t2, "compaction")
    tl.revert_to_requested(t2, "compaction")
    assert tl.get(t2).state == "requested"
    tl.transition_to_inflight(t2, "compaction")
    tl.complete(t2, "compaction", CommitMetadata({}, True, {}, "COMPACT", None))
    compacted = tl.get(t2)
    assert compacted.action == "commit" and compacted.completion_time > done.completion_time
    assert (tmp_path / ".hoodie" / "timeline" / f"{t2}_{compacted.completion_time}.commit").exists()
    assert tl.read_commit_metadata(t2).compacted
    assert len(tl.delete_instant_files(t1, "deltacommit", only_pending=False)) == 3
    assert Timeline(tmp_path, layout=(2, ".hoodie/timeline")).instants == [compacted]
    assert not list((tmp_path / ".hoodie").glob("*.deltacommit*"))
