"""Compaction in short jobs: a query that runs once (trigger availableNow) compacts inline, as Hudi advises for
such jobs, so its end leaves no plan pending under which later logs pile up (hudi-rs, like Hudi's readers without
log merging under a pending plan, would miss their rows), and the next job's sink runs a plan an earlier job left
first. The model is the plain-Python TableModel; hudi-rs reads the table after every job."""

import pytest

from hoodie_stream import HoodieStreamSink
from hoodie_stream.compaction.plan import pending_plans, schedule_compaction
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.options import parse_compaction_options
from oracle import rs_read
from stream_model import OPTIONS, SCHEMA_DDL, TableModel, generate_batches, table_rows, write_batch_file

pytestmark = pytest.mark.spark

COMPACTING = {**OPTIONS, "compaction.schedule.enabled": "true", "compaction.delta_commits": "3"}


def _run_once(spark, base, source, chk, options=COMPACTING):
    sink = HoodieStreamSink(base, options)
    stream = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(source)
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", chk).trigger(availableNow=True).start()
    query.awaitTermination()
    return sink


def _compactions(base):
    return [i for i in Timeline(base).completed(["commit"])]


def test_twelve_micro_batches_of_one_available_now_job_complete_their_compactions(spark, tmp_path):
    base, source, chk = str(tmp_path / "t"), str(tmp_path / "in"), str(tmp_path / "chk")
    batches = generate_batches(12, seed=31, keys_per_batch=30, key_space=90, monotonic=True)
    model = TableModel()
    for i, events in enumerate(batches):
        write_batch_file(source, i, events)
        model.apply_batch(events)
    _run_once(spark, base, source, chk)
    # no sink.close(): what the job leaves is what a script ending with awaitTermination() leaves
    assert pending_plans(Timeline(base)) == {}
    assert len(_compactions(base)) >= 3, "a plan every 3 delta commits, each run before the job ended"
    assert table_rows(rs_read(base)) == model.rows()


def test_one_row_available_now_jobs_leave_no_plan_pending_and_hudi_rs_reads_every_row(spark, tmp_path):
    base, source, chk = str(tmp_path / "t"), str(tmp_path / "in"), str(tmp_path / "chk")
    model = TableModel()
    for job in range(7):
        event = {"id": job % 3, "city": "chennai", "ts": job, "v": f"job{job}", "_hoodie_is_deleted": False}
        write_batch_file(source, job, [event])
        model.apply_batch([event])
        _run_once(spark, base, source, chk)
        assert pending_plans(Timeline(base)) == {}, f"after job {job}"
        assert table_rows(rs_read(base)) == model.rows(), f"hudi-rs after job {job}"
    assert len(_compactions(base)) >= 2


def test_the_next_job_runs_a_plan_an_earlier_job_left_first(spark, tmp_path):
    base, source, chk = str(tmp_path / "t"), str(tmp_path / "in"), str(tmp_path / "chk")
    batches = generate_batches(4, seed=32, keys_per_batch=20, key_space=40, monotonic=True)
    model = TableModel()
    for i, events in enumerate(batches[:3]):
        write_batch_file(source, i, events)
        model.apply_batch(events)
    # an earlier job whose compaction did not run (only scheduled): the plan stays requested
    _run_once(spark, base, source, chk, {**COMPACTING, "compaction.delta_commits": "99"})
    left = schedule_compaction(base, Timeline(base), parse_compaction_options(), force=True)
    assert left in pending_plans(Timeline(base))
    write_batch_file(source, 3, batches[3])
    model.apply_batch(batches[3])
    _run_once(spark, base, source, chk)
    assert pending_plans(Timeline(base)) == {}
    assert left in {i.timestamp for i in _compactions(base)}
    assert table_rows(rs_read(base)) == model.rows()
