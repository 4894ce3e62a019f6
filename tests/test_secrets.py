"""No secret leaves the storage options: after a streaming query with compaction and cleaning on the S3 test server,
the secret key and the session token appear in no object of the table (commit metadata, plans, hoodie.properties,
the lease, the index state, data files), in no log record of the run (the project's at every level, others' from INFO), and in neither the sink's repr
nor the repr of the sink as an executor unpickles it."""

from __future__ import annotations

import logging
import pickle

from s3_server import SECRET_KEY
from stream_model import OPTIONS, SCHEMA_DDL, TableModel, generate_batches, table_rows, write_batch_file

SESSION_TOKEN = "session-token-secret-9f8e7d6c5b4a"


def test_secrets_appear_in_no_file_log_or_repr(spark, s3_server, tmp_path, caplog):
    from locations import Location

    loc = Location(s3_server.new_table_uri("secrets"), s3_server.options(aws_session_token=SESSION_TOKEN), "s3")
    secrets = [SECRET_KEY, SESSION_TOKEN]
    options = dict(
        OPTIONS,
        **{
            "compaction.schedule.enabled": "true",
            "compaction.delta_commits": "2",
            "compaction.async.enabled": "false",
            "clean.retain_commits": "1",
        },
    )
    sink = loc.sink(options)
    source, chk = str(tmp_path / "in"), str(tmp_path / "chk")
    batches = generate_batches(5, seed=41)
    model = TableModel()
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="hoodie_stream")
    for i, events in enumerate(batches):
        write_batch_file(source, i, events)
        model.apply_batch(events)
    stream = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(source)
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", chk).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
        sink.close()
    assert table_rows(loc.rs_read()) == model.rows()
    timeline = loc.table().timeline
    assert timeline.completed(["commit"]) and timeline.completed(["clean"]), "compaction and cleaning ran"

    objects = loc.storage.list("", recursive=True)
    assert any(info.path == ".hoodie/hoodie.properties" for info in objects)
    assert any(info.path.startswith(".hoodie/.locks/") for info in objects)
    for info in objects:
        data = loc.storage.read(info.path)
        for secret in secrets:
            assert secret.encode() not in data, f"{info.path} holds a secret"
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert logged, "the run logged nothing at DEBUG: the check would prove nothing"
    for secret in secrets:
        assert secret not in logged
        assert secret not in repr(sink) and secret not in str(sink)
        restored = pickle.loads(pickle.dumps(sink))
        assert secret not in repr(restored) and secret not in repr(restored.storage)
        assert restored.storage.options["aws_session_token"] == SESSION_TOKEN  # what executors need travels
