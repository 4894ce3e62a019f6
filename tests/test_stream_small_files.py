"""Small files: 60 micro-batches of 1,000 new keys each leave at most ceil(table bytes / max file size) + number
of tasks file groups per partition (inserts are packed into small file groups before new ones are opened)."""

import math
import os

from pyspark.sql import functions as F

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.format.file_group.fs_view import FileSystemView

MAX_FILE = 512 * 1024
BATCHES = 30
PER_BATCH = 1000


def test_inserts_are_packed_into_small_file_groups(spark, tmp_path):
    base = str(tmp_path / "t")
    tasks = spark.sparkContext.defaultParallelism
    sink = HoodieStreamSink(
        base,
        {
            "hoodie.table.name": "small_files",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.datasource.write.partitionpath.field": "part",
            "hoodie.parquet.max.file.size": str(MAX_FILE),
            "compaction.delta_commits": "20",
        },
    )
    for b in range(BATCHES):
        df = (
            spark.range(b * PER_BATCH, (b + 1) * PER_BATCH, numPartitions=2)
            .withColumn("part", F.when(F.col("id") % 3 == 0, "a").otherwise("b"))
            .withColumn("ts", F.lit(b).cast("long"))
            .withColumn("payload", F.sha2(F.col("id").cast("string"), 256))
        )
        sink(df, b)
    table = HoodieTable(base)
    assert table.read().num_rows == BATCHES * PER_BATCH
    by_partition = {}
    for fs in FileSystemView(base).latest_slices():
        size = fs.file_size
        groups, total = by_partition.get(fs.partition, (0, 0))
        by_partition[fs.partition] = (groups + 1, total + size)
    assert set(by_partition) == {"a", "b"}
    for partition, (groups, total) in by_partition.items():
        bound = math.ceil(total / MAX_FILE) + tasks
        assert groups <= bound, (partition, groups, total, bound)
        assert groups > 1, "the max file size must have forced more than one file group"
    # every batch after the first packs into existing groups: far fewer groups than batches
    assert sum(g for g, _ in by_partition.values()) < BATCHES
    assert len(os.listdir(os.path.join(base, "a"))) > 0
