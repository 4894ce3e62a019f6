"""The independent oracle: hudi 0.5.0 (hudi-rs) reads, and a row comparison that ignores row order."""

import datetime
import decimal
import math

import pyarrow as pa
from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

META = [
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
]


def rs_table(base, storage_options=None):
    builder = HudiTableBuilder.from_base_uri(str(base))
    if storage_options:
        builder = builder.with_storage_options(dict(storage_options))
    return builder.build()


def rs_read(base, query_type="snapshot", as_of=None, start=None, end=None, storage_options=None):
    """Read with hudi-rs (a table URI with its storage options, or a local path); returns a pyarrow Table (None
    schema when it returned no batches)."""
    table = rs_table(base, storage_options)
    opts = HudiReadOptions()
    if query_type == "incremental":
        opts = opts.with_query_type(HudiQueryType.Incremental)
        if start is not None:
            opts = opts.with_start_timestamp(start)
        if end is not None:
            opts = opts.with_end_timestamp(end)
    else:
        if as_of is not None:
            opts = opts.with_as_of_timestamp(as_of)
        if query_type == "read_optimized":
            opts = opts.with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    batches = table.read(opts)
    if not batches:
        return None
    return pa.Table.from_batches(batches)


def rs_completed_instants(base, storage_options=None):
    tl = rs_table(base, storage_options).get_timeline()
    inst = tl.get_completed_commits() + tl.get_completed_deltacommits() + tl.get_completed_replacecommits()
    return sorted(i.timestamp for i in inst)


def _norm(value):
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    if isinstance(value, decimal.Decimal):
        return value.normalize()
    if isinstance(value, dict):
        return tuple(sorted((k, _norm(v)) for k, v in value.items()))
    if isinstance(value, list):
        # Arrow maps come back as lists of (key, value) tuples; lists as lists.
        return tuple(_norm(v) for v in value)
    if isinstance(value, tuple):
        return tuple(_norm(v) for v in value)
    return value


def rows(table, columns=None):
    """Rows as sorted tuples of normalized values, over `columns` (default: all, in name order)."""
    if table is None:
        return []
    columns = columns or sorted(table.column_names)
    data = table.select(columns).to_pylist()
    return sorted((tuple(_norm(r[c]) for c in columns) for r in data), key=repr)


def assert_same_rows(ours, theirs, columns=None, context=""):
    """Both tables hold the same multiset of rows over the same columns."""
    if theirs is None:
        assert ours.num_rows == 0, f"{context}: hudi-rs read nothing, we read {ours.num_rows} rows"
        return
    if columns is None:
        assert sorted(ours.column_names) == sorted(theirs.column_names), (
            f"{context}: columns differ: ours {ours.column_names} vs hudi-rs {theirs.column_names}"
        )
    a, b = rows(ours, columns), rows(theirs, columns)
    assert len(a) == len(b), f"{context}: {len(a)} rows vs hudi-rs {len(b)}"
    for x, y in zip(a, b):
        assert x == y, f"{context}: row differs:\n ours   {x}\n hudi-rs {y}"
