"""Runs of equal values in a sorted Arrow array (vectorized)."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def run_starts(values):
    """Indices where a new run of equal values starts (values sorted; 0 is always a start when non-empty)."""
    n = len(values)
    if n == 0:
        return np.array([], dtype=np.int64)
    if n == 1:
        return np.array([0], dtype=np.int64)
    change = pc.not_equal(values.slice(1), values.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return np.flatnonzero(np.append(True, change))


def runs(values):
    """(first value of each run, bounds) of a sorted array: run i is rows bounds[i] to bounds[i + 1]."""
    if len(values) == 0:
        return [], [0]
    starts = run_starts(values)
    return pc.take(values, pa.array(starts)).to_pylist(), [int(i) for i in starts] + [len(values)]


def run_ends(values):
    """Indices of the last element of every run of equal values (values sorted)."""
    n = len(values)
    if n == 0:
        return np.array([], dtype=np.int64)
    return np.append(run_starts(values)[1:] - 1, n - 1)
