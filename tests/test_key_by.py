"""key-by chained to a transform of the source's batches (HoodieStreamSink.write_chained): the task keys exactly the
rows the transform makes, as the unchained operator keys them after a stage of their own, and an error of the
transform leaves the task with its class."""

import pickle

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hoodie_stream.chain.columns import DELETE, KEY, PARTITION, SEQ
from hoodie_stream.chain.stages import BatchContext
from hoodie_stream.errors import HoodieFormatError, TaskFailure, in_task
from hoodie_stream.storage import storage_for
from hoodie_stream.streaming_sink.key_by import KeyBy

PROPS = {
    "hoodie.table.recordkey.fields": "id",
    "hoodie.table.partition.fields": "city",
    "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator",
}
ROWS = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64())])


class Split:
    """A transform as DebeziumSink's flatten is one: each source line `id,city,ts` into a row; `bad` fails."""

    schema = ROWS

    @in_task
    def __call__(self, batches):
        for batch in batches:
            lines = batch.column("line")
            if pc.any(pc.equal(lines, "bad")).as_py():
                raise HoodieFormatError("line 'bad' is not id,city,ts")
            parts = pc.split_pattern(lines, ",")
            columns = [pc.list_element(parts, i) for i in range(3)]
            yield pa.RecordBatch.from_arrays(
                [pc.cast(columns[0], pa.int64()), columns[1], pc.cast(columns[2], pa.int64())], schema=ROWS
            )


def _context(tmp_path):
    return BatchContext(storage_for(str(tmp_path)), "20260101000000000", "upsert", "ts", tuple(ROWS.names), False)


def _source(lines, size=2):
    table = pa.table({"line": pa.array(lines)})
    return table.to_batches(max_chunksize=size)


def test_chained_key_by_keys_the_transforms_rows_as_a_stage_of_their_own(tmp_path):
    lines = ["1,sf,5", "2,nyc,6", "3,sf,7", "1,la,9", "4,nyc,1"]
    context = _context(tmp_path)
    chained = pickle.loads(pickle.dumps(KeyBy(context, PROPS, Split())))
    got = pa.Table.from_batches(list(chained(iter(_source(lines)))))
    made = list(Split()(iter(_source(lines))))
    expected = pa.Table.from_batches(list(KeyBy(context, PROPS)(iter(made))))
    assert got.equals(expected)
    assert got.column_names == [*ROWS.names, SEQ, KEY, PARTITION, DELETE]
    assert got[KEY].to_pylist() == ["1", "2", "3", "1", "4"]
    assert got[PARTITION].to_pylist() == ["sf", "nyc", "sf", "la", "nyc"]
    assert got[SEQ].to_pylist() == [0, 1, 2, 3, 4]  # arrival numbers over the transform's rows


def test_an_error_of_the_transform_leaves_the_chained_task_with_its_class(tmp_path):
    chained = KeyBy(_context(tmp_path), PROPS, Split())
    with pytest.raises(TaskFailure) as e:
        list(chained(iter(_source(["1,sf,5", "bad"], size=1))))
    assert isinstance(e.value.error, HoodieFormatError) and "line 'bad'" in str(e.value.error)
