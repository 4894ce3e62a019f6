"""Child process of the real pipeline's crash test (tests/test_cdc_real_crash.py): Spark's Kafka source on the
topics of PREFIX into DebeziumSink, at most MAX_OFFSETS offsets per micro-batch, until every message available at its
start is processed; the parent SIGKILLs it in the middle of micro-batches and starts it again from the same checkpoint.

    python tests/cdc_kafka_child.py BOOTSTRAP PREFIX BASE_PATH CHECKPOINT_DIR MAX_OFFSETS

The query itself is crash_harness.run_child_query; here are only its source and its sink.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from crash_harness import child_main, run_child_query  # noqa: E402
from hoodie_stream import DebeziumSink  # noqa: E402


def main(bootstrap, prefix, base, checkpoint, max_offsets):
    run_child_query(
        "hoodie-stream-cdc-kafka-child",
        lambda spark: (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribePattern", prefix + r"\..*")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", int(max_offsets))
            .load()
        ),
        lambda spark: DebeziumSink(base),
        checkpoint,
    )


if __name__ == "__main__":
    child_main(main, "BOOTSTRAP PREFIX BASE_PATH CHECKPOINT_DIR MAX_OFFSETS")
