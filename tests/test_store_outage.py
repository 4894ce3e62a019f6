"""The object store cut off in the middle of a micro-batch (tests/tcp_proxy.py between the sink and the S3 server),
at chosen moments: as the driver starts the batch's instant, as an executor sends the first request of the batch's
log files, and once that request reached the server but before its answer came back. Each time the batch fails with
an error naming the table and the store's endpoint and no secret, nothing of it is visible to readers (which reach
the server directly), and once the network is back the query restarted from its checkpoint writes the table the
model expects. (Every kind of request cut at every moment, without Spark: test_store_cuts.py.)"""

from __future__ import annotations

import logging
import time

import pytest
from pyspark.errors import StreamingQueryException

from hoodie_stream import HoodieStreamSink
from hoodie_stream.storage import storage_for
from s3_server import SECRET_KEY
from s3_stream_helpers import (
    assert_only_committed_files,
    assert_table_is,
    completed_batches,
    identifier,
    pending_instants,
    sink_options,
    start_query,
)
from stream_model import TableModel, generate_batches, write_batch_file
from tcp_proxy import TcpProxy

# requests through the cut proxy fail within a few seconds: one retry, connections refused at once
QUICK_FAILURE = {"max_retries": "1", "retry_timeout": "3", "connect_timeout": "1s", "timeout": "10s"}


# the moment the network goes: (what the request cut holds, bytes of its answer let through; None: it never arrives)
CUT_MOMENTS = {
    "as the instant is started": (b".deltacommit.inflight ", None),  # on the driver
    "as the first log file request is sent": (b".log.", None),  # in a write task (its marker or the file)
    "before the answer to the first log file request": (b".log.", 0),  # the server did it; the task never hears
}


def pending_delta_commits(storage):
    """{instant: the names of its timeline files} of the delta commits that are not completed."""
    names = {info.path.rpartition("/")[2] for info in storage.list(".hoodie")}
    done = {n.split(".")[0] for n in names if n.endswith(".deltacommit")}
    out: dict[str, set[str]] = {}
    for n in names:
        if ".deltacommit." in n and n.split(".")[0] not in done:
            out.setdefault(n.split(".")[0], set()).add(n)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("moment", list(CUT_MOMENTS))
def test_a_store_cut_off_mid_batch_fails_it_invisibly_and_a_restart_completes_the_table(
    spark, s3_server, tmp_path, caplog, capfd, moment
):
    uri = s3_server.new_table_uri("outage")
    direct = s3_server.options()
    storage = storage_for(uri, direct)  # the test's view of the table: the server itself, never cut off
    batches = generate_batches(3, seed=13, keys_per_batch=12, key_space=30)
    source, checkpoint = str(tmp_path / "in"), str(tmp_path / "chk")
    model = TableModel()
    caplog.set_level(logging.DEBUG)
    with TcpProxy(s3_server.host, s3_server.port) as proxy:
        through_proxy = s3_server.options(aws_endpoint_url=proxy.endpoint, **QUICK_FAILURE)
        write_batch_file(source, 0, batches[0])
        query = start_query(
            spark, HoodieStreamSink(uri, sink_options(), storage_options=through_proxy), source, checkpoint
        )
        try:
            query.processAllAvailable()
            model.apply_batch(batches[0])
            proxy.cut_on(*CUT_MOMENTS[moment])
            write_batch_file(source, 1, batches[1])
            started = time.monotonic()
            with pytest.raises(StreamingQueryException):
                query.awaitTermination(120)
        finally:
            query.stop()
        failed_after = time.monotonic() - started
        assert proxy.triggered.is_set(), "the network was cut at that moment"
        (cut_instant, cut_files), *_ = pending_delta_commits(storage).items()
        error = query.exception()
        assert error is not None
        message = str(error)
        assert "HoodieStorageError" in message and f"{uri}/" in message and " failed: " in message, message
        assert ", in abort" not in message, "the batch's own error, not that of the rollback that failed after it"
        assert f"endpoint {proxy.endpoint}" in message, "the endpoint that could not be reached is named"
        assert SECRET_KEY not in message
        assert failed_after < 60

        # nothing of batch 1 is visible: readers see batch 0 only, its delta commit is not completed
        assert [entries for _ts, entries in completed_batches(uri, direct)] == [{identifier(query.id): 0}]
        assert cut_instant + ".deltacommit" not in {info.path.rpartition("/")[2] for info in storage.list(".hoodie")}
        assert_table_is(uri, direct, model.rows(), "while the store is cut off: batch 0 only")

        # the network is back: the query restarted from its checkpoint rolls batch 1 back and writes it again
        proxy.restore()
        write_batch_file(source, 2, batches[2])
        restarted = start_query(
            spark, HoodieStreamSink(uri, sink_options(), storage_options=through_proxy), source, checkpoint
        )
        try:
            restarted.processAllAvailable()
        finally:
            restarted.stop()
        assert restarted.id == query.id and restarted.exception() is None
    for events in batches[1:]:
        model.apply_batch(events)
    committed = completed_batches(uri, direct)
    assert [entries[identifier(query.id)] for _ts, entries in committed] == [0, 1, 2]
    names = [info.path.rpartition("/")[2] for info in storage.list(".hoodie")]
    if cut_instant + ".deltacommit.inflight" in cut_files:
        assert any(n.endswith(".rollback") for n in names), "the cut-off batch's instant was rolled back"
    assert cut_instant + ".deltacommit" not in names
    assert_table_is(uri, direct, model.rows(), "after the restart")
    assert pending_instants(uri, direct) == []
    assert_only_committed_files(uri, direct)
    out, err = capfd.readouterr()
    for text in (caplog.text, out, err):
        assert SECRET_KEY not in text
