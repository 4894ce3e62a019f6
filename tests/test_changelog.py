"""The changelog (CDC) query, Spark-free: `HoodieTable.read_changes` against a plain-Python model of the table.

Random workloads of upserts (some losing to a greater ordering value), deletes (some of missing keys), re-inserts of
deleted keys and partition moves, committed one delta commit at a time into log files, with compactions scheduled
(writes then go into the new slice while the plan is pending) and run between them. For every window of the
workload, the changes read equal the model's: per commit, `i` for a key that appeared in a file group, `d` for one
that left it, `u` for one whose record a winning write replaced; a write that changed nothing (an update that lost,
a delete of a missing key) is no change, as in Hudi's CDC query.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hoodie_stream import HoodieTable
from hoodie_stream.cli.rollback import rollback
from hoodie_stream.cli.validate import validate
from hoodie_stream.compaction import clean as cleaning
from hoodie_stream.compaction.execute import compact_operation
from hoodie_stream.compaction.operation import plan_operations
from hoodie_stream.compaction.plan import pending_file_groups, pending_plans, schedule_compaction
from hoodie_stream.errors import HoodieConfigError, HoodieError
from hoodie_stream.format.cdc.query import logging_mode
from hoodie_stream.format.file_group.fs_view import FileSystemView
from hoodie_stream.format.read.time_travel import HoodieTimeTravelError
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.commit_metadata import CommitMetadata
from hoodie_stream.format.write.writer import HoodieWriter
from hoodie_stream.options import parse_compaction_options

SCHEMA = pa.schema([("id", pa.string()), ("region", pa.string()), ("v", pa.int64()), ("ts", pa.int64())])
CDC = {"hoodie.table.cdc.enabled": "true"}
KEYS = [f"k{i}" for i in range(6)]


class Workload:
    """A table written commit by commit, and the model: key -> (region, v, ts), and per commit its changes."""

    def __init__(self, path, extra=CDC):
        self.path = path
        self.writer = HoodieWriter.create(
            path,
            table_name="t",
            record_key_fields=["id"],
            schema=SCHEMA,
            precombine_field="ts",
            partition_fields=["region"],
            extra=extra,
        )
        self.state: dict[str, tuple[str, int, int]] = {}
        self.changes: list[tuple[str, str, str, str, int, int]] = []  # (instant, op, id, region, v, ts)
        self.befores: list[tuple[str, str, str, int, int]] = []  # per update: (instant, id, region, v, ts) before it
        self.instants: list[str] = []
        self.file_ids: dict[str, str] = {}  # region -> its file group

    def commit(self, ops):
        """`ops`: {key: ("upsert", region, v, ts) | ("delete",)}, one per key."""
        txn = self.writer.start()
        instant = txn.instant
        by_region: dict[str, dict] = {}
        changes = []
        for key, op in sorted(ops.items()):
            old = self.state.get(key)
            if op[0] == "delete":
                if old is not None:
                    by_region.setdefault(old[0], {"rows": [], "deletes": []})["deletes"].append(key)
                    changes.append((instant, "d", key, *old))
                    del self.state[key]
                else:  # a delete of a missing key: written, changes nothing
                    by_region.setdefault("r0", {"rows": [], "deletes": []})["deletes"].append(key)
                continue
            _, region, v, ts = op
            by_region.setdefault(region, {"rows": [], "deletes": []})["rows"].append((key, region, v, ts))
            if old is None:
                changes.append((instant, "i", key, region, v, ts))
                self.state[key] = (region, v, ts)
            elif old[0] != region:  # a partition move: the old copy deleted, the new one inserted
                by_region.setdefault(old[0], {"rows": [], "deletes": []})["deletes"].append(key)
                changes.append((instant, "d", key, *old))
                changes.append((instant, "i", key, region, v, ts))
                self.state[key] = (region, v, ts)
            elif ts >= old[2]:  # the greater ordering value wins, a tie the later write
                changes.append((instant, "u", key, region, v, ts))
                self.befores.append((instant, key, *old))
                self.state[key] = (region, v, ts)
        pending = pending_file_groups(Timeline(self.path))
        view = FileSystemView(self.path)
        for region, parts in sorted(by_region.items()):
            rows = pa.table({name: [r[i] for r in parts["rows"]] for i, name in enumerate(SCHEMA.names)}, schema=SCHEMA)
            deletes = (pa.array(parts["deletes"], pa.string()), None) if parts["deletes"] else None
            fid = self.file_ids.get(region)
            if fid is None:
                if not rows.num_rows:
                    continue  # deletes of missing keys in a partition with no file group: nothing to write
                self.file_ids[region] = txn.insert_log_only(region, rows).file_id
                continue
            base = pending.get((region, fid))
            if base is None:
                (fs,) = [s for s in view.latest_slices(region) if s.file_id == fid]
                base = fs.base_instant
            inserts = sum(1 for r in parts["rows"] if r[0] not in self.state or self.state[r[0]][0] != region)
            txn.append_log(region, fid, base, rows if rows.num_rows else None, deletes=deletes, num_inserts=inserts)
        txn.commit()
        self.instants.append(instant)
        self.changes += changes

    def schedule(self):
        return schedule_compaction(self.path, Timeline(self.path), parse_compaction_options(), force=True)

    def run_compactions(self):
        """Run the pending plans (scheduling one first when none is pending)."""
        if not pending_plans(Timeline(self.path)):
            self.schedule()
        tl = Timeline(self.path)
        for instant, plan in sorted(pending_plans(tl).items()):
            ops = plan_operations(plan)
            tl.transition_to_inflight(instant, "compaction", b"")
            committed = {i.timestamp for i in tl.commits_timeline()}
            stats = [
                compact_operation(self.path, instant, op, committed, 1 << 30, f"{k}-0-0")[0] for k, op in enumerate(ops)
            ]
            tl.complete(instant, "compaction", CommitMetadata({}, True, {}, "COMPACT").with_stats(stats).to_json())

    def expected(self, start=None, end=None):
        return sorted(c for c in self.changes if (start is None or c[0] > start) and (end is None or c[0] <= end))

    def expected_befores(self, start=None, end=None):
        return sorted(c for c in self.befores if (start is None or c[0] > start) and (end is None or c[0] <= end))


def update_befores(table, start=None, end=None):
    """(ts_ms, id, region, v, ts) of the before image of every update, from the JSON form."""
    rows = table.read_changes(start, end).to_pylist()
    images = [(r["ts_ms"], json.loads(r["before"])) for r in rows if r["op"] == "u"]
    return sorted((ts, b["id"], b["region"], b["v"], b["ts"]) for ts, b in images)


def flat_changes(table, start=None, end=None):
    got = table.read_changes(start, end, flat=True)
    return sorted(zip(*(got[c].to_pylist() for c in ("ts_ms", "op", "id", "region", "v", "ts")), strict=True))


op_strategy = st.one_of(
    st.tuples(st.just("upsert"), st.sampled_from(["r0", "r1"]), st.integers(0, 99), st.integers(0, 3)),
    st.just(("delete",)),
)
step_strategy = st.one_of(
    st.dictionaries(st.sampled_from(KEYS), op_strategy, min_size=1, max_size=4),
    st.sampled_from(["schedule", "compact"]),
)


def cdc(mode):
    return {**CDC, "hoodie.table.cdc.supplemental.logging.mode": mode}


# DATA_BEFORE_AFTER: every delta commit logs its changes in .cdc files, which the reader takes as they are; the other
# modes log nothing and the reader infers the changes from the file slices
@pytest.mark.parametrize("mode", ["DATA_BEFORE_AFTER", "OP_KEY_ONLY"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step_strategy, min_size=1, max_size=9), data=st.data())
def test_the_changelog_of_any_window_is_the_models(tmp_path_factory, mode, steps, data):
    w = Workload(str(tmp_path_factory.mktemp("cdc")), extra=cdc(mode))
    for step in steps:
        if step == "schedule":
            w.schedule()
        elif step == "compact":
            w.run_compactions()
        else:
            w.commit(step)
    table = HoodieTable(w.path)
    assert flat_changes(table) == w.expected()
    assert update_befores(table) == w.expected_befores()
    if w.instants:
        bounds = [None, *w.instants]
        start = data.draw(st.sampled_from(bounds), "start")
        end = data.draw(st.sampled_from([b for b in bounds[1:] if start is None or b > start] or [None]), "end")
        assert flat_changes(table, start, end) == w.expected(start, end)
        assert update_befores(table, start, end) == w.expected_befores(start, end)


def test_changes_logged_at_write_time_carry_the_data_fields_as_hudi_reads_them(tmp_path):
    """DATA_BEFORE_AFTER: the .cdc files' images are the records without their meta fields, in schema order."""
    w = Workload(str(tmp_path / "t"))
    w.commit({"k0": ("upsert", "r0", 1, 1), "k1": ("upsert", "r0", 2, 1)})
    w.commit({"k0": ("upsert", "r0", 10, 2), "k1": ("delete",), "k2": ("upsert", "r0", 3, 1)})
    w.commit({"k0": ("upsert", "r0", 99, 0)})  # loses to ts 2: no change, an empty .cdc file
    table = HoodieTable(w.path)
    logged = [
        (p, s.path)
        for i in w.instants
        for s in table.timeline.read_commit_metadata(i).all_write_stats()
        for p in s.cdc_stats or {}
    ]
    assert len(logged) == 3 and all(
        p.endswith(".cdc") and p.rpartition("/")[0] == d.rpartition("/")[0] for p, d in logged
    )
    changes = table.read_changes(start=w.instants[0])
    got = {(r["op"], r["ts_ms"]): (r["before"], r["after"]) for r in changes.to_pylist()}
    i2 = w.instants[1]
    assert got == {
        ("u", i2): ('{"id": "k0", "region": "r0", "v": 1, "ts": 1}', '{"id": "k0", "region": "r0", "v": 10, "ts": 2}'),
        ("d", i2): ('{"id": "k1", "region": "r0", "v": 2, "ts": 1}', None),
        ("i", i2): (None, '{"id": "k2", "region": "r0", "v": 3, "ts": 1}'),
    }
    flat = table.read_changes(start=w.instants[0], flat=True).to_pylist()
    assert {
        (r["op"], r["_hoodie_record_key"], r["_hoodie_partition_path"], r["_hoodie_commit_time"]) for r in flat
    } == {
        ("u", "k0", "r0", i2),
        ("d", "k1", "r0", i2),
        ("i", "k2", "r0", i2),
    }


def test_inferred_before_and_after_images_carry_the_records_as_json(tmp_path):
    w = Workload(str(tmp_path / "t"), extra=cdc("OP_KEY_ONLY"))
    w.commit({"k0": ("upsert", "r0", 1, 1), "k1": ("upsert", "r0", 2, 1)})
    w.commit({"k0": ("upsert", "r0", 10, 2), "k1": ("delete",), "k2": ("upsert", "r0", 3, 1)})
    w.commit({"k0": ("upsert", "r0", 99, 0)})  # loses to ts 2: no change
    changes = HoodieTable(w.path).read_changes(start=w.instants[0])
    assert changes.schema.names == ["op", "ts_ms", "before", "after"]
    got = {
        (r["op"], r["ts_ms"]): (r["before"] and json.loads(r["before"]), r["after"] and json.loads(r["after"]))
        for r in changes.to_pylist()
    }
    i1, i2 = w.instants[:2]
    assert set(got) == {("u", i2), ("d", i2), ("i", i2)}
    before, after = got[("u", i2)]
    assert {k: before[k] for k in ("id", "v", "ts", "_hoodie_commit_time")} == {
        "id": "k0",
        "v": 1,
        "ts": 1,
        "_hoodie_commit_time": i1,
    }
    assert {k: after[k] for k in ("id", "v", "ts", "_hoodie_commit_time")} == {
        "id": "k0",
        "v": 10,
        "ts": 2,
        "_hoodie_commit_time": i2,
    }
    assert list(after)[:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    before, after = got[("d", i2)]
    assert (before["id"], before["v"], after) == ("k1", 2, None)
    before, after = got[("i", i2)]
    assert (before, after["id"], after["v"]) == (None, "k2", 3)


def test_a_changelog_read_of_a_table_without_cdc_names_the_option(tmp_path):
    w = Workload(str(tmp_path / "t"), extra={})
    w.commit({"k0": ("upsert", "r0", 1, 1)})
    with pytest.raises(HoodieError, match=r"It isn't a CDC hudi table on .*hoodie\.table\.cdc\.enabled=true"):
        HoodieTable(w.path).read_changes()


def test_logging_modes_are_hudis_in_any_case():
    assert logging_mode("data_before") == "DATA_BEFORE"
    assert logging_mode("Op_Key_Only") == "OP_KEY_ONLY"
    with pytest.raises(HoodieConfigError, match="hoodie.table.cdc.supplemental.logging.mode.*cdc_data_before"):
        logging_mode("cdc_data_before")


def _cdc_files(path):
    return sorted(str(p.relative_to(path)) for p in Path(path).rglob("*.cdc"))


def test_cdc_files_go_with_their_slice_when_cleaned_and_with_their_instant_when_rolled_back(tmp_path):
    w = Workload(str(tmp_path / "t"))
    w.commit({"k0": ("upsert", "r0", 1, 1), "k1": ("upsert", "r1", 1, 1)})
    w.commit({"k0": ("upsert", "r0", 2, 2)})
    w.run_compactions()
    w.commit({"k0": ("upsert", "r0", 3, 3), "k1": ("upsert", "r1", 3, 3)})
    before_clean = _cdc_files(w.path)
    assert len(before_clean) == 5  # r0: three delta commits, r1: two
    opts = parse_compaction_options({"clean.policy": "KEEP_LATEST_FILE_VERSIONS", "clean.retain_file_versions": "1"})
    assert cleaning.clean(w.path, Timeline(w.path), opts) > 0
    # the slices before the compaction are gone with their .cdc files; the last commit's are kept
    latest = {s.base_instant for s in FileSystemView(w.path).latest_slices()}
    assert _cdc_files(w.path) == [f for f in before_clean if f.split("_")[1].split(".")[0] in latest]
    assert len(_cdc_files(w.path)) == 2
    report = validate(HoodieTable(w.path))
    assert report.valid, report.text()
    # a failed delta commit's .cdc files are removed with its log files
    txn = w.writer.start()
    fs = next(s for s in FileSystemView(w.path).latest_slices("r0"))
    rows = pa.table({"id": ["k0"], "region": ["r0"], "v": [4], "ts": [4]}, schema=SCHEMA)
    stat = txn.append_log("r0", fs.file_id, fs.base_instant, rows)
    assert stat.cdc_stats and _cdc_files(w.path) != sorted(set(_cdc_files(w.path)) - set(stat.cdc_stats))
    txn.rollback()
    assert _cdc_files(w.path) == sorted(f for f in before_clean if f.split("_")[1].split(".")[0] in latest)
    # the history the clean removed cannot be read any more, the rest can
    with pytest.raises(
        HoodieTimeTravelError, match=r"changelog window \(None, None\] reads r0/.*\.log\.1_0-0-0, which a clean"
    ):
        flat_changes(HoodieTable(w.path))
    assert flat_changes(HoodieTable(w.path), w.instants[1]) == w.expected(w.instants[1])
    # a completed delta commit rolled back (the command line's rollback) takes its .cdc files with it
    last = w.instants[-1]
    logged = {p for s in HoodieTable(w.path).timeline.read_commit_metadata(last).all_write_stats() for p in s.cdc_stats}
    assert logged and logged <= set(_cdc_files(w.path))
    rollback(w.path, last)
    assert not logged & set(_cdc_files(w.path)) and _cdc_files(w.path) == []


def test_a_transaction_writing_a_key_twice_logs_both_changes(tmp_path):
    """The format writer's transaction may write a key in two log files of one file group: the second .cdc file's
    before image is the first one's after image, so replaying the logged changes gives the table."""
    w = Workload(str(tmp_path / "t"))
    w.commit({"k0": ("upsert", "r0", 1, 1)})
    txn = w.writer.start()
    fs = next(iter(FileSystemView(w.path).latest_slices("r0")))

    def rows(*records):
        return pa.table({n: [r[i] for r in records] for i, n in enumerate(SCHEMA.names)}, schema=SCHEMA)

    txn.append_log("r0", fs.file_id, fs.base_instant, rows(("k0", "r0", 2, 2), ("k1", "r0", 5, 1)), num_inserts=1)
    txn.append_log("r0", fs.file_id, fs.base_instant, rows(("k0", "r0", 3, 3), ("k1", "r0", 6, 2)))
    txn.append_log("r0", fs.file_id, fs.base_instant, deletes=(pa.array(["k1"]), None))
    txn.commit()
    got = HoodieTable(w.path).read_changes(start=w.instants[0]).to_pylist()
    images = [
        (r["op"], r["before"] and json.loads(r["before"])["v"], r["after"] and json.loads(r["after"])["v"]) for r in got
    ]
    assert sorted(images, key=str) == sorted(
        [("u", 1, 2), ("i", None, 5), ("u", 2, 3), ("u", 5, 6), ("d", 6, None)], key=str
    )
    assert HoodieTable(w.path).read().select(["id", "v"]).to_pylist() == [{"id": "k0", "v": 3}]
