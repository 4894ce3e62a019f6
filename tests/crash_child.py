"""Child process of the crash test (tests/test_stream_crash.py): runs the streaming query until every input file is
processed, then exits 0. The parent SIGKILLs it at chosen moments and starts it again from the same checkpoint.

    python tests/crash_child.py SOURCE_DIR TABLE_URI CHECKPOINT_DIR

The table's storage options (a table on the S3 test server) come as JSON in HOODIE_TEST_STORAGE_OPTIONS. Nothing
here knows about the crashes: no hooks, no pauses; the parent watches the table from outside.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from conftest import spark_builder  # noqa: E402
from hoodie_stream import HoodieStreamSink  # noqa: E402
from stream_model import OPTIONS, SCHEMA_DDL  # noqa: E402


def main(source, base, checkpoint):
    # The child starts a dozen times: a JVM tuned for start-up (C1 only, serial GC) and no adaptive re-planning
    # keep each start short; neither changes what is written.
    spark = (
        spark_builder(app="hoodie-stream-crash-child")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    stream = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(source)
    storage_options = json.loads(os.environ.get("HOODIE_TEST_STORAGE_OPTIONS") or "{}") or None
    query = (
        stream.writeStream.foreachBatch(HoodieStreamSink(base, OPTIONS, storage_options=storage_options))
        .option("checkpointLocation", checkpoint)
        .start()
    )
    print(f"query {query.id} run {query.runId} started", flush=True)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    print(f"query {query.id} done", flush=True)
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: crash_child.py SOURCE_DIR TABLE_URI CHECKPOINT_DIR")
    main(*sys.argv[1:])
