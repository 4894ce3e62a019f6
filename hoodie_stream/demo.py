"""The local demo: a streaming query on local Spark writes generated CDC micro-batches through HoodieStreamSink,
then the table's commits and row count are printed."""

import json
import logging
import os
import random
import tempfile

from .format.hoodie_table import HoodieTable
from .format.views.summary import table_summary
from .local_spark import local_session_builder
from .storage import LocalStorage

CITIES = ["san_francisco", "sao_paulo", "chennai"]
SCHEMA = "id long, city string, ts long, fare double, _hoodie_is_deleted boolean"


def _generate(source, batches, per_batch, seed=1):
    """One JSON-lines file per micro-batch: inserts, updates (some moving city) and deletes of order ids."""
    rng = random.Random(seed)
    files = LocalStorage(source)
    for b in range(batches):
        name = f"part-{b:04d}.json"
        lines = []
        for _ in range(per_batch):
            key = rng.randrange(per_batch * 2)
            lines.append(
                json.dumps(
                    {
                        "id": key,
                        "city": rng.choice(CITIES),
                        "ts": b * 1000 + rng.randrange(1000),
                        "fare": round(rng.random() * 100, 2),
                        "_hoodie_is_deleted": b > 0 and rng.random() < 0.05,
                    }
                )
                + "\n"
            )
        files.write(name, "".join(lines).encode("utf-8"))
        # the file source takes files in modification-time order: one micro-batch per file, in order
        os.utime(files.local_file(name), (1_700_000_000 + b, 1_700_000_000 + b))


def _log_batches():
    """Show the sink's line per committed micro-batch (logger hoodie_stream, INFO) on stderr."""
    logger = logging.getLogger("hoodie_stream")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)


def run_demo(path=None, batches=5, per_batch=2000):
    from .streaming_sink.sink import HoodieStreamSink

    work = tempfile.mkdtemp(prefix="hoodie-stream-demo-")
    table_path = path or os.path.join(work, "orders")
    source = os.path.join(work, "source")
    print(f"demo table: {table_path}")
    print(f"demo source and checkpoint: {work} (temporary files left for you to look at; remove them when done)")
    _log_batches()
    _generate(source, batches, per_batch)
    spark = local_session_builder("local[2]", "hoodie-stream-demo").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        sink = HoodieStreamSink(
            table_path,
            {
                "hoodie.table.name": "orders",
                "hoodie.datasource.write.recordkey.field": "id",
                "hoodie.datasource.write.precombine.field": "ts",
                "hoodie.datasource.write.partitionpath.field": "city",
                "hoodie.datasource.write.hive_style_partitioning": "true",
            },
        )
        stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(source)
        query = (
            stream.writeStream.foreachBatch(sink)
            .option("checkpointLocation", os.path.join(work, "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        sink.close()  # lets a running compaction step finish before Spark stops
    finally:
        spark.stop()
    print(table_summary(table_path))
    print(f"rows: {HoodieTable(table_path).read().num_rows}  (table at {table_path})")
    left = "the table, its source and checkpoint" if path is None else "the source and checkpoint"
    print(f"{left} are left in {work}; remove them with: rm -r {work}")
    return table_path
