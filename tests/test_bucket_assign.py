"""BucketAssigner on its own (no Spark): input sorted by key group and assigned a chunk of key groups at a time.

Checked against a plain-Python model whatever the chunk size: one record per key (greatest ts, then latest
arrival), known keys routed to the file group the index holds, new keys packed into this task's small file group
up to its capacity and then into new file groups of `new_file_capacity` records, each owned by this task; the
same input gives the same routing (a retried task writes the same file groups).
"""

import math
import random

import numpy as np
import pyarrow as pa
import pytest

from hoodie_stream.bucket_assign import assigner as assigner_module
from hoodie_stream.bucket_assign.assigner import BucketAssigner
from hoodie_stream.bucket_assign.small_files import owner_task
from hoodie_stream.bucket_assign.write_tasks import WritePlan
from hoodie_stream.chain.columns import DELETE, FILE_ID, KEY, KEY_GROUP, KIND, PARTITION, SEQ, RecordKind
from hoodie_stream.chain.stages import AssignSpec, BatchContext
from hoodie_stream.storage import storage_for

TASKS = 2
SMALL = "small-file-0"
SMALL_CAPACITY = 5
NEW_CAPACITY = 7


def _events(keys, seed):
    """Events for `keys` (some twice, with ties and smaller ts), as the key-by stage emits them, sorted by key group
    and cut into record batches of 13 rows."""
    rng = random.Random(seed)
    rows = []
    for key in keys:
        for _ in range(rng.choice([1, 1, 2, 3])):
            rows.append({"id": key, "ts": rng.randint(0, 3), "v": f"v{rng.randint(0, 99)}"})
    rng.shuffle(rows)
    return _keyed(rows).to_batches(max_chunksize=13), rows


def _keyed(rows):
    """The rows as the key-by stage emits them (arrival order as SEQ), sorted by key group."""
    n = len(rows)
    table = pa.table(
        {
            "id": [r["id"] for r in rows],
            "ts": pa.array([r["ts"] for r in rows], pa.int64()),
            "v": [r["v"] for r in rows],
        }
    )
    table = (
        table.append_column(SEQ, pa.array(np.arange(n), pa.int64()))
        .append_column(KEY, pa.array([str(r["id"]) for r in rows]))
        .append_column(PARTITION, pa.array(["p1"] * n))
        .append_column(DELETE, pa.array(np.zeros(n, bool)))
        .append_column(KEY_GROUP, pa.array([r["id"] % 16 for r in rows], pa.int32()))
    )
    return table.sort_by([(KEY_GROUP, "ascending")])


def _winners(rows):
    best = {}
    for seq, r in enumerate(rows):
        k = str(r["id"])
        if k not in best or (r["ts"], seq) >= (best[k][0]["ts"], best[k][1]):
            best[k] = (r, seq)
    return {k: r for k, (r, _seq) in best.items()}


def _assign(base, instant, committed, batches, chunk_bytes, monkeypatch):
    monkeypatch.setattr(assigner_module, "ASSIGN_CHUNK_BYTES", chunk_bytes)
    small = {0: {"p1": [(SMALL, "20260101000000000", "", SMALL_CAPACITY)]}}
    context = BatchContext(storage_for(base), instant, "upsert", "ts", ("id", "ts", "v"))
    a = BucketAssigner(
        context,
        AssignSpec(
            committed=frozenset(committed),
            global_index=True,
            event_time=True,
            small_files=small,
            new_file_capacity=NEW_CAPACITY,
            num_tasks=TASKS,
            write_plan=WritePlan(TASKS),
        ),
    )
    return pa.Table.from_batches(list(a(iter(batches))))


@pytest.mark.parametrize("chunk_bytes", [1, 300, 1 << 40])
def test_assign_in_chunks_matches_the_model(tmp_path, monkeypatch, chunk_bytes):
    base = str(tmp_path)
    first, second = "20260101000000001", "20260101000000002"
    keys = list(range(60))
    batches, rows = _events(keys, seed=chunk_bytes % 97)
    out = _assign(base, first, set(), batches, chunk_bytes, monkeypatch)
    again = _assign(str(tmp_path / "retry"), first, set(), batches, chunk_bytes, monkeypatch)
    assert out.to_pylist() == again.to_pylist(), "a retried task routes the same way"

    winners = _winners(rows)
    got = {r[KEY]: r for r in out.to_pylist()}
    assert len(got) == out.num_rows == len(winners)
    for k, r in winners.items():
        assert (got[k]["ts"], got[k]["v"], got[k][KIND]) == (r["ts"], r["v"], RecordKind.INSERT)
    by_file = {}
    for r in got.values():
        by_file.setdefault(r[FILE_ID], []).append(r[KEY])
    assert len(by_file[SMALL]) == SMALL_CAPACITY, "the small file group is filled first"
    new = {f: ks for f, ks in by_file.items() if f != SMALL}
    assert len(new) == math.ceil((len(winners) - SMALL_CAPACITY) / NEW_CAPACITY)
    assert all(len(ks) <= NEW_CAPACITY for ks in new.values())
    assert all(owner_task(f, TASKS) == 0 for f in new), "new file groups are owned by the task that opens them"

    # the next instant: known keys go to the file group the index state holds for them
    batches, rows = _events(keys[:30] + list(range(100, 110)), seed=5)
    out2 = _assign(base, second, {first}, batches, chunk_bytes, monkeypatch)
    for r in out2.to_pylist():
        if int(r[KEY]) < 100:
            assert (r[KIND], r[FILE_ID]) == (RecordKind.UPDATE, got[r[KEY]][FILE_ID])
        else:
            assert r[KIND] == RecordKind.INSERT


def test_where_chunks_are_cut_does_not_change_where_keys_go(tmp_path, monkeypatch):
    """Inserts are packed in (key group, key) order per partition across chunks, so the key -> file group mapping
    is the same whatever ASSIGN_CHUNK_BYTES (and so however Spark splits a retried task's input)."""
    batches, _ = _events(list(range(60)), seed=3)
    mappings = []
    for i, chunk_bytes in enumerate([1, 300, 1000, 1 << 40]):
        out = _assign(str(tmp_path / str(i)), "20260101000000001", set(), batches, chunk_bytes, monkeypatch)
        mappings.append({r[KEY]: r[FILE_ID] for r in out.to_pylist()})
    assert all(m == mappings[0] for m in mappings[1:])


@pytest.mark.parametrize("collide", [False, True])
@pytest.mark.parametrize("duplicates", [False, True])
def test_precombine_keeps_one_winner_per_key(duplicates, collide, monkeypatch):
    """Unique keys pass through untouched (no sort); duplicate keys, or distinct keys whose hashes collide, take the
    sorting path; either way one record per key, the model's winner."""
    from hoodie_stream.bucket_assign.assigner import precombine
    from hoodie_stream.checkpoints import key_index

    if collide:
        monkeypatch.setattr(key_index, "key_hashes", lambda keys: np.zeros(len(keys), dtype=np.uint64))
    batches, rows = _events(list(range(60)), seed=11)
    if not duplicates:  # keep the first event of each key only
        seen, kept = set(), []
        for r in rows:
            if r["id"] not in seen:
                seen.add(r["id"])
                kept.append(r)
        rows = kept
        table = _keyed(rows)
    else:
        table = pa.Table.from_batches(batches)
    out = precombine(table, "ts", True)
    got = {r[KEY]: (r["ts"], r["v"]) for r in out.select([KEY, "ts", "v"]).to_pylist()}
    assert out.num_rows == len(got)
    assert got == {k: (r["ts"], r["v"]) for k, r in _winners(rows).items()}
    if not duplicates and not collide:
        assert out is table  # nothing to combine: no copy


def test_a_key_that_moved_partition_leaves_a_delete_marked_as_a_move(tmp_path, monkeypatch):
    """Under the global index a key arriving with another partition is an insert there plus, in its old file group,
    a delete marked DELETE_MOVED (counted apart from the deletes of the micro-batch), while a delete stays a
    delete."""
    base = str(tmp_path)
    first, second = "20260101000000001", "20260101000000002"
    batches, _rows = _events(list(range(20)), seed=2)
    placed = {r[KEY]: r[FILE_ID] for r in _assign(base, first, set(), batches, 1 << 40, monkeypatch).to_pylist()}
    rows = [{"id": k, "ts": 9, "v": "again"} for k in range(6)]
    table = _keyed(rows)
    ids = table["id"].to_pylist()  # in key-group order
    moved_to = ["p2" if i < 3 else "p1" for i in ids]  # keys 0-2 move, 3-5 stay
    table = table.set_column(table.schema.get_field_index(PARTITION), PARTITION, pa.array(moved_to))
    table = table.set_column(table.schema.get_field_index(DELETE), DELETE, pa.array([i == 4 for i in ids]))
    out = _assign(base, second, {first}, table.to_batches(), 1 << 40, monkeypatch).to_pylist()
    kinds = sorted((int(r[KEY]), RecordKind(r[KIND]).name, r[FILE_ID] == placed[r[KEY]]) for r in out)
    assert kinds == [
        (0, "DELETE_MOVED", True),
        (0, "INSERT", False),
        (1, "DELETE_MOVED", True),
        (1, "INSERT", False),
        (2, "DELETE_MOVED", True),
        (2, "INSERT", False),
        (3, "UPDATE", True),
        (4, "DELETE_ORDERED", True),
        (5, "UPDATE", True),
    ]
