"""chain/arrow_batches.py: the Arrow batches Spark hands a mapInArrow function inside `batches()`, counted by the
function itself, and the session's settings afterwards."""

import threading

import pyarrow as pa
import pytest

from hoodie_stream.chain import arrow_batches
from hoodie_stream.chain.arrow_batches import BYTES, ROWS


def batch_sizes(spark, rows):
    """The sizes of the record batches one task's mapInArrow function receives for `rows` rows."""

    def sizes(batches):
        for b in batches:
            yield pa.record_batch([pa.array([b.num_rows], pa.int64())], names=["n"])

    return [r["n"] for r in spark.range(rows).repartition(1).mapInArrow(sizes, "n long").collect()]


@pytest.fixture
def session(spark):
    saved = {name: spark.conf.get(name, None) for name in (ROWS, BYTES)}
    for name in saved:
        spark.conf.unset(name)
    yield spark
    for name, value in saved.items():
        spark.conf.unset(name) if value is None else spark.conf.set(name, value)


def test_rows_raised_inside_then_spark_defaults_again(session):
    assert max(batch_sizes(session, 100_000)) == 10_000  # Spark's default
    with arrow_batches.batches(session, 65_536, 32 << 20):
        assert batch_sizes(session, 100_000) == [65_536, 100_000 - 65_536]
    assert max(batch_sizes(session, 100_000)) == 10_000
    assert session.conf.get(ROWS, None) is None and session.conf.get(BYTES, None) is None  # unset, as before


def test_the_byte_limit_cuts_batches_of_wide_rows(session):
    with arrow_batches.batches(session, 65_536, 64 * 1024):  # 64 KB: a few thousand 8-byte ids
        sizes = batch_sizes(session, 100_000)
    assert sum(sizes) == 100_000 and max(sizes) < 10_000, sizes


def test_a_users_settings_stay_and_come_back(session):
    session.conf.set(ROWS, "200000")  # larger than asked: kept
    session.conf.set(BYTES, "16m")  # smaller than asked: kept
    with arrow_batches.batches(session, 65_536, 32 << 20):
        assert session.conf.get(ROWS) == "200000" and arrow_batches._limit(session.conf.get(BYTES)) == 16 << 20
    session.conf.set(ROWS, "1000")
    with arrow_batches.batches(session, 65_536, 32 << 20):
        assert session.conf.get(ROWS) == "65536"
    assert session.conf.get(ROWS) == "1000" and session.conf.get(BYTES) == "16m"


def test_threads_inside_together_restore_once_the_last_leaves(session):
    inside, leave = threading.Barrier(3), threading.Event()

    def worker():
        with arrow_batches.batches(session, 65_536, 32 << 20):
            inside.wait()
            leave.wait()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    with arrow_batches.batches(session, 65_536, 32 << 20):
        leave.set()
        for t in threads:
            t.join()
        assert session.conf.get(ROWS) == "65536"  # the others left, this one is still inside
    assert session.conf.get(ROWS, None) is None


@pytest.mark.parametrize(
    ("value", "limit"), [("10000", 10_000), ("67108864b", 64 << 20), ("64m", 64 << 20), ("-1", -1)]
)
def test_limits_read_as_spark_writes_them(value, limit):
    assert arrow_batches._limit(value) == limit
