"""merge() and merge_pieces() against a plain model of the merge rules (format/record/merge.py's docstring), on random
versions: a base file with unique keys, then log blocks of upserts, `_hoodie_is_deleted` rows and deletes."""

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from hoodie_stream.format.record.merge import (
    COMMIT_TIME_ORDERING,
    EVENT_TIME_ORDERING,
    Version,
    delete_version,
    merge,
    merge_pieces,
    split_base,
)

SCHEMA = pa.schema(
    [("_hoodie_record_key", pa.string()), ("ts", pa.int64()), ("v", pa.string()), ("_hoodie_is_deleted", pa.bool_())]
)
KEYS = st.sampled_from(["a", "b", "c", "d", "é", "f" * 40])
ts = st.one_of(st.none(), st.integers(0, 4))
row = st.tuples(KEYS, ts, st.text(max_size=3), st.booleans())


def data_version(rows):
    keys, tss, vs, dels = zip(*rows) if rows else ((), (), (), ())
    return Version(
        pa.table(
            {"_hoodie_record_key": list(keys), "ts": list(tss), "v": list(vs), "_hoodie_is_deleted": list(dels)},
            schema=SCHEMA,
        )
    )


@st.composite
def histories(draw):
    base = draw(st.lists(row, min_size=1, max_size=6, unique_by=lambda r: r[0]))
    logs = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("data"), st.lists(row, max_size=6)),
                st.tuples(st.just("delete"), st.lists(st.tuples(KEYS, ts), max_size=4)),
            ),
            max_size=4,
        )
    )
    return base, logs


def model(base, logs, mode, keep_deletes):
    """Rows per key after the merge rules, one version at a time in write order."""
    versions = [(k, t, v, d, False) for k, t, v, d in base]
    for kind, rows in logs:
        if kind == "data":
            versions += [(k, t, v, d, False) for k, t, v, d in rows]
        else:
            versions += [(k, t, None, None, True) for k, t in rows]
    winners = {}
    for seq, (key, t, v, deleted, from_delete_block) in enumerate(versions):
        entry = {"seq": seq, "ts": t, "v": v, "is_del": bool(deleted) or from_delete_block, "deleted_col": deleted}
        entry["natural"] = from_delete_block and mode == EVENT_TIME_ORDERING and t is None
        current = winners.get(key)
        if current is None or mode == COMMIT_TIME_ORDERING or entry["natural"] or current["natural"]:
            winners[key] = (
                entry  # the later write (a natural delete removes what came before; any later version beats it)
            )
        elif (-1 if t is None else t) >= (-1 if current["ts"] is None else current["ts"]):
            winners[key] = entry  # event time: the greater ordering value, ties to the later write
    out = []
    for key, w in winners.items():
        if w["is_del"] and not keep_deletes:
            continue
        row = {"_hoodie_record_key": key, "ts": w["ts"], "v": w["v"], "_hoodie_is_deleted": w["deleted_col"]}
        if keep_deletes:
            row["__hs_del"] = w["is_del"]
        out.append(row)
    return sorted(out, key=lambda r: r["_hoodie_record_key"])


def versions_of(base, logs):
    versions = [data_version(base)]
    for kind, rows in logs:
        if kind == "data":
            versions.append(data_version(rows))
        else:
            keys = [k for k, _t in rows]
            versions.append(delete_version(keys, [""] * len(keys), [t for _k, t in rows], "ts", pa.int64()))
    return versions


@settings(max_examples=400, deadline=None)
@given(histories(), st.sampled_from([COMMIT_TIME_ORDERING, EVENT_TIME_ORDERING]), st.booleans())
def test_merge_follows_the_rules(history, mode, keep_deletes):
    base, logs = history
    versions = versions_of(base, logs)
    merged = merge(versions, SCHEMA, mode, "ts", keep_deletes=keep_deletes)
    assert sorted(merged.to_pylist(), key=lambda r: r["_hoodie_record_key"]) == model(base, logs, mode, keep_deletes)
    pieces = list(merge_pieces(versions, SCHEMA, mode, "ts", keep_deletes=keep_deletes))
    assert len(pieces) <= 2
    assert pa.concat_tables(pieces).equals(merged) if pieces else merged.num_rows == 0
    if len(pieces) == 2:  # first the base rows no log touches, in base order
        touched = {k for _kind, rows in logs for k, *_ in rows}
        assert pieces[0]["_hoodie_record_key"].to_pylist() == [
            k for k, _t, _v, d in base if k not in touched and (keep_deletes or not d)
        ]


@settings(max_examples=300, deadline=None)
@given(histories(), st.sampled_from([COMMIT_TIME_ORDERING, EVENT_TIME_ORDERING]), st.booleans())
def test_base_split_by_the_log_keys_then_merged_follows_the_rules(history, mode, empty_base):
    """Compaction's path: the base rows no log touches (split off by the log keys alone), then the merge of the
    touched base rows with the logs; together the same rows as the model."""
    base, logs = history
    if empty_base:
        base = []
    versions = versions_of(base, logs)
    later = pa.chunked_array([v.table["_hoodie_record_key"] for v in versions[1:]], pa.string())
    mask = pc.is_in(versions[0].table["_hoodie_record_key"], value_set=later.combine_chunks())
    untouched, touched = split_base(versions[0], mask, SCHEMA)
    assert untouched.schema.equals(SCHEMA)
    pieces = [untouched] + list(merge_pieces([touched] + versions[1:], SCHEMA, mode, "ts"))
    got = sorted(pa.concat_tables(pieces).to_pylist(), key=lambda r: r["_hoodie_record_key"])
    assert got == model(base, logs, mode, False)
