"""Take rows of a table of many chunks without concatenating them.

Arrow's `take` on a chunked column of strings concatenates all the chunks first: taking a small part of a large
buffered table that way costs a copy of the whole table per call.
"""

import numpy as np
import pyarrow as pa


class RowTaker:
    """Takes rows of one table, many times: its record batches and their first rows are listed once."""

    def __init__(self, table):
        self.table = table
        self.batches = table.to_batches()
        self.starts = np.cumsum([0] + [b.num_rows for b in self.batches])

    def take(self, indices):
        """`table.take(indices)`, touching only the chunks the indices fall in: the indices are grouped by record
        batch, each batch takes its own rows, and the pieces are put back in the order of `indices`."""
        if len(self.batches) <= 1:
            return self.table.take(indices)
        idx = np.asarray(
            indices.to_numpy(zero_copy_only=False) if hasattr(indices, "to_numpy") else indices, dtype=np.int64
        )
        which = np.searchsorted(self.starts, idx, side="right") - 1
        by_batch = np.argsort(which, kind="stable")
        bounds = np.flatnonzero(np.diff(which[by_batch])) + 1
        pieces = []
        for part in np.split(by_batch, bounds):
            if len(part):
                b = int(which[part[0]])
                pieces.append(self.batches[b].take(pa.array(idx[part] - self.starts[b])))
        grouped = pa.Table.from_batches(pieces, schema=self.table.schema).combine_chunks()
        back = np.empty(len(idx), dtype=np.int64)
        back[by_batch] = np.arange(len(idx), dtype=np.int64)
        return grouped.take(pa.array(back))
