"""The merge of blocks of partial updates (IS_PARTIAL, Hudi 1.x's MERGE INTO of a subset of columns) without Spark:
the cases Hudi 1.2 answered (tests/test_java_hudi_partial_updates.py), and property tests against a plain fold of
each key's versions (its log versions in order, then over the base version)."""

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hoodie_stream.errors import HoodieError
from hoodie_stream.format.record.merge import (
    COMMIT_TIME_ORDERING,
    EVENT_TIME_ORDERING,
    KEY,
    Version,
    merge,
    merge_mode,
)

SCHEMA = pa.schema([(KEY, pa.string()), ("ts", pa.int64()), ("v", pa.string()), ("p", pa.float64())])
DATA = ["ts", "v", "p"]


def full(*rows):
    return Version(pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], SCHEMA))


def partial(columns, *rows):
    names = [KEY, *columns]
    table = pa.Table.from_pylist([dict(zip(names, r)) for r in rows], pa.schema([SCHEMA.field(n) for n in names]))
    return Version(table, columns=names)


def deletes(*rows):
    table = pa.table({KEY: [k for k, _ in rows], "ts": pa.array([t for _, t in rows], pa.int64())})
    return Version(table, is_delete=True)


def base(*rows):
    v = full(*rows)
    v.base = True
    return v


def read(versions, mode=EVENT_TIME_ORDERING, keep_deletes=False):
    table = merge(versions, SCHEMA, mode, "ts", keep_deletes=keep_deletes)
    return sorted(tuple(r.values()) for r in table.to_pylist())


def test_a_partial_update_keeps_the_columns_it_lacks():
    got = read([base(("1", 10, "a1", 1.0), ("2", 10, "a2", 2.0)), partial(["ts", "p"], ("1", 20, 11.0))])
    assert got == [("1", 20, "a1", 11.0), ("2", 10, "a2", 2.0)]


def test_an_update_that_loses_on_ordering_still_gives_what_the_winner_lacks():
    """As Hudi 1.2 answers: the log records merge first (the ts 20 record wins, without column v, which the losing
    ts 5 record gives), then the result lays over the base record."""
    versions = [
        base(("1", 10, "a1", 1.0)),
        partial(["ts", "p"], ("1", 20, 11.0)),
        partial(["ts", "v"], ("1", 5, "late")),
    ]
    assert read(versions) == [("1", 20, "late", 11.0)]
    # a whole record that loses gives the columns the winner lacks too
    assert read([*versions, full(("1", 7, "whole", 7.0))]) == [("1", 20, "late", 11.0)]


def test_commit_time_ordering_lays_the_newer_record_over():
    versions = [
        base(("1", 10, "a1", 1.0)),
        partial(["ts", "p"], ("1", 20, 11.0)),
        partial(["ts", "v"], ("1", 5, "late")),
    ]
    assert read(versions, COMMIT_TIME_ORDERING) == [("1", 5, "late", 11.0)]


def test_deletes_merge_whole():
    versions = [
        base(("1", 10, "a1", 1.0), ("2", 10, "a2", 2.0)),
        partial(["ts", "p"], ("1", 20, 11.0), ("2", 20, 22.0)),
    ]
    assert read([*versions, deletes(("1", 100), ("2", 1))]) == [("2", 20, "a2", 22.0)]
    kept = read([*versions, deletes(("1", 100))], keep_deletes=True)
    assert [(r[0], r[-1]) for r in kept] == [("1", True), ("2", False)]


def test_a_partial_record_over_nothing_has_nulls():
    assert read([partial(["ts", "p"], ("1", 20, 11.0))]) == [("1", 20, None, 11.0)]


def test_a_partial_block_without_the_ordering_field_is_refused():
    with pytest.raises(HoodieError, match="without the ordering field"):
        read([base(("1", 10, "a1", 1.0)), partial(["p"], ("1", 11.0))])


def test_the_partial_update_mode_of_version_9_is_still_refused():
    with pytest.raises(HoodieError, match="partial.update.mode"):
        merge_mode({"hoodie.table.partial.update.mode": "IGNORE_DEFAULTS", "hoodie.table.precombine.field": "ts"})


# -- properties -----------------------------------------------------------------------------------------------------
KEYS = ["a", "b", "c"]
COLUMN_SETS = [("ts", "p"), ("ts", "v"), ("ts",), ("ts", "v", "p")]


@st.composite
def histories(draw):
    """(base rows, log entries): entries are ("full" | "partial" | "delete", key, ts, values, columns)."""
    base_rows = {k: (draw(st.integers(0, 5)), f"b{k}", float(i)) for i, k in enumerate(KEYS) if draw(st.booleans())}
    entries = []
    for n in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["full", "partial", "partial", "delete"]))
        key = draw(st.sampled_from(KEYS))
        ts = draw(st.integers(0, 5))
        columns = DATA if kind != "partial" else list(draw(st.sampled_from(COLUMN_SETS)))
        entries.append((kind, key, ts, {"ts": ts, "v": f"v{n}", "p": float(n)}, columns))
    return base_rows, entries


def versions_of(base_rows, entries):
    versions = [base(*[(k, *r) for k, r in base_rows.items()])]
    for kind, key, ts, values, columns in entries:
        if kind == "delete":
            versions.append(deletes((key, ts)))
        elif kind == "full":
            versions.append(full((key, *(values[c] for c in DATA))))
        else:
            versions.append(partial(columns, (key, *(values[c] for c in columns))))
    return versions


def fold(base_rows, entries, event_time):
    """Each key's log entries merged in order, then over its base row; the winner's columns over the loser's."""

    def over(older, newer):
        winner, loser = (older, newer) if event_time and older[1] > newer[1] else (newer, older)
        if winner[0] is None or loser[0] is None:
            return winner
        return {**loser[0], **winner[0]}, winner[1]

    out = []
    for k in KEYS:
        merged = None
        for kind, key, ts, values, columns in entries:
            if key == k:
                entry = (None, ts) if kind == "delete" else ({c: values[c] for c in columns}, ts)
                merged = entry if merged is None else over(merged, entry)
        if k in base_rows:
            row = dict(zip(DATA, base_rows[k]))
            merged = (row, row["ts"]) if merged is None else over((row, row["ts"]), merged)
        if merged is not None and merged[0] is not None:
            out.append((k, *(merged[0].get(c) for c in DATA)))
    return out


@settings(max_examples=300, deadline=None)
@given(histories(), st.booleans())
def test_merge_is_the_fold_of_each_key(history, event_time):
    base_rows, entries = history
    mode = EVENT_TIME_ORDERING if event_time else COMMIT_TIME_ORDERING
    assert read(versions_of(base_rows, entries), mode) == fold(base_rows, entries, event_time)


@settings(max_examples=200, deadline=None)
@given(histories(), st.booleans())
def test_whole_records_merge_as_before(history, event_time):
    """Without partial versions the fold is the whole-record merge (the vectorized path)."""
    base_rows, entries = history
    entries = [(("full" if kind == "partial" else kind), key, ts, values, DATA) for kind, key, ts, values, _ in entries]
    mode = EVENT_TIME_ORDERING if event_time else COMMIT_TIME_ORDERING
    assert read(versions_of(base_rows, entries), mode) == fold(base_rows, entries, event_time)
