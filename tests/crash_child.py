"""Child process of the crash test (tests/test_stream_crash.py): runs the streaming query until every input file is
processed, then exits 0. The parent SIGKILLs it at chosen moments and starts it again from the same checkpoint.

    python tests/crash_child.py SOURCE_DIR TABLE_URI CHECKPOINT_DIR

The table's storage options (a table on the S3 test server) come as JSON in HOODIE_TEST_STORAGE_OPTIONS, more sink
options as JSON in HOODIE_TEST_SINK_OPTIONS. The query itself is crash_harness.run_child_query; here are only its
source and its sink.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from crash_harness import child_main, child_storage_options, json_files, run_child_query  # noqa: E402
from hoodie_stream import HoodieStreamSink  # noqa: E402
from stream_model import OPTIONS, SCHEMA_DDL  # noqa: E402


def main(source, base, checkpoint):
    run_child_query(
        "hoodie-stream-crash-child",
        json_files(SCHEMA_DDL, source),
        lambda spark: HoodieStreamSink(
            base,
            {**OPTIONS, **json.loads(os.environ.get("HOODIE_TEST_SINK_OPTIONS") or "{}")},
            storage_options=child_storage_options(),
        ),
        checkpoint,
    )


if __name__ == "__main__":
    child_main(main, "SOURCE_DIR TABLE_URI CHECKPOINT_DIR")
