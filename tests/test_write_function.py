"""The write function's buffers and flush policy against a plain-Python model of Hudi's Flink StreamWriteFunction.

The model handles one record at a time, as Flink does: the record is buffered in its bucket, then the bucket is
flushed if its size passed `write.batch.size`, or else the largest bucket if the task's total passed
`write.task.max.size`; whatever is left is flushed at the end. The writer handles whole Arrow batches (a run of
one bucket at a time, cut where a limit is passed) and must flush exactly the same buckets with exactly the
same records, in the same order and for the same causes. Record sizes are made deterministic (every record
measured, its size given by a column), so the model needs no sampling.
"""

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hoodie_stream.chain.columns import FILE_ID, PARTITION
from hoodie_stream.chain.stages import BatchContext, WriteSpec
from hoodie_stream.storage import storage_for
from hoodie_stream.streaming_sink import write_function as wf

FILE_IDS = ["f-a", "f-b", "f-c", "f-d"]


def model_flushes(batches, batch_limit, task_limit):
    """[(cause, file id, record ids)] as Flink's writer flushes them. Within a micro-batch's input batch the
    writer sees records grouped by file id (a stable sort), so the model takes them in that order too."""
    buckets, sizes, events = {}, {}, []
    total = 0

    def flush(fid, cause):
        nonlocal total
        total -= sizes.pop(fid)
        events.append((cause, fid, buckets.pop(fid)))

    for batch in batches:
        for rid, fid, size in sorted(batch, key=lambda r: r[1]):
            if fid not in buckets:
                buckets[fid], sizes[fid] = [], 0
            buckets[fid].append(rid)
            sizes[fid] += size
            total += size
            if sizes[fid] > batch_limit:
                flush(fid, "bucket")
            elif total > task_limit:
                flush(max(sizes, key=sizes.get), "task")
    for fid in sorted(buckets):
        flush(fid, "end")
    return events


def writer_flushes(batches, batch_limit, task_limit):
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _writer_flushes(monkeypatch, batches, batch_limit, task_limit)


def _writer_flushes(monkeypatch, batches, batch_limit, task_limit):
    monkeypatch.setattr(wf, "SAMPLE_RATE", 1.0)  # every record measured ...
    monkeypatch.setattr(wf, "_row_size", lambda table, i: table["size"][i].as_py())  # ... as its size column says
    events, causes = [], []
    original_flush = wf.BufferedWriter.flush

    def flush(self, file_id, cause):
        causes.append(cause)
        return original_flush(self, file_id, cause)

    def append(self, file_id, bucket):  # capture the flushed rows instead of writing a log file
        events.append((file_id, pa.concat_tables(bucket.tables)["id"].to_pylist()))

    monkeypatch.setattr(wf.BufferedWriter, "flush", flush)
    monkeypatch.setattr(wf.BufferedWriter, "_append", append)
    context = BatchContext(storage_for("/unused"), "20250101000000000", "upsert", None, ("id", "size"))
    fn = wf.StreamWriteFunction(
        context, WriteSpec(avro_schema=None, batch_size_bytes=batch_limit, task_max_bytes=task_limit)
    )
    writer = wf.BufferedWriter(fn, "0-0-0", 0)
    peak_allowed = task_limit + max((s for b in batches for _, _, s in b), default=0)
    for batch in batches:
        ids, fids, sizes = zip(*batch) if batch else ((), (), ())
        writer.add(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "size": pa.array(sizes, pa.int64()),
                    PARTITION: pa.array([""] * len(ids), pa.string()),
                    FILE_ID: pa.array(fids, pa.string()),
                }
            )
        )
        assert writer.total <= task_limit
    writer.flush_all()
    assert writer.peak_buffered <= peak_allowed
    assert sum(writer.flushes.values()) == len(events)
    return [(c, fid, rows) for c, (fid, rows) in zip(causes, events)]


@st.composite
def micro_batch(draw):
    """Input batches of (record id, file id, size) with unique record ids."""
    batches, next_id = [], 0
    for n in draw(st.lists(st.integers(0, 40), min_size=1, max_size=5)):
        batch = []
        for _ in range(n):
            batch.append((next_id, draw(st.sampled_from(FILE_IDS)), draw(st.integers(1, 60))))
            next_id += 1
        batches.append(batch)
    return batches


@settings(max_examples=300, deadline=None)
@given(micro_batch(), st.integers(10, 300), st.integers(10, 600))
def test_flushes_match_flinks_per_record_policy(batches, batch_limit, task_limit):
    got = writer_flushes(batches, batch_limit, task_limit)
    assert got == model_flushes(batches, batch_limit, task_limit)
    flushed = sorted(r for _, _, rows in got for r in rows)
    assert flushed == [r for b in batches for r, _, _ in b]  # every record flushed once


def test_both_flush_causes_fire():
    """A bucket passing write.batch.size is flushed with the record that passed it; the task's total passing
    write.task.max.size flushes the largest bucket."""
    batch = [(i, FILE_IDS[i % 2], 10) for i in range(10)]  # two buckets of 10-byte records, alternating
    got = writer_flushes([batch], 35, 1000)
    assert got == [
        ("bucket", "f-a", [0, 2, 4, 6]),
        ("bucket", "f-b", [1, 3, 5, 7]),
        ("end", "f-a", [8]),
        ("end", "f-b", [9]),
    ]
    got = writer_flushes([batch[:6], batch[6:]], 1000, 45)
    assert got == [
        ("task", "f-a", [0, 2, 4]),
        ("task", "f-b", [1, 3, 5]),
        ("end", "f-a", [6, 8]),
        ("end", "f-b", [7, 9]),
    ]


def test_a_write_task_outliving_its_rolled_back_instant_removes_its_log_files(tmp_path):
    """The driver rolled the instant back while the task ran (Spark gave up on the task, its Python worker went on):
    the task removes the log files it wrote and their markers, and says why. While the instant is pending its files
    stay for the commit."""
    from hoodie_stream.chain.columns import KEY, KIND, SEQ, RecordKind
    from hoodie_stream.errors import TaskFailure
    from hoodie_stream.format.write.writer import HoodieWriter

    data = pa.schema([("id", pa.int64()), ("v", pa.string())])
    writer = HoodieWriter.create(str(tmp_path / "t"), table_name="t", record_key_fields=["id"], schema=data)

    def run(rolled_back):
        txn = writer.start()
        context = BatchContext(writer.storage, txn.instant, "upsert", None, ("id", "v"))
        fn = wf.StreamWriteFunction(
            context, WriteSpec(avro_schema=writer.avro_schema(), batch_size_bytes=1, task_max_bytes=1 << 30)
        )
        rows = pa.record_batch(
            {
                "id": pa.array([1, 2, 3], pa.int64()),
                "v": pa.array(["a", "b", "c"]),
                KEY: pa.array(["1", "2", "3"]),
                PARTITION: pa.array(["", "", ""]),
                FILE_ID: pa.array(["f-a", "f-a", "f-b"]),
                KIND: pa.array([RecordKind.INSERT] * 3, pa.int8()),
                SEQ: pa.array([0, 1, 2], pa.int64()),
            }
        )

        def batches():
            yield rows
            if rolled_back:
                txn.rollback()  # the driver, between two of the task's input batches

        written = lambda: sorted(  # noqa: E731
            f.path for f in writer.storage.list("", recursive=True) if txn.instant in f.path
        )
        if rolled_back:
            with pytest.raises(TaskFailure, match="HoodieTimelineError.*no longer pending"):
                list(fn(batches()))
            assert [p for p in written() if "rollback" not in p] == []
        else:
            out = list(fn(batches()))
            # a bucket flushed past write.batch.size (1 byte): a log file per record, each with its marker
            assert len([p for p in written() if not p.startswith(".hoodie/")]) == 3 and len(out) == 1
            assert len([p for p in written() if p.startswith(".hoodie/.temp/")]) == 3
            txn.rollback()

    run(rolled_back=False)
    run(rolled_back=True)
