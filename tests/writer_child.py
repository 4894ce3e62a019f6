"""A writer in a process of its own for the two-writer tests (tests/test_two_writers.py): a streaming query of the
JSON batch files in a source directory through HoodieStreamSink into a table (on the S3 server), processing whatever
arrives until a stop file appears.

    python tests/writer_child.py SPEC_JSON

SPEC_JSON: {"source", "table", "checkpoint", "stop": paths; "options", "storage_options": the sink's; "host":
optional, the host name this writer reports (a writer on another machine, whose lease is taken over only once it
expired)}. Prints `started <query id>` once the query runs; exits 0 after the stop file appeared, 3 when the query
failed (printing `error: <message>`). The parent SIGKILLs it at will; nothing here knows about that.
"""

import json
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]


def main(spec):
    if spec.get("host"):
        socket.gethostname = lambda: spec["host"]  # as a writer on that machine names itself in the lease

    from conftest import spark_builder
    from hoodie_stream import HoodieStreamSink
    from stream_model import SCHEMA_DDL

    spark = (
        spark_builder(app="hoodie-stream-writer-child")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sink = HoodieStreamSink(spec["table"], spec["options"], storage_options=spec["storage_options"])
    stream = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(spec["source"])
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", spec["checkpoint"]).start()
    print(f"started {query.id}", flush=True)
    try:
        while not os.path.exists(spec["stop"]):
            query.processAllAvailable()
            time.sleep(0.05)
    except Exception as exc:
        print(f"error: {exc}", flush=True)
        return 3
    finally:
        query.stop()
        spark.stop()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: writer_child.py SPEC_JSON")
    sys.exit(main(json.loads(sys.argv[1])))
