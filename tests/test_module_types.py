"""The types where modules meet: what a micro-batch hands its operators (picklable, frozen), compaction operations
(the plan's Avro record exactly as written before they were a type) and options (each declared once)."""

import dataclasses
import pickle

import pytest

from hoodie_stream.bucket_assign.assigner import BucketAssigner
from hoodie_stream.bucket_assign.write_tasks import WritePlan
from hoodie_stream.chain.stages import AssignSpec, BatchContext, WriteSpec
from hoodie_stream.compaction.operation import CompactionOperation, plan_operations
from hoodie_stream.format.avro.models import read_container, write_container
from hoodie_stream.options import CompactionOptions, LockOptions, SinkOptions, options_of, parse_options
from hoodie_stream.storage import storage_for
from hoodie_stream.streaming_sink.key_by import KeyBy
from hoodie_stream.streaming_sink.write_function import StreamWriteFunction


def _context(tmp_path):
    return BatchContext(storage_for(str(tmp_path)), "20260101000000000", "upsert", "ts", ("id", "ts", "v"))


def test_operators_travel_to_tasks(tmp_path):
    context = _context(tmp_path)
    assign = AssignSpec(
        committed=frozenset({"20250101000000000"}),
        global_index=True,
        event_time=True,
        small_files={0: {"p": [("f-0", "20250101000000000", "", 3)]}},
        new_file_capacity=2.7,
        num_tasks=2,
        write_plan=WritePlan(3, {"f-0": 10}),
    )
    write = WriteSpec(
        avro_schema={"type": "record", "name": "r", "fields": []},
        batch_size_bytes=1,
        task_max_bytes=2,
        pending_compactions={("p", "f-0"): "20250101000000001"},
    )
    assert assign.new_file_capacity == 2
    for op in (
        KeyBy(context, {"hoodie.table.recordkey.fields": "id"}),
        BucketAssigner(context, assign),
        StreamWriteFunction(context, write),
    ):
        again = pickle.loads(pickle.dumps(op))
        assert again.context == context
        assert again.context.storage.uri == context.storage.uri
    again = pickle.loads(pickle.dumps(BucketAssigner(context, assign)))
    assert again.spec.small_files == assign.small_files and again.spec.write_plan.tasks == {"f-0": 0}
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.instant = "x"  # type: ignore[misc]


_PLAN_OP = {
    "baseInstantTime": "20250101000000000",
    "deltaFilePaths": [".f-0_20250101000000000.log.1_0-1-0"],
    "dataFilePath": "f-0_0-1-0_20250101000000000.parquet",
    "fileId": "f-0",
    "partitionPath": "p=1",
    "metrics": {
        "TOTAL_LOG_FILES": 1.0,
        "TOTAL_LOG_FILES_SIZE": 100.0,
        "TOTAL_IO_READ_MB": 0.5,
        "TOTAL_IO_WRITE_MB": 0.5,
        "TOTAL_IO_MB": 1.0,
    },
    "bootstrapFilePath": None,
}


@pytest.mark.parametrize("record", [_PLAN_OP, dict(_PLAN_OP, dataFilePath=None, partitionPath="")])
def test_compaction_operation_is_the_plan_record(record):
    op = CompactionOperation.from_avro(record)
    assert op.to_avro() == record
    assert pickle.loads(pickle.dumps(op)) == op
    plan = {
        "operations": [record],
        "extraMetadata": None,
        "version": 2,
        "strategy": None,
        "preserveHoodieMetadata": True,
    }
    typed = dict(plan, operations=[op.to_avro()])
    sync = b"s" * 16
    assert write_container("HoodieCompactionPlan", typed, sync) == write_container("HoodieCompactionPlan", plan, sync)
    assert plan_operations(read_container(write_container("HoodieCompactionPlan", typed))) == [op]


def test_every_option_is_declared_once():
    keys = []
    for cls in (SinkOptions, CompactionOptions, LockOptions):
        for f in dataclasses.fields(cls):
            spec = options_of(cls).get(f.name)
            if spec is None:
                assert f.name in ("raw", "compaction", "lock")
                continue
            keys.append(spec.key)
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            assert default == spec.value(spec.default), f.name  # the field's default is the option's, parsed
    assert len(keys) == len(set(keys))
    opts = parse_options("/tables/orders", {"hoodie.datasource.write.recordkey.field": "id"})
    assert opts == dataclasses.replace(SinkOptions(), raw=opts.raw, table_name="orders", record_key_fields=["id"])
    assert opts.max_file_size == 120 * 1024 * 1024
    assert (
        parse_options(
            "/t", {"hoodie.datasource.write.recordkey.field": "id", "write.parquet.max.file.size": "16"}
        ).max_file_size
        == 16 * 1024 * 1024
    )
