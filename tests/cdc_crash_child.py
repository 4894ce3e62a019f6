"""Child process of the CDC crash test (tests/test_debezium_crash.py): a streaming query of Kafka-source rows read
from files into DebeziumSink, until every input file is processed; the parent SIGKILLs it between two tables'
commits and starts it again from the same checkpoint.

    python tests/cdc_crash_child.py SOURCE_DIR BASE_PATH CHECKPOINT_DIR TABLES_JSON

The query itself is crash_harness.run_child_query; here are only its source and its sink.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from crash_harness import child_main, child_storage_options, json_files, run_child_query  # noqa: E402
from debezium_model import KAFKA_DDL  # noqa: E402
from hoodie_stream import DebeziumSink  # noqa: E402


def main(source, base, checkpoint, tables):
    run_child_query(
        "hoodie-stream-cdc-crash-child",
        json_files(KAFKA_DDL, source),
        lambda spark: DebeziumSink(
            base,
            {"compaction.schedule.enabled": "false"},
            tables=json.loads(tables),
            storage_options=child_storage_options(),
        ),
        checkpoint,
    )


if __name__ == "__main__":
    child_main(main, "SOURCE_DIR BASE_PATH CHECKPOINT_DIR TABLES_JSON")
