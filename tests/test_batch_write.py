"""Batch writes (`hoodie_stream.write`): a DataFrame through the sink's chain as one commit, per operation, checked
against hudi-rs and the plain-Python model (tests/stream_model.py); the streaming checkpoints survive a batch write
between two runs of a query; save modes and bad options are refused before anything is written; `format("hoodie")`
refuses to write and names the batch entry point."""

import os
import uuid

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql.types import StructType

import hoodie_stream
from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.checkpoints.batch_checkpoint import CHECKPOINT_KEY
from hoodie_stream.errors import HoodieConfigError, HoodieLockError, HoodieTableError, HoodieUsageError
from hoodie_stream.format.views import table_info
from hoodie_stream.options import parse_options
from hoodie_stream.spark import HoodieDataSource, register
from oracle import rs_read
from stream_model import CITIES, OPTIONS, TableModel, events_df, generate_batches, table_rows

OPERATION = "hoodie.datasource.write.operation"


@pytest.fixture
def query(spark):
    """Set the streaming query id the sink sees (as Spark does inside a streaming query), None to leave the query:
    a UUID named after `name`, of a query that does not run (as after it stopped)."""
    sc = spark.sparkContext

    def set_id(name):
        query_id = None if name is None else str(uuid.uuid5(uuid.NAMESPACE_URL, f"hoodie-stream-test/{name}"))
        sc.setLocalProperty("sql.streaming.queryId", query_id)
        return query_id

    yield set_id
    sc.setLocalProperty("sql.streaming.queryId", None)


def event(key, ts, v, city=None, deleted=False):
    return {"id": key, "city": city or CITIES[key % len(CITIES)], "ts": ts, "v": v, "_hoodie_is_deleted": deleted}


def commits(base):
    return [i.timestamp for i in HoodieTable(base).timeline.commits_timeline()]


def check_commit(base, result, before, operation, model):
    """`result` is the one commit the write added, with `operation` and no streaming checkpoint; hudi-rs and
    HoodieTable read what the model holds."""
    assert commits(base) == [*before, result.instant]
    metadata = HoodieTable(base).timeline.read_commit_metadata(result.instant)
    assert metadata.operation_type == operation
    assert CHECKPOINT_KEY not in metadata.extra_metadata  # no streaming query wrote this table
    assert table_rows(rs_read(base)) == model.rows()
    assert table_rows(HoodieTable(base).read()) == model.rows()
    return result.instant


def test_each_operation_is_one_commit_read_by_hudi_rs_as_the_model_holds(spark, tmp_path):
    base = str(tmp_path / "t")
    model = TableModel()
    # bulk insert into a new table: base files, pre-combined by key (key 3 twice: the greater ts wins)
    first = [event(k, 10, f"a{k}") for k in range(24)] + [event(3, 11, "a3-later")]
    result = hoodie_stream.write(events_df(spark, first), base, {**OPTIONS, OPERATION: "bulk_insert"})
    model.apply_batch(first)
    done = [check_commit(base, result, [], "BULK_INSERT", model)]
    assert result.num_writes == 24

    # upsert (the default): updates, a late version that loses, a partition move, a delete flag, new keys
    second = [
        event(1, 20, "b1"),
        event(2, 5, "late2"),
        event(4, 20, "b4-moved", city=CITIES[(4 + 1) % len(CITIES)]),
        event(6, 20, "", deleted=True),
        event(30, 20, "b30"),
        event(31, 20, "b31"),
    ]
    result = hoodie_stream.write(events_df(spark, second), base, OPTIONS)
    model.apply_batch(second)
    done.append(check_commit(base, result, done, "UPSERT", model))
    assert (result.num_moved, result.num_deletes) == (1, 1)

    # insert, by Flink's option name: new keys, no index lookup
    third = [event(k, 30, f"c{k}") for k in (40, 41, 42)]
    result = hoodie_stream.write(events_df(spark, third), base, {**OPTIONS, "write.operation": "insert"})
    model.apply_batch(third)
    done.append(check_commit(base, result, done, "INSERT", model))

    # delete: every key the rows name, whatever their ordering value and without the partition column (the global
    # index finds each key's partition); a key the table does not hold is nothing to delete
    keys = spark.createDataFrame([(1, 0), (4, 0), (41, 0), (999, 0)], "id long, ts long")
    result = hoodie_stream.write(keys, base, {**OPTIONS, OPERATION: "delete"})
    for key in (1, 4, 41):
        del model.state[key]
    check_commit(base, result, done, "DELETE", model)
    assert result.num_deletes == 3


def test_a_batch_write_between_two_runs_of_a_query_keeps_it_exactly_once(spark, tmp_path, query):
    base = str(tmp_path / "t")
    batches = generate_batches(2, seed=21, keys_per_batch=15, key_space=40)
    model = TableModel()
    query_id = query("q")
    sink = HoodieStreamSink(base, OPTIONS)
    sink(events_df(spark, batches[0]), 0)
    model.apply_batch(batches[0])
    streamed = commits(base)
    checkpoints = HoodieTable(base).timeline.read_commit_metadata(streamed[-1]).extra_metadata[CHECKPOINT_KEY]

    # while the query runs it holds the table's lease: a batch write waits for it, then fails naming the query
    query(None)
    backfill = [event(k, 1000, f"fix{k}") for k in (2, 3, 50)]
    with pytest.raises(HoodieLockError, match=f"streaming query {query_id}"):
        hoodie_stream.write(events_df(spark, backfill), base, {**OPTIONS, "hoodie.write.lock.wait_time_ms": "0"})
    assert commits(base) == streamed

    sink.close()  # the query ended: the batch write goes in, carrying the query's checkpoint on
    result = hoodie_stream.write(events_df(spark, backfill), base, OPTIONS)
    model.apply_batch(backfill)
    assert commits(base) == [*streamed, result.instant]
    assert HoodieTable(base).timeline.read_commit_metadata(result.instant).extra_metadata[CHECKPOINT_KEY] == checkpoints

    # the query restarts from its checkpoint: Spark replays batch 0 (committed here, not in Spark's commit log)
    query("q")
    sink = HoodieStreamSink(base, OPTIONS)
    try:
        sink(events_df(spark, batches[0]), 0)
        assert sink.last_result.skipped
        sink(events_df(spark, batches[1]), 1)
        model.apply_batch(batches[1])
    finally:
        sink.close()
    assert table_rows(rs_read(base)) == model.rows()
    # the commits as `hoodie-stream show` lists them: batch 0, the batch write (no batch id), batch 1
    shown = table_info.commits(HoodieTable(base)).to_pylist()
    assert [(r["operation"], r["batch_id"]) for r in shown] == [("bulk_insert", 0), ("upsert", None), ("upsert", 1)]


def test_save_modes_and_bad_options_are_refused_before_anything_is_written(spark, tmp_path):
    base = str(tmp_path / "t")
    first = [event(k, 10, f"a{k}") for k in range(4)]
    df = events_df(spark, first)
    refused = [
        ({}, "overwrite", HoodieConfigError, "deletes the whole table directory"),
        ({}, "truncate", HoodieConfigError, "save mode 'truncate' is not one of"),
        ({"hoodie.datasource.write.operaton": "upsert"}, "append", HoodieConfigError, "unknown option"),
        ({OPERATION: "merge"}, "append", HoodieConfigError, "'hoodie.datasource.write.operation' must be one of"),
        ({OPERATION: "delete"}, "ignore", HoodieConfigError, "'append' is the only save mode of operation 'delete'"),
        ({OPERATION: "delete"}, "append", HoodieTableError, "cannot delete from a table that does not exist"),
    ]
    for options, mode, error, message in refused:
        with pytest.raises(error, match=message):
            hoodie_stream.write(df, base, {**OPTIONS, **options}, mode=mode)
    with pytest.raises(HoodieConfigError, match="record key field 'id' is not a column"):
        hoodie_stream.write(df.drop("id"), base, OPTIONS)
    assert not os.path.exists(os.path.join(base, ".hoodie", "hoodie.properties"))

    model = TableModel()
    result = hoodie_stream.write(df, base, OPTIONS, mode="ErrorIfExists")  # no table yet: written
    model.apply_batch(first)
    again = events_df(spark, [event(k, 20, f"b{k}") for k in range(4)])
    with pytest.raises(HoodieTableError, match="the table exists \\(save mode errorifexists\\)"):
        hoodie_stream.write(again, base, OPTIONS, mode="error")
    assert hoodie_stream.write(again, base, OPTIONS, mode="ignore").instant is None
    assert commits(base) == [result.instant]
    assert table_rows(rs_read(base)) == model.rows()


def test_format_hoodie_refuses_to_write_and_names_the_batch_entry_point(spark, tmp_path):
    base = str(tmp_path / "t")
    register(spark)
    df = events_df(spark, [event(1, 10, "a")])
    with pytest.raises(AnalysisException, match=r"hoodie_stream\.write\(df, path, options\)"):
        df.write.format("hoodie").options(**OPTIONS).mode("append").save(base)
    assert not os.path.exists(base)
    with pytest.raises(HoodieUsageError, match=r"foreachBatch\(HoodieStreamSink\(path, options\)\)"):
        HoodieDataSource({"path": base}).streamWriter(StructType(), False)


def test_flink_operation_name_sets_the_operation():
    assert parse_options("/t", {**OPTIONS, "write.operation": "DELETE"}).operation == "delete"
    with pytest.raises(HoodieConfigError, match="'write.operation' must be one of"):
        parse_options("/t", {**OPTIONS, "write.operation": "merge"})
