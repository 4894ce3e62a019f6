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
