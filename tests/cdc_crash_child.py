"""Child process of the CDC crash test (tests/test_debezium_crash.py): a streaming query of Kafka-source rows read
from files into DebeziumSink, until every input file is processed; the parent SIGKILLs it between two tables'
commits and starts it again from the same checkpoint.

    python tests/cdc_crash_child.py SOURCE_DIR BASE_PATH CHECKPOINT_DIR TABLES_JSON
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from conftest import spark_builder  # noqa: E402
from debezium_model import KAFKA_DDL  # noqa: E402
from hoodie_stream import DebeziumSink  # noqa: E402


def main(source, base, checkpoint, tables):
    spark = (
        spark_builder(app="hoodie-stream-cdc-crash-child")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    storage_options = json.loads(os.environ.get("HOODIE_TEST_STORAGE_OPTIONS") or "{}") or None
    sink = DebeziumSink(
        base, {"compaction.schedule.enabled": "false"}, tables=json.loads(tables), storage_options=storage_options
    )
    stream = spark.readStream.schema(KAFKA_DDL).option("maxFilesPerTrigger", 1).json(source)
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
    if len(sys.argv) != 5:
        sys.exit("usage: cdc_crash_child.py SOURCE_DIR BASE_PATH CHECKPOINT_DIR TABLES_JSON")
    main(*sys.argv[1:])
