"""RowTaker: taking rows of a many-chunk table group by group gives exactly Arrow's take on the whole table."""

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from hoodie_stream.format.util.chunked_take import RowTaker


@st.composite
def chunked_tables(draw):
    sizes = draw(st.lists(st.integers(0, 6), min_size=1, max_size=6))
    batches, start = [], 0
    for n in sizes:
        ids = list(range(start, start + n))
        names = [None if i % 5 == 3 else "v" * (i % 4) + str(i) for i in ids]
        batches.append(pa.record_batch({"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string())}))
        start += n
    table = pa.Table.from_batches(batches)
    indices = draw(st.lists(st.integers(0, max(0, start - 1)), max_size=20)) if start else []
    return table, indices


@settings(max_examples=200, deadline=None)
@given(chunked_tables(), st.sampled_from(["numpy", "arrow"]))
def test_row_taker_equals_arrow_take(case, kind):
    table, indices = case
    idx = np.array(indices, dtype=np.int64) if kind == "numpy" else pa.array(indices, pa.int64())
    got = RowTaker(table).take(idx)
    want = table.combine_chunks().take(pa.array(indices, pa.int64()))
    assert got.schema == table.schema
    assert got.to_pylist() == want.to_pylist()


def _peak_bytes(fn):
    """Peak Arrow bytes allocated while fn runs (a proxy pool with its own statistics as the default pool)."""
    previous = pa.default_memory_pool()
    proxy = pa.proxy_memory_pool(previous)
    pa.set_memory_pool(proxy)
    try:
        fn()
    finally:
        pa.set_memory_pool(previous)
    return proxy.max_memory()


def test_row_taker_of_a_large_table_copies_only_the_rows_taken():
    table = pa.Table.from_batches([pa.record_batch({"s": pa.array(["x" * 1000] * 1000)}) for _ in range(20)])
    rows = np.arange(5_000, 5_500)
    assert RowTaker(table).take(rows).to_pylist() == table.take(pa.array(rows)).to_pylist()
    # Arrow's own take concatenates the 20 MB of chunks; RowTaker copies the ~0.5 MB of rows it takes (twice)
    assert _peak_bytes(lambda: table.take(pa.array(rows))) > 20 * 1000 * 1000
    assert _peak_bytes(lambda: RowTaker(table).take(rows)) < 4 * 500 * 1000
