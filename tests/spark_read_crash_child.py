"""Child process of the streaming-read crash test (tests/test_spark_stream_read.py): reads BRONZE with
readStream.format("hoodie") (one commit per micro-batch) and writes SILVER through HoodieStreamSink until every
commit of BRONZE is read, then exits 0. The parent SIGKILLs it mid-run and starts it again from the checkpoint.

    python tests/spark_read_crash_child.py BRONZE SILVER CHECKPOINT_DIR

The query itself is crash_harness.run_child_query; here are only its source and its sink.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from crash_harness import child_main, run_child_query  # noqa: E402
from hoodie_stream import HoodieStreamSink  # noqa: E402
from hoodie_stream.spark import register  # noqa: E402
from stream_model import COLUMNS, OPTIONS  # noqa: E402


def bronze_commits(bronze):
    """The source: BRONZE's commits, one per micro-batch, as the model's columns."""

    def source(spark):
        register(spark)
        return (
            spark.readStream.format("hoodie")
            .option("hoodie.datasource.read.streaming.max.commits", "1")
            .load(bronze)
            .select(*COLUMNS)
        )

    return source


def main(bronze, silver, checkpoint):
    run_child_query(
        "hoodie-stream-read-crash-child",
        bronze_commits(bronze),
        lambda spark: HoodieStreamSink(silver, dict(OPTIONS, **{"hoodie.table.name": "silver"})),
        checkpoint,
    )


if __name__ == "__main__":
    child_main(main, "BRONZE SILVER CHECKPOINT_DIR")
