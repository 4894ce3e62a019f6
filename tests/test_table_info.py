"""The notebook views of a table without Spark: `HoodieTable.commits()` checked against the timeline's commit
metadata files (parsed here with `json`), `file_slices()` against a listing of the table directory, the HTML view
against both, and the plots (rendered to PNG)."""

import datetime
import io
import json
import os
import re
import sys
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest

from conftest import v6_table_zips
from hoodie_stream.checkpoints.batch_checkpoint import CHECKPOINT_KEY, checkpoint_metadata
from hoodie_stream.compaction.execute import compact_operation
from hoodie_stream.compaction.operation import plan_operations
from hoodie_stream.compaction.plan import pending_plans, schedule_compaction
from hoodie_stream.format.hoodie_table import HoodieTable
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.commit_metadata import CommitMetadata
from hoodie_stream.format.views.table_html import human_bytes
from hoodie_stream.format.views.table_info import COMMITS_SCHEMA, FILE_SLICES_SCHEMA, STREAMING_CHECKPOINT_KEY
from hoodie_stream.format.write.writer import HoodieWriter
from hoodie_stream.options import parse_compaction_options

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.float64())])
PNG = b"\x89PNG\r\n\x1a\n"
FIXTURES = [p.stem for p in v6_table_zips()]
_COMPLETED = re.compile(r"^(\d{17})\.(commit|deltacommit|replacecommit)$")
_BASE = re.compile(r"^([^_.]+)_\d+-\d+-\d+_(\d+)\.parquet$")
_LOG = re.compile(r"^\.([^_]+)_(\d+)\.log\.\d+_\d+-\d+-\d+$")


def rows(ids, ts):
    ids = np.asarray(ids)
    return pa.table(
        {"id": [f"k{i:05d}" for i in ids], "ts": np.full(len(ids), ts, np.int64), "v": ids * 0.5}, schema=SCHEMA
    )


def keys(ids):
    return pa.array([f"k{i:05d}" for i in ids])


def build(path):
    """Two file groups in base files (batch 0 of writer w-q1), two delta commits of updates, inserts and deletes
    (batches 1, 2), a completed compaction, a delta commit of writer w-q2 (its batch 0), one without a streaming
    checkpoint, then a compaction plan left requested and a delta commit left inflight."""
    writer = HoodieWriter.create(
        path, table_name="info", record_key_fields=["id"], schema=SCHEMA, precombine_field="ts"
    )

    def checkpoint(identifier, batch):
        return checkpoint_metadata(writer.timeline, identifier, batch)

    txn = writer.start(operation="INSERT")
    groups = [txn.write_base("", rows(range(g * 100, g * 100 + 100), 1)) for g in (0, 1)]
    first = txn.commit(checkpoint("w-q1", 0))
    fresh = 1000
    for batch, ts in ((1, 2), (2, 3)):
        txn = writer.start()
        for g, stat in enumerate(groups):
            updated = np.arange(g * 100, g * 100 + 10 * batch)
            inserted = np.arange(fresh, fresh + 7)
            fresh += 7
            gone = np.arange(g * 100 + 90, g * 100 + 90 + batch)
            txn.append_log(
                "",
                stat.file_id,
                first,
                rows(np.concatenate([updated, inserted]), ts),
                deletes=(keys(gone), pa.array(np.full(len(gone), ts, np.int64))),
                num_inserts=len(inserted),
                base_file=stat.path.rsplit("/", 1)[-1],
            )
        txn.commit(checkpoint("w-q1", batch))
    compact(path)
    writer.timeline.reload()
    for extra in (checkpoint("w-q2", 0), None):
        txn = writer.start()
        txn.insert_log_only("", rows(np.arange(fresh, fresh + 5), 9))
        fresh += 5
        txn.commit(extra)
    pending = schedule_compaction(path, Timeline(path), parse_compaction_options(), force=True)
    assert pending
    writer.start()  # left inflight
    return pending


def compact(path):
    timeline = Timeline(path)
    opts = parse_compaction_options()
    instant = schedule_compaction(path, timeline, opts, force=True)
    ops = plan_operations(pending_plans(timeline)[instant])
    timeline.transition_to_inflight(instant, "compaction", b"")
    committed = {i.timestamp for i in timeline.commits_timeline()}
    stats = [
        compact_operation(path, instant, op, committed, opts.max_memory_bytes, f"{k}-0-0")[0]
        for k, op in enumerate(ops)
    ]
    timeline.complete(instant, "compaction", CommitMetadata({}, True, {}, "COMPACT").with_stats(stats).to_json())
    return instant


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("info") / "t")
    pending = build(path)
    return path, pending


# -- what the files say, read here without the project's readers -----------------------------------------------
def completed_metadata(base):
    """{instant: (file name, parsed JSON)} of the completed commit-like instants, from the .hoodie directory."""
    found = {}
    for name in os.listdir(os.path.join(base, ".hoodie")):
        m = _COMPLETED.match(name)
        if m:
            with open(os.path.join(base, ".hoodie", name), "rb") as f:
                data = f.read()
            found[m.group(1)] = (name, json.loads(data) if data.strip() else {})
    return found


def expected_figures(meta):
    stats = [s for group in (meta.get("partitionToWriteStats") or {}).values() for s in group or []]
    with_path = [s for s in stats if s.get("path")]
    return {
        "partitions_written": sum(1 for group in (meta.get("partitionToWriteStats") or {}).values() if group),
        "files_written": len(with_path),
        "log_files_written": sum(1 for s in with_path if ".log." in s["path"].rsplit("/", 1)[-1]),
        "records_written": sum(s.get("numWrites", 0) for s in stats),
        "records_inserted": sum(s.get("numInserts", 0) for s in stats),
        "records_updated": sum(s.get("numUpdateWrites", 0) for s in stats),
        "records_deleted": sum(s.get("numDeletes", 0) for s in stats),
        "bytes_written": sum(s.get("totalWriteBytes", 0) for s in stats),
        "operation": (meta.get("operationType") or "UNKNOWN").lower(),
    }


def listed_slices(base):
    """{(partition, file id): (base instant, base file, base size, [log sizes])} of the latest slices, from a walk
    of the table directory: the newest base file of a completed instant, its log files; replaced groups left out."""
    metadata = completed_metadata(base)
    replaced = {
        (p, fid)
        for _name, meta in metadata.values()
        for p, ids in (meta.get("partitionToReplaceFileIds") or {}).items()
        for fid in ids
    }
    bases, logs = defaultdict(dict), defaultdict(lambda: defaultdict(list))
    for root, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        partition = os.path.relpath(root, base).replace(os.sep, "/")
        partition = "" if partition == "." else partition
        for name in files:
            size = os.path.getsize(os.path.join(root, name))
            m = _BASE.match(name)
            if m and m.group(2) in metadata:
                bases[(partition, m.group(1))][m.group(2)] = (name, size)
            m = _LOG.match(name)
            if m:
                logs[(partition, m.group(1))][m.group(2)].append(size)
    out = {}
    for group in set(bases) | set(logs):
        if group in replaced:
            continue
        instants = sorted(bases[group]) or sorted(logs[group])
        latest = instants[-1]
        name, size = bases[group].get(latest, (None, 0))
        out[group] = (latest, name, size, logs[group].get(latest, []))
    return out


def mtime_utc(base, name):
    return datetime.datetime.fromtimestamp(os.path.getmtime(os.path.join(base, ".hoodie", name)), datetime.timezone.utc)


def same_ms(got, expected):
    """A timestamp column value (milliseconds) is the file's modification time."""
    return got is not None and abs((got - expected).total_seconds()) < 0.001


def check_commits(base):
    commits = HoodieTable(base).commits()
    assert commits.schema.equals(COMMITS_SCHEMA)
    metadata = completed_metadata(base)
    done = [r for r in commits.to_pylist() if r["state"] == "completed" and r["operation"] is not None]
    assert [r["instant"] for r in done] == sorted(metadata)
    for r in done:
        name, meta = metadata[r["instant"]]
        assert {k: r[k] for k in expected_figures(meta)} == expected_figures(meta), r["instant"]
        assert same_ms(r["completed_time"], mtime_utc(base, name))
        parsed = datetime.datetime.strptime(r["instant"], "%Y%m%d%H%M%S%f")
        assert r["requested_time"].replace(tzinfo=None) == parsed or HoodieTable(base).config.timeline_timezone != (
            "UTC"
        )
    others = [r for r in commits.to_pylist() if r not in done]
    for r in others:
        assert r["records_written"] is None and r["bytes_written"] is None and r["batch_id"] is None
    return commits


def check_slices(base):
    slices = HoodieTable(base).file_slices()
    assert slices.schema.equals(FILE_SLICES_SCHEMA)
    got = {
        (r["partition"], r["file_id"]): (r["base_instant"], r["base_file"], r["base_file_size"], r)
        for r in slices.to_pylist()
    }
    listed = listed_slices(base)
    assert set(got) == set(listed)
    for group, (instant, name, size, log_sizes) in listed.items():
        r = got[group][3]
        assert (r["base_instant"], r["base_file"], r["base_file_size"]) == (instant, name, size), group
        assert (r["log_files"], r["log_files_size"]) == (len(log_sizes), sum(log_sizes)), group
        assert r["total_size"] == size + sum(log_sizes)
    return slices


# -- the tests ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FIXTURES)
def test_commits_and_slices_of_the_fixtures(fixture_table, name):
    base = str(fixture_table(name))
    check_commits(base)
    check_slices(base)


def test_commits_of_a_written_table(built):
    path, pending = built
    commits = check_commits(path)
    table = commits.to_pylist()
    done = [r for r in table if r["state"] == "completed"]
    assert [r["action"] for r in done] == ["deltacommit"] * 3 + ["commit"] + ["deltacommit"] * 2
    assert done[3]["operation"] == "compact"
    # the batch id each commit recorded: the entry of the checkpoint map that changed
    assert [(r["writer"], r["batch_id"]) for r in done] == [
        ("w-q1", 0),
        ("w-q1", 1),
        ("w-q1", 2),
        (None, None),
        ("w-q2", 0),
        (None, None),
    ]
    assert STREAMING_CHECKPOINT_KEY == CHECKPOINT_KEY
    _name, last_meta = completed_metadata(path)[done[4]["instant"]]
    assert json.loads(last_meta["extraMetadata"][CHECKPOINT_KEY]) == {"w-q1": "2", "w-q2": "0"}
    # the pending instants: the compaction plan (requested) and the delta commit (inflight)
    rest = [(r["action"], r["state"]) for r in table if r["state"] != "completed"]
    assert rest == [("compaction", "requested"), ("deltacommit", "inflight")]
    plan = next(r for r in table if r["action"] == "compaction")
    assert plan["instant"] == pending and plan["inflight_time"] is None and plan["completed_time"] is None
    inflight = table[-1]
    assert same_ms(inflight["inflight_time"], mtime_utc(path, f"{inflight['instant']}.deltacommit.inflight"))
    compaction = done[3]
    assert same_ms(compaction["inflight_time"], mtime_utc(path, f"{compaction['instant']}.compaction.inflight"))


def test_file_slices_of_a_written_table(built):
    path, _pending = built
    slices = check_slices(path)
    assert slices.num_rows == 4  # two compacted groups and two log-only groups
    assert sorted(slices["log_files"].to_pylist()) == [0, 0, 1, 1]


def test_html_view_holds_the_figures(built):
    path, pending = built
    table = HoodieTable(path)
    page = table._repr_html_()
    listed = listed_slices(path)
    data_bytes = sum(
        os.path.getsize(os.path.join(root, f))
        for root, dirs, files in os.walk(path)
        if ".hoodie" not in root.split(os.sep)
        for f in files
        if _BASE.match(f) or _LOG.match(f)
    )
    done = [r for r in table.commits().to_pylist() if r["state"] == "completed"]
    for text in (
        "MERGE_ON_READ",
        "<td style='text-align:left'>id</td>",  # record key fields
        f"<td style='text-align:left'>{len(listed)}</td>",  # file groups
        f"<td style='text-align:left'>{len(listed) + 2}</td>",  # slices: the compacted groups have two each
        human_bytes(data_bytes),
        f"1 ({pending})",  # pending compactions
        done[-1]["instant"],
        "s ago",
    ):
        assert text in page, text
    since = page.split("delta commits since the last compaction</th><td style='text-align:left'>")[1]
    assert since.startswith("2<")


def test_plots_render_png(built):
    pytest.importorskip("matplotlib")
    from hoodie_stream.notebook import plots

    path, _pending = built
    table = HoodieTable(path)
    done = [r for r in table.commits().to_pylist() if r["state"] == "completed"]
    figures = {
        "commits": plots.plot_commits(table),
        "sizes": plots.plot_file_sizes(path, target_size=1024 * 1024),
        "logs": plots.plot_log_files(table),
        "backlog": plots.plot_compaction_backlog(table),
    }
    for name, fig in figures.items():
        out = io.BytesIO()
        fig.savefig(out, format="png")
        assert out.getvalue().startswith(PNG), name
    top = figures["commits"].axes[0]
    assert [len(c) for c in top.containers] == [len(done)] * 3  # inserted, updated, deleted bars per commit
    inserted = [p.get_height() for p in top.containers[0]]
    assert inserted == [r["records_inserted"] for r in done]
    assert any(list(line.get_xdata()) == [1.0, 1.0] for line in figures["sizes"].axes[0].lines)  # the 1 MiB target
    bars = figures["logs"].axes[0].patches
    assert sorted((p.get_x() + p.get_width() / 2, p.get_height()) for p in bars) == [(0.0, 2), (1.0, 2)]
    backlog = figures["backlog"].axes[0].lines[0]
    assert list(backlog.get_ydata()) == [1, 2, 3, 0, 1, 2]


def test_plots_say_which_extra_to_install(built, monkeypatch):
    from hoodie_stream.notebook import plots

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r'pip install "hoodie-stream\[notebook\]"'):
        plots.plot_commits(built[0])
