"""The merge of a version 9 table's partial-update mode and merge properties (hoodie.table.partial.update.mode,
hoodie.record.merge.property.*: what Hudi 1.1 made of the partial-update, Debezium and DMS payloads) without Spark:
how merge_mode reads hoodie.properties, the cases Hudi 1.2 answered (tests/test_java_hudi_merge_properties.py), and
property tests against a plain fold of each key's versions (its log versions in order, then over the base version,
as Hudi 1.2's file group reader merges them)."""

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hoodie_stream.errors import HoodieError
from hoodie_stream.format.record.merge import (
    COMMIT_TIME_ORDERING,
    EVENT_TIME_ORDERING,
    FILL_UNAVAILABLE,
    IGNORE_DEFAULTS,
    KEY,
    MergeMode,
    Version,
    merge,
    merge_mode,
)

U = "__debezium_unavailable_value"
P = "hoodie.record.merge.property."
POSTGRES = {
    "hoodie.table.version": "9",
    "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
    "hoodie.table.ordering.fields": "_event_lsn",
    "hoodie.table.partial.update.mode": "FILL_UNAVAILABLE",
    P + "hoodie.write.partial.update.unavailable.value": U,
    P + "hoodie.payload.delete.field": "_change_operation_type",
    P + "hoodie.payload.delete.marker": "d",
}
PARTIAL = {
    "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
    "hoodie.table.ordering.fields": "ts",
    "hoodie.table.partial.update.mode": "IGNORE_DEFAULTS",
}
SCHEMA = pa.schema([(KEY, pa.string()), ("ts", pa.int64()), ("v", pa.string()), ("n", pa.int64()), ("op", pa.string())])
DATA = ["ts", "v", "n", "op"]


def version(*rows, is_base=False):
    return Version(pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], SCHEMA), base=is_base)


def read(versions, mode, keep_deletes=False):
    table = merge(versions, SCHEMA, mode, "ts", keep_deletes=keep_deletes)
    return sorted(tuple(r.values()) for r in table.to_pylist())


def postgres(mode=EVENT_TIME_ORDERING):
    return MergeMode(mode, FILL_UNAVAILABLE, U, "op", "d")


def ignore_defaults(mode=EVENT_TIME_ORDERING):
    return MergeMode(mode, IGNORE_DEFAULTS)


# -- hoodie.properties ---------------------------------------------------------------------------------------------
def test_merge_mode_reads_the_postgres_debezium_properties():
    mode, ordering = merge_mode(POSTGRES, merge_properties=True)
    assert (mode, ordering) == (EVENT_TIME_ORDERING, "_event_lsn")
    assert (mode.partial, mode.unavailable, mode.delete_field, mode.delete_marker) == (
        FILL_UNAVAILABLE,
        U,
        "_change_operation_type",
        "d",
    )


def test_merge_mode_reads_ignore_defaults_and_dms_delete_markers():
    mode, _ = merge_mode(PARTIAL, merge_properties=True)
    assert mode == EVENT_TIME_ORDERING and mode.partial == IGNORE_DEFAULTS and mode.delete_field is None
    dms = {
        "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
        P + "hoodie.payload.delete.field": "Op",
        P + "hoodie.payload.delete.marker": "D",
    }
    mode, ordering = merge_mode(dms, merge_properties=True)
    assert (mode, ordering, mode.partial, mode.delete_field, mode.delete_marker) == (
        COMMIT_TIME_ORDERING,
        None,
        None,
        "Op",
        "D",
    )


def test_a_table_without_merge_properties_keeps_the_plain_mode():
    mode, _ = merge_mode({"hoodie.table.ordering.fields": "ts"}, merge_properties=True)
    assert type(mode) is str and mode == EVENT_TIME_ORDERING


@pytest.mark.parametrize(
    "props, key",
    [
        ({"hoodie.table.partial.update.mode": "KEEP_VALUES"}, "hoodie.table.partial.update.mode"),
        ({P + "some.other.property": "x"}, P + "some.other.property"),
        ({P + "hoodie.payload.delete.field": "Op"}, P + "hoodie.payload.delete.marker"),
        ({"hoodie.table.ordering.fields": "_event_bin_file,_event_pos"}, "hoodie.table.ordering.fields"),
    ],
)
def test_what_is_not_read_is_refused_naming_the_key(props, key):
    with pytest.raises(HoodieError, match=key.replace(".", r"\.")):
        merge_mode(props, merge_properties=True)


def test_the_writers_still_refuse_merge_properties():
    with pytest.raises(HoodieError, match=r"hoodie\.payload\.delete\.field"):
        merge_mode({k: v for k, v in POSTGRES.items() if k != "hoodie.table.partial.update.mode"})
    with pytest.raises(HoodieError, match="partial.update.mode"):
        merge_mode(POSTGRES)


# -- cases -------------------------------------------------------------------------------------------------------
def test_the_unavailable_value_keeps_the_older_value_of_string_columns_only():
    got = read([version(("1", 10, "a", 1, "c"), is_base=True), version(("1", 20, U, None, "u"))], postgres())
    assert got == [("1", 20, "a", None, "u")]


def test_a_delete_marker_deletes_and_a_late_event_loses():
    versions = [
        version(("1", 10, "a1", 1, "c"), ("2", 10, "a2", 2, "c"), is_base=True),
        version(("1", 20, "x", 1, "d"), ("2", 5, "late", 9, "u")),
    ]
    assert read(versions, postgres()) == [("2", 10, "a2", 2, "c")]
    assert read(versions, postgres(), keep_deletes=True) == [
        ("1", 20, "x", 1, "d", True),
        ("2", 10, "a2", 2, "c", False),
    ]


def test_ignore_defaults_fills_nulls_of_the_winner_even_from_a_late_event():
    versions = [version(("1", 10, None, 1, "c"), is_base=True), version(("1", 5, "late", 9, "u"))]
    assert read(versions, ignore_defaults()) == [("1", 10, "late", 1, "c")]


def test_log_records_merge_with_each_other_before_the_base():
    """Hudi 1.2's order: the ts 20 record (n null) takes n from the losing ts 5 log record, not from the base."""
    versions = [
        version(("1", 10, "a", 1, "c"), is_base=True),
        version(("1", 5, "b", 2, "u")),
        version(("1", 20, "c", None, "u")),
    ]
    assert read(versions, ignore_defaults()) == [("1", 20, "c", 2, "u")]


def test_a_base_row_with_the_delete_marker_is_dropped():
    versions = [version(("1", 10, "a", 1, "d"), ("2", 10, "b", 2, "c"), is_base=True), version(("3", 1, "c", 3, "c"))]
    assert read(versions, postgres()) == [("2", 10, "b", 2, "c"), ("3", 1, "c", 3, "c")]


# -- properties --------------------------------------------------------------------------------------------------
KEYS = ["a", "b", "c"]


@st.composite
def histories(draw):
    """(base rows, log batches): rows (key, ts, v, n, op)."""
    values = st.sampled_from([None, U, "x", "y"])
    numbers = st.sampled_from([None, 1, 2])
    ops = st.sampled_from(["c", "u", "d"])

    def row(k):
        return (k, draw(st.integers(0, 4)), draw(values), draw(numbers), draw(ops))

    base_rows = [row(k) for k in KEYS if draw(st.booleans())]
    logs = [
        [row(k) for k in draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=3))]
        for _ in range(draw(st.integers(0, 4)))
    ]
    return base_rows, logs


def model(base_rows, logs, mode):
    """Each key's log versions folded in order, then laid over its base version: the winner (greater ts, ties to the
    newer; commit time: the newer), a delete (op d) whole, else its fill values taken from the loser."""
    partial, unavailable, field = mode.partial, mode.unavailable, mode.delete_field

    def lay(older, newer):
        if mode == EVENT_TIME_ORDERING and older[1] > newer[1]:
            winner, loser = older, newer
        else:
            winner, loser = newer, older
        if field and (winner[4] == "d" or loser[4] == "d"):
            return winner
        fill = [
            (partial == IGNORE_DEFAULTS and w is None) or (partial == FILL_UNAVAILABLE and w == unavailable)
            for w in winner
        ]
        return tuple(loser_value if f else w for w, loser_value, f in zip(winner, loser, fill))

    folded = {}
    for batch in logs:
        for r in batch:
            folded[r[0]] = lay(folded[r[0]], r) if r[0] in folded else r
    result = {r[0]: r for r in base_rows}
    for k, r in folded.items():
        result[k] = lay(result[k], r) if k in result else r
    return sorted(r for r in result.values() if not (field and r[4] == "d"))


MODES = [
    postgres(),
    ignore_defaults(),
    postgres(COMMIT_TIME_ORDERING),
    ignore_defaults(COMMIT_TIME_ORDERING),
    MergeMode(COMMIT_TIME_ORDERING, None, None, "op", "d"),
]


@settings(max_examples=150, deadline=None)
@given(histories(), st.sampled_from(range(len(MODES))))
def test_merge_equals_the_fold(history, mode_index):
    mode = MODES[mode_index]
    base_rows, logs = history
    versions = [version(*base_rows, is_base=True)] + [version(*batch) for batch in logs]
    assert read(versions, mode) == model(base_rows, logs, mode)
