"""The compaction execute operator on its own (no Spark): a slice of a base file and log files of updates, inserts,
`_hoodie_is_deleted` rows and delete blocks is merged into a new base file that hudi-rs reads as it read the slice,
whose bloom filter answers "maybe" for every key it holds and, when the replaced file's filter was taken over, for
every key that file's filter held."""

import tempfile

import numpy as np
import pyarrow as pa
import pytest

from hoodie_stream import HoodieTable
from hoodie_stream.compaction.execute import compact_operation
from hoodie_stream.compaction.operation import plan_operations
from hoodie_stream.compaction.plan import pending_plans, schedule_compaction
from hoodie_stream.format.base_file.bloom_filter import bit_positions
from hoodie_stream.format.base_file.parquet import read_base_file, read_bloom_filter, read_footer, write_base_file
from hoodie_stream.format.file_group.fs_view import FileSystemView
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.commit_metadata import CommitMetadata
from hoodie_stream.format.write.writer import HoodieWriter
from hoodie_stream.options import parse_compaction_options
from oracle import assert_same_rows, rs_read

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.float64()), ("_hoodie_is_deleted", pa.bool_())])


def rows(ids, ts, deleted=None):
    ids = np.asarray(ids)
    n = len(ids)
    return pa.table(
        {
            "id": pa.array([f"k{i:06d}" for i in ids]),
            "ts": pa.array(np.full(n, ts, np.int64)),
            "v": pa.array(ids * 0.5 + ts),
            "_hoodie_is_deleted": pa.array(np.zeros(n, bool) if deleted is None else deleted),
        },
        schema=SCHEMA,
    )


def build(path, n, rng):
    """A table of 2 file groups of n keys each in their base files, then 3 delta commits of updates (some with a
    smaller ordering value), `_hoodie_is_deleted` rows, delete blocks and new keys."""
    writer = HoodieWriter.create(
        path, table_name="t", record_key_fields=["id"], schema=SCHEMA, precombine_field="ts", partition_fields=[]
    )
    txn = writer.start(operation="INSERT")
    groups = [
        (np.arange(g * n, (g + 1) * n), txn.write_base("", rows(np.arange(g * n, (g + 1) * n), 5))) for g in (0, 1)
    ]
    first = txn.commit()
    fresh = 10 * n
    for ts in (3, 6, 7):
        txn = writer.start()
        for ids, stat in groups:
            updated = ids[rng.random(len(ids)) < 0.2]
            inserted = np.arange(fresh, fresh + 50)
            fresh += 50
            batch = np.concatenate([updated, inserted])
            deleted = rng.random(len(batch)) < 0.1
            gone = ids[rng.random(len(ids)) < 0.03]
            deletes = (pa.array([f"k{i:06d}" for i in gone]), pa.array(np.full(len(gone), ts, np.int64)))
            txn.append_log(
                "",
                stat.file_id,
                first,
                rows(batch, ts, deleted),
                deletes=deletes,
                num_inserts=len(inserted),
                base_file=stat.path.rsplit("/", 1)[-1],
            )
        txn.commit()


def compact_all(path):
    tl = Timeline(path)
    opts = parse_compaction_options()
    instant = schedule_compaction(path, tl, opts, force=True)
    ops = plan_operations(pending_plans(tl)[instant])
    tl.transition_to_inflight(instant, "compaction", b"")
    committed = {i.timestamp for i in tl.commits_timeline()}
    stats = [
        compact_operation(path, instant, op, committed, opts.max_memory_bytes, f"{k}-0-0")[0]
        for k, op in enumerate(ops)
    ]
    tl.complete(instant, "compaction", CommitMetadata({}, True, {}, "COMPACT").with_stats(stats).to_json())
    return ops, stats


def holds(bloom, keys):
    """Per key: does the filter answer "maybe"."""
    positions = bit_positions(keys, bloom.nb_hash, bloom.vector_size)
    return np.array([any(row[p].all() for row in bloom.rows) for p in positions])


@pytest.mark.parametrize("seed", [1, 2])
def test_compaction_reads_as_the_slice_and_takes_over_the_bloom_filter(tmp_path, seed):
    path = str(tmp_path / "t")
    build(path, 3000, np.random.default_rng(seed))
    before = rs_read(path)
    slices = list(FileSystemView(path).latest_slices())
    old_blooms = {fs.file_id: read_bloom_filter(path, fs.base_file_path) for fs in slices}
    old_keys = {
        fs.file_id: set(read_base_file(path, fs.base_file_path)["_hoodie_record_key"].to_pylist()) for fs in slices
    }
    _ops, stats = compact_all(path)
    after = rs_read(path)
    same = [c for c in before.column_names if c != "_hoodie_file_name"]
    assert_same_rows(after, before, same, context="hudi-rs before vs after compaction")
    assert_same_rows(HoodieTable(path).read(), before, same, context="ours after compaction")
    assert_same_rows(rs_read(path, "read_optimized"), before, same, context="read-optimized after compaction")
    for stat in stats:
        written = read_base_file(path, stat.path)
        keys = written["_hoodie_record_key"].to_pylist()
        bloom = read_bloom_filter(path, stat.path)
        assert holds(bloom, keys).all(), "a key of the new base file is missing from its bloom filter"
        old = old_blooms[stat.file_id]
        # taken over: every bit of the replaced file's filter is set in the new one
        assert len(bloom.rows) >= len(old.rows)
        for new_row, old_row in zip(bloom.rows, old.rows):
            assert not (old_row & ~new_row).any()
        # and only the keys the replaced file lacked were added to it
        assert bloom.count == old.count + len(set(keys) - old_keys[stat.file_id])
        footer = read_footer(path, stat.path)
        assert footer["hoodie_min_record_key"] == min(keys) and footer["hoodie_max_record_key"] == max(keys)
        assert written.num_rows == stat.num_writes


def test_a_base_file_without_a_bloom_filter_gets_one_of_all_its_keys(tmp_path):
    path = str(tmp_path / "t")
    build(path, 2000, np.random.default_rng(3))
    # replace each base file by the same rows written without a bloom filter
    for fs in FileSystemView(path).latest_slices():
        write_base_file(path, fs.base_file_path, read_base_file(path, fs.base_file_path), bloom_filter=False)
        assert read_bloom_filter(path, fs.base_file_path) is None
    before = rs_read(path)
    _ops, stats = compact_all(path)
    for stat in stats:
        keys = read_base_file(path, stat.path)["_hoodie_record_key"]
        bloom = read_bloom_filter(path, stat.path)
        assert holds(bloom, keys.to_pylist()).all()
        assert bloom.count == len(keys)  # built from the file's keys alone
    same = [c for c in before.column_names if c != "_hoodie_file_name"]
    assert_same_rows(rs_read(path), before, same, context="hudi-rs before vs after compaction")


def test_a_filter_holding_many_deleted_keys_is_built_again(tmp_path):
    """Deleted keys stay in a filter taken over; once they pass a tenth of the file's records, the next compaction
    builds the filter from the file's keys alone, so they never pile up."""
    path = str(tmp_path / "t")
    build(path, 3000, np.random.default_rng(4))
    _ops, stats = compact_all(path)

    def delta_commit(stats, deleted_share):
        txn = HoodieWriter(path).start()
        for stat in stats:
            base_instant = stat.path.rsplit("_", 1)[-1].split(".")[0]
            keys = read_base_file(path, stat.path)["id"].to_numpy(zero_copy_only=False)
            gone = keys[: int(len(keys) * deleted_share)]
            ids = np.array([int(k[1:]) for k in keys[-20:]])
            txn.append_log(
                "",
                stat.file_id,
                base_instant,
                rows(ids, 9),
                deletes=(pa.array(gone), pa.array(np.full(len(gone), 9, np.int64))),
                base_file=stat.path.rsplit("/", 1)[-1],
            )
        txn.commit()

    delta_commit(stats, 0.25)
    _ops, stats = compact_all(path)
    for stat in stats:  # taken over: the filter still holds the quarter of keys deleted
        assert read_bloom_filter(path, stat.path).count > stat.num_writes * 1.1
    delta_commit(stats, 0.0)
    before = rs_read(path)
    _ops, stats = compact_all(path)
    for stat in stats:  # built again from the file's keys
        keys = read_base_file(path, stat.path)["_hoodie_record_key"].to_pylist()
        bloom = read_bloom_filter(path, stat.path)
        assert bloom.count == len(keys) and holds(bloom, keys).all()
    same = [c for c in before.column_names if c != "_hoodie_file_name"]
    assert_same_rows(rs_read(path), before, same, context="hudi-rs before vs after the third compaction")


def test_a_base_file_larger_than_the_memory_streams_through_in_one_pass(tmp_path, monkeypatch):
    """`compaction.max_memory` bounds the log records a merge holds, not the base file: a base file of several times
    the memory with a small log is merged in one pass, a batch at a time, and Arrow never holds it whole (the peak of
    a pool of the merge's own)."""
    from hoodie_stream.compaction import execute

    monkeypatch.setattr(execute, "BASE_CHUNK_ROWS", 16_384)
    path = str(tmp_path / "t")
    n = 200_000
    writer = HoodieWriter.create(
        path, table_name="t", record_key_fields=["id"], schema=SCHEMA, precombine_field="ts", partition_fields=[]
    )
    txn = writer.start(operation="INSERT")
    stat = txn.write_base("", rows(np.arange(n), 5))
    first = txn.commit()
    txn = writer.start()
    txn.append_log("", stat.file_id, first, rows(np.arange(0, n, 100), 6), base_file=stat.path.rsplit("/", 1)[-1])
    txn.commit()
    base_bytes = read_base_file(path, stat.path).nbytes
    before = rs_read(path)

    tl = Timeline(path)
    instant = schedule_compaction(path, tl, parse_compaction_options(), force=True)
    (op,) = plan_operations(pending_plans(tl)[instant])
    tl.transition_to_inflight(instant, "compaction", b"")
    committed = {i.timestamp for i in tl.commits_timeline()}
    previous = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(previous)
    pa.set_memory_pool(pool)  # every Arrow allocation of the merge (reads, merge, writer threads) goes through it
    try:
        new, ranges = compact_operation(path, instant, op, committed, base_bytes // 4, "0-0-0")
    finally:
        pa.set_memory_pool(previous)
    tl.complete(instant, "compaction", CommitMetadata({}, True, {}, "COMPACT").with_stats([new]).to_json())

    assert ranges == 1
    # the file is one row group, whose pages the reader holds while it yields the row group's batches: at most
    # three quarters of the decoded file in all (holding the decoded file alone takes all of it)
    assert pool.max_memory() < base_bytes * 3 / 4, (pool.max_memory(), base_bytes)
    same = [c for c in before.column_names if c != "_hoodie_file_name"]
    assert_same_rows(rs_read(path), before, same, context="hudi-rs before vs after compaction")
    assert new.num_writes == n


def test_a_log_only_slice_merged_in_key_ranges_decodes_each_log_record_once(tmp_path, monkeypatch):
    """A slice whose log records exceed `compaction.max_memory` is merged in key ranges: its log records are decoded
    in one pass and spilled to local disk split by range, not decoded again for each range: every log record is
    decoded once in all, whatever the number of ranges, and the spill is gone afterwards. The table read by hudi-rs
    is the same before and after."""
    from hoodie_stream.compaction import execute
    from hoodie_stream.format.log_file import scanner as log_scanner

    path = str(tmp_path / "t")
    n = 6_000
    writer = HoodieWriter.create(
        path, table_name="t", record_key_fields=["id"], schema=SCHEMA, precombine_field="ts", partition_fields=[]
    )
    txn = writer.start()
    file_id = "00000000-0000-0000-0000-000000000001-0"
    txn.append_log("", file_id, txn.instant, rows(np.arange(n), 5), num_inserts=n, new_file_group=True)
    first = txn.commit()
    txn = writer.start()
    deleted = np.zeros(n // 10, bool)
    deleted[::7] = True
    txn.append_log("", file_id, first, rows(np.arange(0, n, 10), 6, deleted))
    txn.commit()
    before = rs_read(path)

    monkeypatch.setattr(execute, "SPILL_ROWS", 1_000)  # blocks decoded a chunk at a time
    spill_root = tmp_path / "spill"
    spill_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill_root))
    decoded = []
    real = log_scanner.decode_records
    monkeypatch.setattr(
        log_scanner,
        "decode_records",
        lambda buf, starts, *a, **k: decoded.append(len(starts)) or real(buf, starts, *a, **k),
    )
    tl = Timeline(path)
    instant = schedule_compaction(path, tl, parse_compaction_options(), force=True)
    (op,) = plan_operations(pending_plans(tl)[instant])
    tl.transition_to_inflight(instant, "compaction", b"")
    committed = {i.timestamp for i in tl.commits_timeline()}
    new, ranges = compact_operation(path, instant, op, committed, 20_000, "0-0-0")
    tl.complete(instant, "compaction", CommitMetadata({}, True, {}, "COMPACT").with_stats([new]).to_json())

    assert ranges > 4
    assert sum(decoded) == n + n // 10, (ranges, decoded)
    assert max(decoded) == 1_000
    assert list(spill_root.iterdir()) == []
    assert new.num_writes == n - deleted.sum()
    same = [c for c in before.column_names if c != "_hoodie_file_name"]
    assert_same_rows(rs_read(path), before, same, context="hudi-rs before vs after compaction in key ranges")
