"""Child process of the streaming-read crash test (tests/test_spark_stream_read.py): reads BRONZE with
readStream.format("hoodie") (one commit per micro-batch) and writes SILVER through HoodieStreamSink until every
commit of BRONZE is read, then exits 0. The parent SIGKILLs it mid-run and starts it again from the checkpoint.

    python tests/spark_read_crash_child.py BRONZE SILVER CHECKPOINT_DIR
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from conftest import spark_builder  # noqa: E402
from hoodie_stream import HoodieStreamSink  # noqa: E402
from hoodie_stream.spark import register  # noqa: E402
from stream_model import COLUMNS, OPTIONS  # noqa: E402


def main(bronze, silver, checkpoint):
    spark = (
        spark_builder(app="hoodie-stream-read-crash-child")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    stream = (
        spark.readStream.format("hoodie")
        .option("hoodie.datasource.read.streaming.max.commits", "1")
        .load(bronze)
        .select(*COLUMNS)
    )
    sink = HoodieStreamSink(silver, dict(OPTIONS, **{"hoodie.table.name": "silver"}))
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start()
    print(f"query {query.id} run {query.runId} started", flush=True)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
        sink.close()
    print(f"query {query.id} done", flush=True)
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: spark_read_crash_child.py BRONZE SILVER CHECKPOINT_DIR")
    main(*sys.argv[1:])
