"""Routing rows to tasks: key groups to bucket-assign tasks in Flink's contiguous ranges; each file group to
exactly one write task, balanced by recent load; both delivered by Spark's hash partitioning of a tag (checked
against Spark itself and end to end through the sink's write tokens)."""

import os

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from hoodie_stream import HoodieStreamSink
from hoodie_stream.bucket_assign.small_files import owner_task, recent_write_commits
from hoodie_stream.bucket_assign.write_tasks import WritePlan, balance, recent_loads
from hoodie_stream.chain.columns import KEY
from hoodie_stream.chain.key_groups import (
    assign_task_expr,
    key_group_expr,
    operator_index,
)
from hoodie_stream.chain.task_tags import spark_hash_int, task_tags
from hoodie_stream.format.file_group.file_names import parse_log_file_name
from hoodie_stream.format.timeline.active_timeline import Timeline


def test_hash_matches_sparks_murmur3(spark):
    values = [0, 1, -1, 2, 42, 2**31 - 1, -(2**31), 123456789, -987654321] + list(range(3, 200, 7))
    rows = spark.createDataFrame([(v,) for v in values], "v int").select("v", F.hash("v").alias("h")).collect()
    assert {r.v: r.h for r in rows} == {v: spark_hash_int(v) for v in values}


def test_tags_land_on_their_partition(spark):
    for n in (1, 2, 3, 5, 16):
        tags = task_tags(n)
        assert len(set(tags)) == n
        df = spark.createDataFrame([(t,) for t in tags], "v int").repartition(n, "v")
        placed = {r.v: r.p for r in df.select("v", F.spark_partition_id().alias("p")).collect()}
        assert placed == {tag: task for task, tag in enumerate(tags)}, n


def test_key_groups_go_to_their_range_of_tasks(spark):
    for key_groups, n in ((128, 2), (128, 3), (7, 7), (10, 4)):
        # keys covering every key group, as the sink computes them
        df = spark.range(key_groups * 50).selectExpr(f"cast(id as string) as `{KEY}`")
        df = df.select(
            F.expr(key_group_expr(key_groups)).alias("kg"), F.expr(assign_task_expr(key_groups, n)).alias("tag")
        ).repartition(n, "tag")
        placed = {}
        for r in df.select("kg", F.spark_partition_id().alias("p")).collect():
            assert placed.setdefault(r.kg, r.p) == r.p, "a key group on two tasks"
        assert placed == {kg: kg * n // key_groups for kg in range(key_groups)}
        sizes = [list(placed.values()).count(t) for t in range(n)]
        assert max(sizes) - min(sizes) <= 1 and operator_index(key_groups - 1, key_groups, n) == n - 1


def test_key_groups_option_is_bounded(tmp_path):
    import pytest

    from hoodie_stream.errors import HoodieConfigError

    base = {"hoodie.table.name": "t", "hoodie.datasource.write.recordkey.field": "id"}
    assert HoodieStreamSink(str(tmp_path / "a"), {**base, "hoodie.stream.index.key.groups": "32768"})
    with pytest.raises(HoodieConfigError, match="hoodie.stream.index.key.groups"):
        HoodieStreamSink(str(tmp_path / "b"), {**base, "hoodie.stream.index.key.groups": "32769"})


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.text("abcdef0123", min_size=1, max_size=6), st.integers(1, 10**6), max_size=40),
    st.integers(1, 8),
)
def test_balance_is_a_greedy_schedule(loads, n):
    plan = balance(loads, n)
    assert set(plan) == set(loads) and all(0 <= t < n for t in plan.values())
    per_task = [0] * n
    for f, t in plan.items():
        per_task[t] += loads[f]
    if loads:  # the greedy bound: no task above the average by more than the largest file group
        assert max(per_task) <= sum(loads.values()) / n + max(loads.values())
    # a plain model of the greedy rule: largest first, to the least loaded task (lowest index on ties)
    model, totals = {}, [0] * n
    for f in sorted(loads, key=lambda f: (-loads[f], f)):
        t = min(range(n), key=lambda i: (totals[i], i))
        model[f] = t
        totals[t] += loads[f]
    assert plan == model


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text("abcdef-0123", min_size=1, max_size=8), min_size=1, max_size=30), st.integers(1, 6))
def test_tags_follow_the_plan_and_the_hash_for_unknown_groups(ids, n):
    import pyarrow as pa

    known = {f: i + 1 for i, f in enumerate(ids[: len(ids) // 2])}
    plan = WritePlan(n, known)
    tags = plan.tags(pa.array(ids, pa.string())).to_pylist()
    table = task_tags(n)
    for f, tag in zip(ids, tags):
        task = balance(known, n)[f] if f in known else owner_task(f, n)
        assert tag == table[task]


def test_sink_writes_each_file_group_from_its_planned_task(spark, tmp_path):
    """Groups of unequal size (capacity 10k records, ~15k keys per assign task): an update of every key is
    written by the tasks the plan names (the write token's task id), and no task writes more than half the batch
    plus the largest group."""
    base = str(tmp_path / "t")
    sink = HoodieStreamSink(
        base,
        {
            "hoodie.table.name": "write_tasks",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.parquet.max.file.size": str(10_000 * 1024),
            "compaction.schedule.enabled": "false",
        },
    )

    def batch(ts):
        return (
            spark.range(0, 30_000, numPartitions=2)
            .withColumn("ts", F.lit(ts).cast("long"))
            .withColumn("v", F.col("id") * ts)
        )

    sink(batch(1), 0)
    sink(batch(2), 1)
    timeline = Timeline(base)
    plan = WritePlan(2, recent_loads(recent_write_commits(timeline)))
    sink(batch(3), 2)
    timeline = Timeline(base)
    stats = timeline.read_commit_metadata(sink.last_result.instant).all_write_stats()
    assert len(stats) >= 3, "the table needs several file groups"
    per_task = [0, 0]
    for s in stats:
        task = int(parse_log_file_name(os.path.basename(s.path)).write_token.split("-")[0])
        assert task == plan.task_of(s.file_id), s.path
        per_task[task] += s.num_writes
    assert sum(per_task) == 30_000
    assert max(per_task) <= 15_000 + max(s.num_writes for s in stats)
