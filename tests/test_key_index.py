"""KeyIndex (the in-memory index state of a key group) against a plain dict, including forced hash collisions."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hoodie_stream.checkpoints import key_index
from hoodie_stream.checkpoints.key_index import STATE_SCHEMA, KeyIndex, key_hashes

KEYS = st.text(alphabet=st.sampled_from(list("ab,:/ é漢\u0001") + ["0", "1"]), max_size=6)
CHANGE = st.dictionaries(
    KEYS, st.tuples(st.sampled_from(["", "p=1", "p=2"]), st.sampled_from(["f1", "f2", "f3"])), max_size=30
)


def _table(change):
    keys = list(change)
    return pa.table(
        {"key": keys, "partition": [change[k][0] for k in keys], "file_id": [change[k][1] for k in keys]},
        schema=STATE_SCHEMA,
    )


def _check(index, model, probes):
    keys = pa.array(probes, pa.string())
    found, partition, file_id = index.lookup(keys)
    assert found.tolist() == [k in model for k in probes]
    assert partition.to_pylist() == [model[k][0] if k in model else None for k in probes]
    assert file_id.to_pylist() == [model[k][1] if k in model else None for k in probes]
    table = index.to_table()
    assert sorted(zip(*[table[c].to_pylist() for c in STATE_SCHEMA.names])) == sorted(
        (k, p, f) for k, (p, f) in model.items()
    )


def _run(initial, changes, probes):
    model = dict(initial)
    index = KeyIndex(_table(initial))
    history = [(index, dict(model))]
    for change in changes:
        index = index.updated(_table(change))
        model.update(change)
        history.append((index, dict(model)))
    for old_index, old_model in history:  # an update never alters the index it started from
        _check(old_index, old_model, probes + list(old_model))


@settings(max_examples=150, deadline=None)
@given(CHANGE, st.lists(CHANGE, max_size=6), st.lists(KEYS, max_size=20))
def test_index_matches_a_dict(initial, changes, probes):
    _run(initial, changes, probes)


@settings(max_examples=60, deadline=None)
@given(CHANGE, st.lists(CHANGE, max_size=4), st.lists(KEYS, max_size=20))
def test_index_is_exact_when_every_hash_collides(initial, changes, probes):
    real = key_index.key_hashes
    key_index.key_hashes = lambda keys: np.zeros(len(keys), dtype=np.uint64)  # the exact fallback decides
    try:
        _run(initial, changes, probes)
    finally:
        key_index.key_hashes = real


def test_merges_recent_into_base_and_stays_exact(monkeypatch):
    monkeypatch.setattr(key_index, "_MERGE_MIN", 8)
    model, index = {}, KeyIndex()
    for step in range(40):
        change = {f"k{(step * 7 + i) % 120}": ("p", f"f{step}") for i in range(9)}
        index = index.updated(_table(change))
        model.update(change)
    assert index.base.num_rows > 0
    _check(index, model, [f"k{i}" for i in range(130)])


def test_hashes_depend_on_every_byte_and_position():
    keys = ["ab", "ba", "a", "a\x00", "", "abc" * 200, "abc" * 200 + "d", "é", "e"]
    h = key_hashes(pa.array(keys))
    assert len(set(h.tolist())) == len(keys)
    sliced = pa.array(["x"] + keys).slice(1)
    assert key_hashes(sliced).tolist() == h.tolist()


@settings(max_examples=40, deadline=None)
@given(CHANGE, st.lists(CHANGE, min_size=1, max_size=5))
def test_state_files_reload_to_the_same_index(initial, changes):
    """Saved as a full file plus deltas (keys repeated across deltas), a key group reloads, cold, to the model:
    the newest delta of a key wins when the deltas are applied together."""
    import tempfile
    from unittest import mock

    from hoodie_stream.checkpoints import index_state

    with tempfile.TemporaryDirectory() as base, mock.patch.object(index_state, "full_due", lambda *args: False):
        model = dict(initial)
        index = KeyIndex(_table(initial))
        index_state.save_full(base, 3, "20260101000000000", index.to_table())
        committed = {"20260101000000000"}
        for i, change in enumerate(changes):
            instant = "2026010100000%04d" % (i + 1)
            index = index.updated(_table(change))
            index_state.save_state(base, 3, instant, index, _table(change), i)
            committed.add(instant)
            model.update(change)
        index_state._CACHE.clear()
        loaded, pending = index_state.load_index(base, 3, committed)
        assert pending == len(changes)
        _check(loaded, model, list(model) + ["absent"])


@settings(max_examples=25, deadline=None)
@given(CHANGE)
def test_full_files_are_used_in_place_and_older_ones_still_load(state):
    """A full file holds the key hashes, sorted: it loads memory-mapped (the hashes are the file's pages, not a
    copy). A full file of an earlier version (zstd, no hashes) loads the same rows."""
    import os
    import tempfile

    import pyarrow.ipc as ipc

    from hoodie_stream.checkpoints import index_state

    with tempfile.TemporaryDirectory() as base:
        index_state.save_full(base, 0, "20260101000000001", _table(state))
        older = os.path.join(os.path.join(base, index_state.group_dir(1)), "20260101000000001.full.arrow")
        os.makedirs(os.path.dirname(older))
        table = key_index.coded(_table(state)).combine_chunks()
        with (
            pa.OSFile(older, "wb") as sink,
            ipc.new_file(sink, table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as writer,
        ):
            writer.write_table(table)
        index_state._CACHE.clear()
        for kg in (0, 1):
            loaded, pending = index_state.load_index(base, kg, {"20260101000000001"})
            assert pending == 0
            _check(loaded, state, list(state) + ["absent"])
            if kg == 0 and state:
                assert not loaded.base.hashes.flags["OWNDATA"], "a full file is used in place"


def test_loading_deletes_what_the_newest_committed_full_file_replaces(monkeypatch):
    """A key group keeps at most one cycle of files: loading drops the files older than the newest committed full
    file, and keeps everything while the newest full file's instant has not committed."""
    import os
    import tempfile

    from hoodie_stream.checkpoints import index_state

    # a full file exactly every COMPACT_EVERY deltas (the sink's turns are drawn per instant: test below)
    monkeypatch.setattr(index_state, "full_due", lambda kg, instant, deltas: deltas + 1 >= index_state.COMPACT_EVERY)

    every = index_state.COMPACT_EVERY
    with tempfile.TemporaryDirectory() as base:
        model = {"k0": ("", "f0")}
        index_state.save_full(base, 0, "20260101000000000", _table(model))
        committed = {"20260101000000000"}
        for i in range(1, every + 2):
            instant = "2026010100000%04d" % i
            loaded, pending = index_state.load_index(base, 0, committed)
            change = {f"k{i}": ("", f"f{i}")}
            index_state.save_state(base, 0, instant, loaded.updated(_table(change)), _table(change), pending)
            if i == every:  # the full file is written; before its instant commits, a cold load needs the old files
                index_state._CACHE.clear()
                loaded, _ = index_state.load_index(base, 0, committed)
                _check(loaded, model, list(model))
                assert len(os.listdir(os.path.join(base, index_state.group_dir(0)))) == every + 1
            committed.add(instant)
            model.update(change)
        index_state._CACHE.clear()
        loaded, _ = index_state.load_index(base, 0, committed)
        _check(loaded, model, list(model))
        assert sorted(os.listdir(os.path.join(base, index_state.group_dir(0)))) == [
            "2026010100000%04d.full.arrow" % every,
            "2026010100000%04d.delta.arrow" % (every + 1),
        ]


def test_key_groups_take_turns_writing_full_files():
    """Over 200 micro-batches in which all 128 key groups change: no batch writes more than a small share of the
    full files (they used to come all at once every COMPACT_EVERY batches), none waits past 2 x COMPACT_EVERY
    deltas, on average about one batch in COMPACT_EVERY, and the same instant decides the same way."""
    from hoodie_stream.checkpoints.index_state import COMPACT_EVERY, full_due

    deltas = [0] * 128
    per_batch, intervals = [], []
    for b in range(200):
        instant = "202611231800%05d" % (b * 1237)
        fulls = 0
        for kg in range(128):
            due = full_due(kg, instant, deltas[kg])
            assert due == full_due(kg, instant, deltas[kg])
            if due:
                fulls += 1
                intervals.append(deltas[kg] + 1)
                deltas[kg] = 0
            else:
                deltas[kg] += 1
            assert deltas[kg] < 2 * COMPACT_EVERY
        per_batch.append(fulls)
    assert max(per_batch[2 * COMPACT_EVERY :]) <= 128 // 4, per_batch
    mean = sum(intervals) / len(intervals)
    assert COMPACT_EVERY * 0.75 <= mean <= COMPACT_EVERY * 1.5, mean


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(CHANGE, CHANGE), min_size=1, max_size=12), st.integers(0, 40))
def test_key_groups_saved_together_reload_as_saved_one_by_one(groups, deltas):
    """save_states writes many key groups' files from threads: each key group reloads, cold, to its model, and the
    files are those save_state writes one group at a time (full or delta as `full_due` decides)."""
    import os
    import tempfile

    from hoodie_stream.checkpoints import index_state

    instant = "20260101000000007"
    with tempfile.TemporaryDirectory() as together, tempfile.TemporaryDirectory() as alone:
        changes = []
        for kg, (initial, change) in enumerate(groups):
            index = KeyIndex(_table(initial))
            for base in (together, alone):
                index_state.save_full(base, kg, "20260101000000001", index.to_table())
            changes.append((kg, index.updated(_table(change)), _table(change), deltas))
        index_state.save_states(together, instant, changes)
        for kg, index, change, n in changes:
            index_state.save_state(alone, kg, instant, index, change, n)
        index_state._CACHE.clear()
        for kg, (initial, change) in enumerate(groups):
            group = index_state.group_dir(kg)
            assert sorted(os.listdir(os.path.join(together, group))) == sorted(os.listdir(os.path.join(alone, group)))
            loaded, _ = index_state.load_index(together, kg, {"20260101000000001", instant})
            model = dict(initial)
            model.update(change)
            _check(loaded, model, list(model) + ["absent"])


def test_a_failed_save_among_many_is_raised_after_the_others_end(tmp_path, monkeypatch):
    from hoodie_stream.checkpoints import index_state

    real = index_state.save_state
    ended = []

    def save(storage, key_group, instant, index, change, deltas_since_full):
        if key_group == 2:
            raise OSError("disk full")
        real(storage, key_group, instant, index, change, deltas_since_full)
        ended.append(key_group)

    monkeypatch.setattr(index_state, "save_state", save)
    change = _table({"k": ("", "f1")})
    changes = [(kg, KeyIndex(change), change, 0) for kg in range(6)]
    with pytest.raises(OSError, match="disk full"):
        index_state.save_states(str(tmp_path), "20260101000000002", changes)
    assert sorted(ended) == [0, 1, 3, 4, 5]
