"""Child process of the streaming-read crash test (tests/test_spark_stream_read.py): reads BRONZE with
readStream.format("hoodie") (one commit per micro-batch) and writes SILVER through HoodieStreamSink until every
commit of BRONZE is read, then exits 0. The parent SIGKILLs it mid-run and starts it again from the checkpoint.

    python tests/spark_read_crash_child.py BRONZE SILVER CHECKPOINT_DIR MODE

MODE `rows`: the records of each commit; `cdc`: the query reads BRONZE's flat changelog and writes `changelog_rows` of each micro-batch.

The query itself is crash_harness.run_child_query; here are only its source and its sink.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from crash_harness import child_main, run_child_query  # noqa: E402
from hoodie_stream import HoodieStreamSink  # noqa: E402
from hoodie_stream.spark import changelog_rows, register  # noqa: E402
from stream_model import COLUMNS, OPTIONS  # noqa: E402

CDC = {
    "hoodie.datasource.query.type": "incremental",
    "hoodie.datasource.query.incremental.format": "cdc",
    "hoodie.stream.read.cdc.flat": "true",
}


def bronze_commits(bronze, cdc):
    """The source: BRONZE's commits, one per micro-batch, as the model's columns (its changelog with `cdc`)."""

    def source(spark):
        register(spark)
        reader = spark.readStream.format("hoodie").option("hoodie.datasource.read.streaming.max.commits", "1")
        if cdc:
            return reader.options(**CDC).load(bronze)
        return reader.load(bronze).select(*COLUMNS)

    return source


def silver_sink(silver, cdc):
    def sink(spark):
        inner = HoodieStreamSink(silver, dict(OPTIONS, **{"hoodie.table.name": "silver"}))
        if not cdc:
            return inner

        class ChangelogSink:
            def __call__(self, df, batch_id):
                inner(changelog_rows(df), batch_id)

            def close(self):
                inner.close()

        return ChangelogSink()

    return sink


def main(bronze, silver, checkpoint, mode):
    run_child_query(
        "hoodie-stream-read-crash-child",
        bronze_commits(bronze, mode == "cdc"),
        silver_sink(silver, mode == "cdc"),
        checkpoint,
    )


if __name__ == "__main__":
    child_main(main, "BRONZE SILVER CHECKPOINT_DIR MODE")
