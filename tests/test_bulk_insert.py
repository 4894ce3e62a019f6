"""Bulk insert: the first micro-batch into a table without data (and operation bulk_insert) is written straight to
base files with its index state, then the chain upserts into those file groups; checked against the plain-Python
model through hudi-rs and HoodieTable after every batch."""

import glob
import json
import os
import random
import sys

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark import cloudpickle
from pyspark.sql import functions as F

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.chain.sql_keys import record_key_sql
from hoodie_stream.checkpoints import index_state
from hoodie_stream.errors import HoodieConfigError, HoodiePathError
from hoodie_stream.format.base_file.parquet import (
    MAX_KEY,
    MIN_KEY,
    parquet_file,
    read_base_file,
    read_bloom_filter,
    read_footer,
)
from hoodie_stream.format.file_group.file_names import parse_base_file_name, parse_log_file_name
from hoodie_stream.format.record.keygen import make_key_generator
from hoodie_stream.options import parse_options
from hoodie_stream.storage import LocalStorage
from hoodie_stream.streaming_sink import bulk_insert_write
from oracle import rs_read
from stream_model import CITIES, OPTIONS, TableModel, events_df, generate_batches, table_rows

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # FailingStorage travels to the executors


# -- helpers -------------------------------------------------------------------------------------------------------
def operation(table, instant):
    return table.timeline.read_commit_metadata(instant).operation_type


def files(storage):
    """(base files, log files) under the table root: relative paths."""
    base, logs = [], []
    for info in storage.list("", recursive=True):
        if info.path.startswith(".hoodie/"):
            continue
        if parse_base_file_name(info.name) is not None:
            base.append(info.path)
        elif parse_log_file_name(info.name) is not None:
            logs.append(info.path)
    return base, logs


def index_entries(storage, table):
    """{index key: (partition, file id)} of the table's keyed index state, as of its committed instants."""
    committed = {i.timestamp for i in table.timeline.commits_timeline()}
    index_state._CACHE.clear()
    out = {}
    for group in storage.list_dirs(index_state.INDEX_DIR):
        if group.isdigit():
            state = index_state.load_index(storage, int(group), committed)[0].to_table()
            for key, part, fid in zip(*(state[c].to_pylist() for c in ("key", "partition", "file_id"))):
                assert key not in out, f"key {key} in two key groups"
                out[key] = (part, fid)
    index_state._CACHE.clear()
    return out


def check_index(storage, table, exact):
    """The index state is current and maps every live record to the file group holding it (and holds nothing else
    when `exact`: deleted keys stay in it after the chain wrote their delete)."""
    assert index_state.read_latest(storage) == table.timeline.completed(["deltacommit"])[-1].timestamp
    entries = index_entries(storage, table)
    rows = table.read().select(["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name"]).to_pylist()
    live = {}
    for r in rows:
        name = r["_hoodie_file_name"]
        fid = parse_base_file_name(name).file_id if name.endswith(".parquet") else name
        assert r["_hoodie_record_key"] not in live, f"key {r['_hoodie_record_key']} read twice"
        live[r["_hoodie_record_key"]] = (r["_hoodie_partition_path"], fid)
    for key, where in live.items():
        assert entries.get(key) == where, (key, entries.get(key), where)
    if exact:  # besides the deleted keys kept by their ordering value alone (no location)
        assert {k for k, (_part, fid) in entries.items() if fid is not None} == set(live)


def check_readers(location_or_path, model, context, storage_options=None):
    expected = model.rows()
    if isinstance(location_or_path, str):
        ours, theirs = HoodieTable(location_or_path).read(), rs_read(location_or_path)
    else:
        ours, theirs = location_or_path.table().read(), location_or_path.rs_read()
    assert table_rows(theirs) == expected, f"hudi-rs {context}"
    assert table_rows(ours) == expected, f"HoodieTable {context}"


def unmoved(events):
    """The events with each key in one partition (a bulk insert then writes no delete for a key met twice)."""
    return [dict(e, city=CITIES[e["id"] % len(CITIES)]) for e in events]


# -- the automatic path ----------------------------------------------------------------------------------------------
def test_first_batch_is_bulk_inserted_then_the_chain_upserts_into_its_file_groups(spark, location):
    batches = generate_batches(4, seed=21)
    batches[0] = unmoved(batches[0])
    model = TableModel()
    sink = location.sink(OPTIONS)
    sink(events_df(spark, batches[0]), 0)
    model.apply_batch(batches[0])
    table = location.table()
    (first,) = table.timeline.commits_timeline()
    assert first.action == "deltacommit" and operation(table, first.timestamp) == "BULK_INSERT"
    base, logs = files(location.storage)
    assert base and not logs, "a bulk insert writes base files only"
    stats = table.timeline.read_commit_metadata(first.timestamp).all_write_stats()
    assert sorted(s.path for s in stats) == sorted(base)
    assert all(s.prev_commit == "null" and s.num_inserts == s.num_writes > 0 for s in stats)
    assert sum(s.num_writes for s in stats) == len(model.rows())
    check_readers(location, model, "after the bulk insert")
    check_index(location.storage, table, exact=True)
    for i, events in enumerate(batches[1:], start=1):
        sink(events_df(spark, events), i)
        model.apply_batch(events)
        table = location.table()
        assert operation(table, table.timeline.commits_timeline()[-1].timestamp) == "UPSERT"
        check_readers(location, model, f"after batch {i}")
        check_index(location.storage, table, exact=False)
    bulk_groups = {parse_base_file_name(p.rsplit("/", 1)[-1]).file_id for p in base}
    _, logs = files(location.storage)
    appended = {parse_log_file_name(p.rsplit("/", 1)[-1]).file_id for p in logs}
    assert appended & bulk_groups, "the chain's updates go to the file groups the bulk insert wrote"
    sink(events_df(spark, batches[0]), 0)  # replayed after a restart: skipped
    assert sink.last_result.skipped
    assert len(location.table().timeline.commits_timeline()) == len(batches)
    check_readers(location, model, "after the replay")
    sink.close()


def test_without_the_automatic_path_the_first_batch_goes_through_the_chain(spark, tmp_path):
    events = unmoved(generate_batches(1, seed=5)[0])
    for options in (
        {"hoodie.stream.bulk_insert.first.batch": "false"},
        {"hoodie.datasource.write.operation": "insert"},
    ):
        base = str(tmp_path / f"t{len(os.listdir(tmp_path))}")
        sink = HoodieStreamSink(base, {**OPTIONS, **options})
        sink(events_df(spark, events), 0)
        table = HoodieTable(base)
        instant = table.timeline.commits_timeline()[0].timestamp
        assert operation(table, instant) in ("UPSERT", "INSERT")
        base_files, logs = files(table.storage)
        assert logs and not base_files, "the chain opens log-only file groups"
        sink.close()


def test_bulk_insert_into_a_table_with_data_looks_no_key_up(spark, tmp_path, caplog):
    base = str(tmp_path / "t")
    first = [{"id": i, "city": "chennai", "ts": 1, "v": f"a{i}", "_hoodie_is_deleted": False} for i in range(6)]
    sink = HoodieStreamSink(base, OPTIONS)
    sink(events_df(spark, first), 0)
    bulk = HoodieStreamSink(base, {**OPTIONS, "hoodie.datasource.write.operation": "bulk_insert"})
    again = [dict(first[0], ts=2, v="again"), dict(first[1], ts=2, _hoodie_is_deleted=True), dict(first[0], id=50)]
    sink.close()
    with caplog.at_level("WARNING", logger="hoodie_stream"):
        bulk(events_df(spark, again), 1)
    assert "looks no key up" in caplog.text
    table = HoodieTable(base)
    assert operation(table, table.timeline.commits_timeline()[-1].timestamp) == "BULK_INSERT"
    rows = table_rows(table.read())
    assert sorted(r["v"] for r in rows if r["id"] == 0) == ["a0", "again"]  # written again: a duplicate, as in Hudi
    assert [r["v"] for r in rows if r["id"] == 1] == ["a1"]  # the delete is dropped
    assert [r["v"] for r in rows if r["id"] == 50] == ["a0"]
    assert sorted(map(repr, table_rows(rs_read(base)))) == sorted(map(repr, rows))
    # the index state points to the newest copy: the next upsert of key 0 updates that one
    bulk.close()
    sink = HoodieStreamSink(base, OPTIONS)
    sink(events_df(spark, [dict(first[0], ts=3, v="updated")]), 2)
    assert sorted(r["v"] for r in table_rows(HoodieTable(base).read()) if r["id"] == 0) == ["a0", "updated"]
    sink.close()


# -- random batches ----------------------------------------------------------------------------------------------------
@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    seed=st.integers(0, 10**6),
    partitioned=st.booleans(),
    hive=st.booleans(),
    sort_input=st.booleans(),
    keys=st.integers(1, 40),
)
def test_property_bulk_insert_then_upserts_match_the_model(
    spark, tmp_path_factory, seed, partitioned, hive, sort_input, keys
):
    rng = random.Random(seed)
    options = {**OPTIONS, "write.bulk_insert.sort_input": str(sort_input).lower()}
    options["hoodie.datasource.write.hive_style_partitioning"] = str(hive).lower()
    if not partitioned:
        del options["hoodie.datasource.write.partitionpath.field"]
    # duplicates inside the batch (some in other partitions), deletes (of keys met before or not), null values
    first = []
    for _ in range(rng.randrange(1, 3 * keys)):
        key = rng.randrange(keys)
        first.append(
            {
                "id": key,
                "city": rng.choice(CITIES),
                "ts": rng.randrange(-5, 5),
                "v": None if rng.random() < 0.2 else f"v{rng.randrange(100)}",
                "_hoodie_is_deleted": rng.random() < 0.15,
            }
        )
    batches = [first, *generate_batches(2, seed=seed, keys_per_batch=keys, key_space=2 * keys)]
    if not partitioned:  # the model moves a key whose city changes: one city, as the table has one partition
        batches = [[dict(e, city="chennai") for e in b] for b in batches]
    base = str(tmp_path_factory.mktemp("bulk") / "t")
    sink = HoodieStreamSink(base, options)
    model = TableModel()
    try:
        for i, events in enumerate(batches):
            sink(events_df(spark, events), i)
            model.apply_batch(events)
            check_readers(base, model, f"after batch {i}")
            table = HoodieTable(base)
            if table.timeline.commits_timeline():
                assert operation(table, table.timeline.commits_timeline()[0].timestamp) == "BULK_INSERT"
                check_index(table.storage, table, exact=i == 0)
    finally:
        sink.close()


# -- files ------------------------------------------------------------------------------------------------------------
def test_base_files_are_cut_at_the_target_size_and_carry_hudi_footers(spark, tmp_path):
    base = str(tmp_path / "t")
    target, estimate, rows = 1_000_000, 50, 120_000
    sink = HoodieStreamSink(
        base,
        {
            "hoodie.table.name": "cut",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.parquet.max.file.size": str(target),
            "hoodie.copyonwrite.record.size.estimate": str(estimate),
        },
    )
    df = (
        spark.range(0, rows, numPartitions=2)
        .withColumn("ts", F.lit(1).cast("long"))
        .withColumn("payload", F.sha2(F.col("id").cast("string"), 256))
    )
    sink(df, 0)
    sink.close()
    table = HoodieTable(base)
    stats = table.timeline.read_commit_metadata(table.timeline.commits_timeline()[0].timestamp).all_write_stats()
    assert sum(s.num_writes for s in stats) == rows

    def data_bytes(s):  # the file without its footer (whose bloom filter is ~430 KB per 60,000 keys, at any size)
        with parquet_file(table.storage, s.path) as pf:
            return s.file_size_in_bytes - pf.metadata.serialized_size

    by_task = {}
    for s in stats:
        prefix, _, n = s.file_id.rpartition("-")
        by_task.setdefault(prefix, []).append((int(n), s))
    assert len(by_task) == 2
    for files_of_task in by_task.values():
        files_of_task.sort(key=lambda f: f[0])
        assert files_of_task[0][1].num_writes == target // estimate, "a task's first file: max size / record size"
        assert len(files_of_task) >= 3
        for _n, s in files_of_task[1:]:  # then cut by the bytes per record of the files the task closed
            assert data_bytes(s) <= 1.25 * target, (s.path, data_bytes(s))
        for _n, s in files_of_task[1:-1]:
            assert data_bytes(s) >= 0.75 * target, (s.path, data_bytes(s))
    for s in stats[:3]:
        footer = read_footer(table.storage, s.path)
        ids = read_base_file(table.storage, s.path, columns=["id"])["id"].to_pylist()
        assert ids == sorted(ids), "records are sorted by key within a task"
        assert (footer[MIN_KEY], footer[MAX_KEY]) == (min(map(str, ids)), max(map(str, ids)))
        bloom = read_bloom_filter(table.storage, s.path)
        assert all(bloom.might_contain(str(i)) for i in ids[:50])


# -- failures ---------------------------------------------------------------------------------------------------------
class FailingStorage(LocalStorage):
    """A local table whose write tasks fail when they save the index state (after their base files are written),
    while the file `flag` exists."""

    def __init__(self, root, flag):
        super().__init__(root)
        self.flag = flag

    def __reduce__(self):
        return (type(self), (self.root, self.flag))

    def write_cached(self, path, data):
        if path.startswith(index_state.INDEX_DIR) and os.path.exists(self.flag):
            raise OSError(f"injected failure writing {path}")
        return super().write_cached(path, data)


def test_a_failed_bulk_insert_leaves_nothing_and_its_retry_commits(spark, tmp_path):
    flag = str(tmp_path / "fail")
    base = str(tmp_path / "t")
    open(flag, "w").close()
    events = unmoved(generate_batches(1, seed=8, keys_per_batch=60)[0])
    model = TableModel()
    sink = HoodieStreamSink(FailingStorage(base, flag), OPTIONS)
    with pytest.raises(Exception, match="injected failure"):
        sink(events_df(spark, events), 0)
    assert not os.path.exists(base) or not os.listdir(base), "the failed first batch removed the table it created"
    os.remove(flag)
    sink(events_df(spark, events), 0)  # Spark retries the batch
    model.apply_batch(events)
    check_readers(base, model, "after the retry")
    table = HoodieTable(base)
    check_index(table.storage, table, exact=True)
    # a bulk insert into the table failing the same way leaves the table as it was
    data_before, index_before = (
        files(table.storage),
        sorted(i.path for i in table.storage.list(index_state.INDEX_DIR, True)),
    )
    open(flag, "w").close()
    bulk = HoodieStreamSink(FailingStorage(base, flag), {**OPTIONS, "hoodie.datasource.write.operation": "bulk_insert"})
    sink.close()
    more = [dict(e, id=e["id"] + 1000) for e in events]
    with pytest.raises(Exception, match="injected failure"):
        bulk(events_df(spark, more), 1)
    assert files(table.storage) == data_before
    index_after = sorted(i.path for i in table.storage.list(index_state.INDEX_DIR, True))
    assert index_after == index_before
    check_readers(base, model, "after the failed bulk insert")
    os.remove(flag)
    bulk(events_df(spark, more), 1)
    model.apply_batch(more)
    check_readers(base, model, "after the retried bulk insert")
    table = HoodieTable(base)
    assert [i.action for i in table.timeline.completed() if i.action != "deltacommit"] == ["rollback"]
    check_index(table.storage, table, exact=True)
    bulk.close()


def test_refused_record_fails_the_bulk_insert_before_anything_commits(spark, tmp_path):
    base = str(tmp_path / "t")
    events = [{"id": i, "city": "chennai", "ts": 1, "v": "v", "_hoodie_is_deleted": False} for i in range(50)]
    events[37]["city"] = ".."
    sink = HoodieStreamSink(base, {**OPTIONS, "hoodie.datasource.write.hive_style_partitioning": "false"})
    with pytest.raises(HoodiePathError, match="'city'"):
        sink(events_df(spark, events), 0)
    assert not os.path.exists(base) or not os.listdir(base)
    sink.close()


# -- keys and options -------------------------------------------------------------------------------------------------
def test_spark_renders_record_keys_as_the_key_generators_do(spark):
    rows = [(1, "a", -7, "é/ü"), (2, "", 0, "x,y:z"), (3, None, 2**40, "b"), (4, "ñ", -(2**63), "")]
    df = spark.createDataFrame(rows, "n int, s string, l long, t string")
    types = {f.name: f.dataType.typeName() for f in df.schema.fields}
    table = df.toArrow()
    cases = [
        ({"hoodie.table.recordkey.fields": "l", "hoodie.table.partition.fields": "s"}, None),
        ({"hoodie.table.recordkey.fields": "t", "hoodie.table.partition.fields": ""}, [0, 1, 2]),
        ({"hoodie.table.recordkey.fields": "n,s,t", "hoodie.table.partition.fields": ""}, None),
        ({"hoodie.table.recordkey.fields": "l,n", "hoodie.table.partition.fields": "s"}, None),
    ]
    for props, rows_with_keys in cases:
        keygen = make_key_generator(props)
        expr = record_key_sql(keygen, types)
        assert expr is not None, props
        picked = rows_with_keys if rows_with_keys is not None else range(len(rows))
        got = [r.k for r in df.selectExpr(f"{expr} AS k").collect()]
        want = keygen.record_keys(table.take(list(picked))).to_pylist()
        assert [got[i] for i in picked] == want, props
    assert record_key_sql(make_key_generator({"hoodie.table.recordkey.fields": "d"}), {"d": "double"}) is None


def test_bulk_insert_options():
    o = parse_options("/t/x", {"hoodie.datasource.write.recordkey.field": "id"})
    assert (o.bulk_insert_sort_input, o.bulk_insert_first_batch) == (True, True)
    o = parse_options(
        "/t/x", {"hoodie.datasource.write.recordkey.field": "id", "hoodie.datasource.write.operation": "BULK_INSERT"}
    )
    assert o.operation == "bulk_insert"
    for key in ("write.bulk_insert.sort_input", "hoodie.stream.bulk_insert.first.batch"):
        with pytest.raises(HoodieConfigError, match=key.replace(".", r"\.")):
            parse_options("/t/x", {"hoodie.datasource.write.recordkey.field": "id", key: "maybe"})


def test_the_write_task_carries_its_errors():
    from hoodie_stream import errors

    call = bulk_insert_write.BulkInsertWriteFunction.__call__
    assert hasattr(call, "__wrapped__") and call.__code__.co_filename == errors.__file__


def test_commit_metadata_of_a_bulk_insert_is_hudis(spark, tmp_path):
    base = str(tmp_path / "t")
    sink = HoodieStreamSink(base, OPTIONS)
    sink(events_df(spark, unmoved(generate_batches(1, seed=2)[0])), 0)
    sink.close()
    table = HoodieTable(base)
    instant = table.timeline.commits_timeline()[0].timestamp
    meta = json.loads(table.storage.read(f".hoodie/{instant}.deltacommit"))
    assert meta["operationType"] == "BULK_INSERT" and meta["compacted"] is False
    assert "_hudi_streaming_sink_checkpoint" in meta["extraMetadata"] and "schema" in meta["extraMetadata"]
    for stats in meta["partitionToWriteStats"].values():
        for stat in stats:
            assert "logFiles" not in stat and stat["path"].endswith(f"_{instant}.parquet")
            assert stat["prevCommit"] == "null" and stat["numDeletes"] == 0


@pytest.mark.parametrize("sort_input", [True, False])
def test_a_key_met_in_several_partitions_writes_its_winner_only(spark, tmp_path, sort_input):
    """A key in three partitions of the first batch: only its winner (greatest ts, then the later arrival) is
    written, no losing copy in another partition's base file. A losing copy written and deleted again in the same
    instant would leave a file group where Hudi's readers (hudi-rs, Java's merge of a base record with a later
    log record by ordering value) let the loser win over the key's re-insert with a smaller ts."""
    base = str(tmp_path / "t")
    options = {**OPTIONS, "write.tasks": "1", "write.bulk_insert.sort_input": str(sort_input).lower()}
    first = [
        {"id": 10, "city": "chennai", "ts": 2, "v": "loser", "_hoodie_is_deleted": False},
        {"id": 10, "city": "san_francisco", "ts": 4, "v": "tied-earlier", "_hoodie_is_deleted": False},
        {"id": 10, "city": "sao_paulo", "ts": 4, "v": "winner", "_hoodie_is_deleted": False},
        {"id": 11, "city": "chennai", "ts": 0, "v": "other", "_hoodie_is_deleted": False},
    ]
    moved_back = [{"id": 10, "city": "chennai", "ts": -13, "v": "moved back", "_hoodie_is_deleted": False}]
    sink = HoodieStreamSink(base, options)
    model = TableModel()
    try:
        for i, events in enumerate([first, moved_back]):
            sink(events_df(spark, events), i)
            model.apply_batch(events)
            check_readers(base, model, f"after batch {i}")
            if i == 0:
                written = [
                    (r["_hoodie_record_key"], r["v"])
                    for f in glob.glob(os.path.join(base, "*", "*.parquet"))
                    for r in pq.read_table(f, columns=["_hoodie_record_key", "v"]).to_pylist()
                ]
                assert sorted(written) == [("10", "winner"), ("11", "other")]
    finally:
        sink.close()


# -- a task that outlives its micro-batch -----------------------------------------------------------------------------
def _outliving_task(tmp_path, file_records=4, **spec_fields):
    """A bulk insert write task of instant 20260101000000000 over a table root holding its inflight file (Spark-free),
    and the path of that file: removing it is the driver rolling the instant back."""
    import pyarrow as pa

    from hoodie_stream.chain.columns import DELETE, KEY, KEY_GROUP, PARTITION, SEQ
    from hoodie_stream.chain.stages import BatchContext, BulkInsertSpec
    from hoodie_stream.format.avro.schema import arrow_to_avro_schema

    storage = LocalStorage(str(tmp_path / "t"))
    instant = "20260101000000000"
    storage.write(f".hoodie/{instant}.deltacommit.inflight", b"")
    data = pa.schema([("id", pa.int64()), ("city", pa.string())])
    context = BatchContext(storage, instant, "bulk_insert", None, ("id", "city"))
    fields = {
        "avro_schema": arrow_to_avro_schema(data, "t_record", "hoodie.t"),
        "file_records": file_records,
        "max_file_size": 1 << 30,
        "parquet_codec": "snappy",
        "global_index": False,
        "event_time": False,
        "sorted_input": True,
        "keyed": True,
        "key_props": {"hoodie.table.recordkey.fields": "id", "hoodie.table.partition.fields": "city"},
    }
    spec = BulkInsertSpec(**{**fields, **spec_fields})
    helper = bulk_insert_write.BulkInsertWriterHelper(context, spec, 0, "0-1-0")

    def batch(ids, city):
        return pa.record_batch(
            {
                "id": pa.array(ids, pa.int64()),
                "city": pa.array([city] * len(ids)),
                KEY: pa.array([str(i) for i in ids]),
                PARTITION: pa.array([city] * len(ids)),
                DELETE: pa.array([False] * len(ids)),
                SEQ: pa.array(ids, pa.int64()),
                KEY_GROUP: pa.array([i % 3 for i in ids], pa.int32()),
            }
        )

    return storage, helper, batch, f".hoodie/{instant}.deltacommit.inflight"


def _left(storage):
    """The files of the table root besides the partitions' metadata files."""
    return sorted(f.path for f in storage.list("", recursive=True) if not f.name.startswith(".hoodie_partition"))


def test_a_task_outliving_its_rolled_back_instant_removes_what_it_wrote(tmp_path):
    from hoodie_stream.errors import HoodieTimelineError

    # rolled back while the task writes: its next file finds the instant gone; its closed files and markers go
    storage, helper, batch, inflight = _outliving_task(tmp_path)
    helper.write(batch(list(range(10)), "a"))  # a file closed at 4 records, the next one open
    assert len([p for p in _left(storage) if p.endswith(".parquet")]) == 1
    storage.delete(inflight)
    with pytest.raises(HoodieTimelineError, match="no longer pending"):
        helper.write(batch(list(range(10, 20)), "b"))
    assert _left(storage) == []

    # rolled back before the task finishes: finish removes its base files, markers and index state
    storage, helper, batch, inflight = _outliving_task(tmp_path / "2")
    helper.write(batch(list(range(6)), "a"))
    files_before_finish = _left(storage)
    assert any(".temp/" in p for p in files_before_finish)
    storage.delete(inflight)
    with pytest.raises(HoodieTimelineError):
        helper.finish()
    assert _left(storage) == []

    # a task failing for another reason while the instant is pending leaves its files to the driver's rollback;
    # one failing after the rollback removes them itself
    storage, helper, batch, inflight = _outliving_task(tmp_path / "3")
    helper.write(batch(list(range(6)), "a"))
    helper.abort()
    written = _left(storage)
    assert inflight in written and any(p.endswith(".parquet") for p in written)
    storage.delete(inflight)
    helper.abort()
    assert _left(storage) == []


@pytest.mark.parametrize("sorted_input", [True, False])
def test_row_groups_of_a_bulk_insert_hold_a_quarter_of_the_task_buffer(tmp_path, sorted_input):
    """write.task.max.size bounds a bulk insert task's buffers: rows gathered for a row group, the row group being
    written and its encoding; a row group holds about a quarter of it (up to 32 MB of Arrow data)."""
    assert bulk_insert_write.row_group_bytes(64 << 20) == 16 << 20
    assert bulk_insert_write.row_group_bytes(1024 << 20) == bulk_insert_write.ROW_GROUP_BYTES == 32 << 20
    assert bulk_insert_write.unsorted_buffer_bytes(64 << 20) == 32 << 20
    task_max = 400_000
    storage, helper, batch, _ = _outliving_task(
        tmp_path, file_records=1 << 30, task_max_bytes=task_max, sorted_input=sorted_input
    )
    per_batch = batch(list(range(1000)), "a").nbytes
    for start in range(0, 40_000, 1000):
        helper.write(batch(list(range(start, start + 1000)), "a"))
    helper.finish()
    (path,) = [p for p in _left(storage) if p.endswith(".parquet")]
    meta = pq.ParquetFile(storage.local_file(path)).metadata
    rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(rows) == 40_000
    limit = task_max // 4 + per_batch  # one open file: cut at a quarter, its input sorted or not
    assert all(r * per_batch / 1000 <= limit for r in rows), (rows, per_batch)
    assert len(rows) >= 40_000 * per_batch / 1000 / limit  # cut into row groups, not one
