"""End to end: a streaming query (file source) through HoodieStreamSink, checked after every micro-batch against
the plain-Python model, through hudi-rs and through HoodieTable.read; the table on local disk and on the S3 test
server (hudi-rs reading it from the same endpoint; fewer micro-batches there, each a round of requests)."""

import json

from oracle import rs_completed_instants
from stream_model import OPTIONS, SCHEMA_DDL, TableModel, generate_batches, table_rows, write_batch_file

BATCHES = {"local": 22, "s3": 12}


def test_stream_matches_model_after_every_batch(spark, tmp_path, location):
    source, chk = str(tmp_path / "in"), str(tmp_path / "chk")
    n_batches = BATCHES[location.kind]
    batches = generate_batches(n_batches, seed=11)
    model = TableModel()
    sink = location.sink(OPTIONS)
    write_batch_file(source, 0, batches[0])
    stream = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(source)
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", chk).start()
    try:
        for i, events in enumerate(batches):
            if i:
                write_batch_file(source, i, events)
            query.processAllAvailable()
            model.apply_batch(events)
            expected = model.rows()
            assert table_rows(location.rs_read()) == expected, f"hudi-rs after batch {i}"
            assert table_rows(location.table().read()) == expected, f"HoodieTable after batch {i}"
    finally:
        query.stop()
    table = location.table()
    instants = table.timeline.commits_timeline()
    assert [i.action for i in instants] == ["deltacommit"] * n_batches
    assert [i.timestamp for i in instants] == rs_completed_instants(location.uri, location.options)
    batch_ids = []
    for inst in instants:
        extra = table.timeline.read_commit_metadata(inst.timestamp).extra_metadata
        ((identifier, batch_id),) = json.loads(extra["_hudi_streaming_sink_checkpoint"]).items()
        assert identifier == f"default_single_writer-{query.id}"
        batch_ids.append(int(batch_id))
    assert batch_ids == list(range(n_batches))
