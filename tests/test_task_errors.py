"""An error the project raises inside a Spark task reaches the driver, and the user's foreachBatch call, as itself:
its class, its fields and its message (errors.in_task on the task side, errors.rebuild_task_error on the driver)."""

import os
import pickle

import pytest

from hoodie_stream import HoodieStreamSink, HoodieTable, errors
from hoodie_stream.checkpoints import index_state, recovery
from hoodie_stream.compaction.plan import pending_plans, schedule_compaction
from hoodie_stream.compaction.run import run_compaction
from hoodie_stream.errors import (
    HoodieError,
    HoodieFormatError,
    HoodieKeyError,
    HoodieObjectNotFoundError,
    HoodieTableError,
    TaskFailure,
    error_from_json,
    in_task,
    rebuild_task_error,
    task_errors_rebuilt,
)
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.options import parse_compaction_options
from hoodie_stream.storage import storage_for
from storage_helpers import tree
from stream_model import OPTIONS, SCHEMA_DDL

SAMPLE_VALUES = {
    "message": "field 'id' of record {id=1, v='ünï'} is null\nsecond line \"quoted\"",
    "path": "/tmp/t/.hoodie/hoodie.properties",
    "reason": "checksum mismatch: ünï\nsecond line",
}


def sample(cls):
    return cls(**{name: SAMPLE_VALUES[name] for name in cls.fields})


def assert_same(rebuilt, error):
    assert type(rebuilt) is type(error)
    assert rebuilt.to_fields() == error.to_fields()
    assert str(rebuilt) == str(error)


def raise_in_task(spark, error):
    """Run a one-row mapInArrow job whose task raises `error`; the driver side as the project's drivers do it."""

    @in_task
    def task(batches):
        for _batch in batches:
            raise error
        yield from ()

    df = spark.range(1, numPartitions=1)
    with task_errors_rebuilt():
        df.mapInArrow(task, df.schema).collect()


# -- every error class, without and through a task ---------------------------------------------------------------
def test_the_registry_holds_every_error_class():
    names = {name for name in dir(errors) if isinstance(getattr(errors, name), type)}
    hoodie = {n for n in names if issubclass(getattr(errors, n), HoodieError)}
    assert set(errors.CLASSES) == hoodie
    assert "HoodieTableError" in hoodie and "HoodieStorageError" in hoodie


@pytest.mark.parametrize("name", sorted(errors.CLASSES))
def test_error_pickles_and_rebuilds_from_its_fields(name):
    error = sample(errors.CLASSES[name])
    assert_same(pickle.loads(pickle.dumps(error)), error)
    assert_same(error_from_json(error.to_json()), error)
    assert_same(rebuild_task_error(TaskFailure(error)), error)


@pytest.mark.parametrize("name", sorted(errors.CLASSES))
def test_error_raised_in_a_task_reaches_the_driver(spark, name):
    error = sample(errors.CLASSES[name])
    with pytest.raises(HoodieError) as e:
        raise_in_task(spark, error)
    assert_same(e.value, error)
    assert e.value.to_fields() == {f: SAMPLE_VALUES[f] for f in error.fields}
    notes = getattr(e.value, "__notes__", [])
    assert notes and "raised in a Spark task" in notes[0] and "raise error" in notes[0], notes


def test_every_operator_task_carries_its_errors():
    from hoodie_stream.bucket_assign.assigner import BucketAssigner
    from hoodie_stream.compaction.execute import CompactTask
    from hoodie_stream.streaming_sink.key_by import KeyBy
    from hoodie_stream.streaming_sink.write_function import StreamWriteFunction

    operators = (KeyBy, BucketAssigner, StreamWriteFunction, CompactTask, recovery._ReadKeys, recovery._WriteStates)
    for operator in operators:
        call = operator.__call__  # wrapped by errors.in_task
        assert hasattr(call, "__wrapped__") and call.__code__.co_filename == errors.__file__, operator


def test_other_errors_of_a_task_stay_sparks(spark):
    with pytest.raises(Exception) as e:
        raise_in_task(spark, ZeroDivisionError("not the project's"))
    assert not isinstance(e.value, HoodieError)
    assert "ZeroDivisionError: not the project's" in str(e.value)


def test_unknown_class_or_unfit_fields_become_a_hoodie_error():
    unknown = error_from_json('{"class": "HoodieNotAnError", "fields": {"message": "m"}, "message": "the message"}')
    assert type(unknown) is HoodieError and str(unknown) == "the message"
    unfit = error_from_json('{"class": "HoodieTableError", "fields": {"message": "m"}, "message": "p: r"}')
    assert type(unfit) is HoodieError and str(unfit) == "p: r"
    assert type(error_from_json("{not json")) is HoodieError
    assert rebuild_task_error(ValueError("no marked line")) is None


# -- the write chain through HoodieStreamSink, as foreachBatch calls it -------------------------------------------


ROWS = [(1, "sf", 1, "a", False), (2, "nyc", 1, "b", False), (3, "sf", 1, "c", False)]


@pytest.fixture
def table(spark, tmp_path):
    base = str(tmp_path / "t")
    # the first batch goes through the upsert chain (not a bulk insert): the table has log files
    sink = HoodieStreamSink(base, {**OPTIONS, "hoodie.stream.bulk_insert.first.batch": "false"})
    sink(spark.createDataFrame(ROWS, SCHEMA_DDL), 0)
    yield base, sink
    sink.close()


def log_files(base):
    return sorted(
        os.path.join(root, n)
        for root, _d, files in os.walk(base)
        if ".hoodie" not in root
        for n in files
        if ".log." in n
    )


def corrupt_first_block(path):
    """Keep the block's framing (size, trailer) but give it log format version 9: a corrupt block that decodes to
    an error, not one Hudi skips as CORRUPT."""
    with open(path, "r+b") as f:
        f.seek(6 + 8)  # magic, block size
        f.write((9).to_bytes(4, "big"))


def test_null_record_key_reaches_the_user_as_a_key_error(spark, table):
    base, sink = table
    before = tree(base)
    with pytest.raises(HoodieKeyError) as e:
        sink(spark.createDataFrame([(4, "sf", 2, "d", False), (None, "sf", 2, "nokey", False)], SCHEMA_DDL), 1)
    assert type(e.value) is HoodieKeyError
    assert "'id'" in str(e.value) and "nokey" in str(e.value), str(e.value)
    assert "key_by.py" in e.value.__notes__[0]  # raised by the key-by task
    assert tree(base) == before
    assert HoodieTable(base).read().num_rows == 3


def test_unreadable_table_reaches_the_user_as_a_table_error(spark, table):
    base, sink = table
    props = os.path.join(base, ".hoodie", "hoodie.properties")
    with open(props, "wb") as f:
        f.write(b"hoodie.table.name=stream_model\n")  # truncated between two micro-batches
    before = tree(base)
    # the driver opens the table before any task runs: the error is the driver's own
    with pytest.raises(HoodieTableError) as e:
        sink(spark.createDataFrame([(4, "sf", 2, "d", False)], SCHEMA_DDL), 1)
    assert type(e.value) is HoodieTableError
    assert e.value.path.endswith("hoodie.properties") and "hoodie.table.checksum" in e.value.reason
    assert str(e.value) == f"{e.value.path}: {e.value.reason}"
    assert tree(base) == before


def test_unreadable_table_in_the_index_rebuild_task(spark, table):
    """The index rebuild's tasks open the table themselves: a HoodieTableError (path, reason) raised there is
    rebuilt on the driver with both fields (it used to turn into a TypeError)."""
    base, sink = table
    with open(os.path.join(base, ".hoodie", "hoodie.properties"), "wb") as f:
        f.write(b"hoodie.table.name=stream_model\n")
    storage = storage_for(base)
    with pytest.raises(HoodieTableError) as e:
        recovery.rebuild_index(spark, storage, Timeline(storage), sink.options.key_groups, sink.options.global_index, 2)
    assert type(e.value) is HoodieTableError
    assert e.value.path.endswith("hoodie.properties") and "hoodie.table.checksum" in e.value.reason
    assert "recovery.py" in e.value.__notes__[0]


def test_corrupt_log_block_in_the_index_rebuild_reaches_the_user(spark, table):
    base, sink = table
    storage = storage_for(base)
    storage.delete(index_state.LATEST)  # the index state must be rebuilt from the table's files
    corrupt_first_block(log_files(base)[0])
    before = tree(base)
    with pytest.raises(HoodieFormatError) as e:
        sink(spark.createDataFrame([(4, "sf", 2, "d", False)], SCHEMA_DDL), 1)
    assert type(e.value) is HoodieFormatError
    assert "log format version 9 is not supported" in str(e.value), str(e.value)
    assert os.path.basename(log_files(base)[0]) in str(e.value)
    assert tree(base) == before


def test_corrupt_log_block_in_a_compaction_task(spark, table):
    base, sink = table
    sink(spark.createDataFrame([(1, "sf", 2, "a2", False), (2, "nyc", 2, "b2", False)], SCHEMA_DDL), 1)
    sink.close()  # no background compaction: this test runs the plan itself
    storage = storage_for(base)
    timeline = Timeline(storage)
    opts = parse_compaction_options()
    instant = schedule_compaction(storage, timeline, opts, force=True)
    corrupt_first_block(log_files(base)[0])
    before = tree(base)
    with pytest.raises(HoodieFormatError) as e:
        run_compaction(spark, storage, Timeline(storage), instant, opts.max_memory_bytes)
    assert type(e.value) is HoodieFormatError
    assert "log format version 9 is not supported" in str(e.value), str(e.value)
    assert "execute.py" in e.value.__notes__[0]
    assert instant in pending_plans(Timeline(storage))  # the plan stays requested
    assert tree(base) == before


def test_missing_log_file_in_a_compaction_task(spark, table):
    """A file the plan names is gone: the storage's HoodieObjectNotFoundError (path, reason) reaches the caller."""
    base, sink = table
    sink(spark.createDataFrame([(1, "sf", 2, "a2", False), (2, "nyc", 2, "b2", False)], SCHEMA_DDL), 1)
    sink.close()
    storage = storage_for(base)
    opts = parse_compaction_options()
    instant = schedule_compaction(storage, Timeline(storage), opts, force=True)
    victim = log_files(base)[0]
    os.remove(victim)
    with pytest.raises(HoodieObjectNotFoundError) as e:
        run_compaction(spark, storage, Timeline(storage), instant, opts.max_memory_bytes)
    assert type(e.value) is HoodieObjectNotFoundError
    assert e.value.path.endswith(os.path.basename(victim)) and e.value.reason
    assert instant in pending_plans(Timeline(storage))
