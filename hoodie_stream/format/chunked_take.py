"""Take rows of a table of many chunks without concatenating them.

Arrow's `take` on a chunked column of strings concatenates all the chunks first: taking a small part of a large
buffered table that way costs a copy of the whole table per call.
"""

import numpy as np
import pyarrow as pa


def take_rows(table, indices):
    """`table.take(indices)`, touching only the chunks the indices fall in: the indices are grouped by record
    batch, each batch takes its own rows, and the pieces are put back in the order of `indices`."""
    batches = table.to_batches()
    if len(batches) <= 1:
        return table.take(indices)
    idx = np.asarray(indices.to_numpy(zero_copy_only=False) if hasattr(indices, "to_numpy") else indices,
                     dtype=np.int64)
    starts = np.cumsum([0] + [b.num_rows for b in batches])
    which = np.searchsorted(starts, idx, side="right") - 1
    by_batch = np.argsort(which, kind="stable")
    grouped_which = which[by_batch]
    bounds = np.flatnonzero(np.diff(grouped_which)) + 1
    pieces = []
    for part in np.split(by_batch, bounds):
        if len(part):
            b = int(which[part[0]])
            pieces.append(batches[b].take(pa.array(idx[part] - starts[b])))
    grouped = pa.Table.from_batches(pieces, schema=table.schema).combine_chunks()
    back = np.empty(len(idx), dtype=np.int64)
    back[by_batch] = np.arange(len(idx), dtype=np.int64)
    return grouped.take(pa.array(back))
