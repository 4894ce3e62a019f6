"""Version 9 tables whose merge Apache Hudi 1.2 expresses by a partial-update mode and merge properties (what it
makes of PostgresDebeziumAvroPayload and PartialUpdateAvroPayload), read by HoodieTable against Hudi 1.2's answers
and a plain-Python model: snapshot, time travel to every commit, each commit's incremental window (which Hudi 1.2
merges without the slice's earlier records), over upserts
holding the unavailable value or nulls, a late event, a delete marker, an inline compaction and logs after it."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

import java_hudi as jh
from hoodie_stream import HoodieTable
from test_java_hudi_versions import hudi_options

pytestmark = [pytest.mark.java_hudi]

U = "__debezium_unavailable_value"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("_event_lsn", pa.int64()),
        ("city", pa.string()),
        ("v", pa.string()),
        ("n", pa.int64()),
        ("_change_operation_type", pa.string()),
    ]
)
DATA = ["id", "_event_lsn", "city", "v", "n", "_change_operation_type"]
PAYLOADS = {
    "postgres": "org.apache.hudi.common.model.debezium.PostgresDebeziumAvroPayload",
    "partial": "org.apache.hudi.common.model.PartialUpdateAvroPayload",
}
# (id, _event_lsn, city, v, n, op); an inline compaction after the third delta commit, two more commits in logs
BATCHES = [
    [(i, 10, "sf" if i % 2 else "nyc", f"a{i}", i, "c") for i in range(1, 7)],
    [
        (1, 20, "sf", U, None, "u"),
        (2, 5, "nyc", "late2", 99, "u"),
        (3, 20, "sf", "x3", 3, "d"),
        (4, 20, "nyc", None, 40, "u"),
    ],
    [(5, 30, "sf", "c5", None, "u"), (1, 30, "sf", U, 7, "u")],
    [(6, 40, "nyc", "d6", 6, "d"), (2, 40, "nyc", U, None, "u"), (5, 15, "sf", "late5", 55, "u")],
    [(3, 50, "sf", U, 33, "c"), (4, 50, "nyc", "e4", None, "u"), (7, 50, "sf", None, 7, "c")],
]


def model_merge(kind, older, newer):
    """The merged row of two versions of a key (dicts of DATA and `_c`, the commit that wrote it), as Hudi 1.2 merges
    them for the payload `kind`: the greater `_event_lsn` wins (ties to the newer); its nulls (partial) or unavailable
    values (postgres) take the other's value."""
    winner, loser = (older, newer) if older["_event_lsn"] > newer["_event_lsn"] else (newer, older)
    merged = dict(winner)
    for c in DATA:
        if (kind == "partial" and winner[c] is None) or (kind == "postgres" and winner[c] == U):
            merged[c] = loser[c]
    return merged


def model_states(kind):
    """The model's table after each commit: id -> row (DATA and `_c`); a postgres row with op `d` is a delete."""
    rows, states = {}, []
    for n, batch in enumerate(BATCHES):
        for r in batch:
            row = dict(zip(DATA, r), _c=n)
            rows[row["id"]] = model_merge(kind, rows[row["id"]], row) if row["id"] in rows else row
            if kind == "postgres" and rows[row["id"]]["_change_operation_type"] == "d":
                del rows[row["id"]]
        states.append({k: dict(r) for k, r in rows.items()})
    return states


def data(state, commit=None):
    """A model state as rows_of gives a table (only the rows `commit` wrote, if given)."""
    return {k: {c: r[c] for c in DATA} for k, r in state.items() if commit is None or r["_c"] == commit}


def rows_of(table):
    return {r["id"]: r for r in table.select(DATA).to_pylist()}


@pytest.fixture(scope="module", params=sorted(PAYLOADS))
def written(request, java_hudi, tmp_path_factory):
    """(kind, path): the table Hudi 1.2 wrote with that payload."""
    kind = request.param
    hudi = java_hudi("1.2.0")
    path = str(tmp_path_factory.mktemp(kind) / "t")
    options = {
        **hudi_options(kind, "9"),
        "hoodie.datasource.write.payload.class": PAYLOADS[kind],
        "hoodie.datasource.write.precombine.field": "_event_lsn",
        "hoodie.compact.inline.max.delta.commits": "3",
    }
    for batch in BATCHES:
        hudi.write(path, pa.Table.from_pylist([dict(zip(DATA, r)) for r in batch], SCHEMA), options)
    return kind, path


def test_hudi_records_the_merge_as_partial_update_mode_and_merge_properties(written):
    kind, path = written
    props = HoodieTable(path).config.props
    assert props["hoodie.table.version"] == "9" and props["hoodie.record.merge.mode"] == "EVENT_TIME_ORDERING"
    assert props["hoodie.table.ordering.fields"] == "_event_lsn"
    prop = "hoodie.record.merge.property."
    if kind == "postgres":
        assert props["hoodie.table.partial.update.mode"] == "FILL_UNAVAILABLE"
        assert props[prop + "hoodie.write.partial.update.unavailable.value"] == U
        assert props[prop + "hoodie.payload.delete.field"] == "_change_operation_type"
        assert props[prop + "hoodie.payload.delete.marker"] == "d"
    else:
        assert props["hoodie.table.partial.update.mode"] == "IGNORE_DEFAULTS"
        assert not [k for k in props if k.startswith(prop)]
    actions = [i.action for i in HoodieTable(path).timeline.commits_timeline()]
    assert actions.index("commit") == 3 and actions.count("deltacommit") == len(BATCHES), actions


def test_every_query_reads_as_hudi_and_the_model(written, java_hudi):
    kind, path = written
    hudi = java_hudi("1.2.0")
    table = HoodieTable(path)
    states = model_states(kind)
    assert rows_of(table.read()) == data(states[-1])
    assert rows_of(hudi.read(path, jh.snapshot())) == data(states[-1])
    deltas = [i for i in table.timeline.commits_timeline() if i.action == "deltacommit"]
    for n, inst in enumerate(deltas):
        ours = table.read(as_of=inst.timestamp)
        assert rows_of(ours) == data(states[n]), f"as of commit {n}"
        ok, why = jh.same_rows(ours, hudi.read(path, jh.snapshot(inst.timestamp)), DATA)
        assert ok, f"as of commit {n}: {why}"
        window = table.read(query_type="incremental", start=inst.timestamp, end=inst.completion_time)
        # Hudi 1.2 merges a window's records among themselves, not with the slice's earlier ones: the window's rows
        # as written (a late one too), less the deletes
        written_rows = {r[0]: dict(zip(DATA, r)) for r in BATCHES[n]}
        assert rows_of(window) == {
            k: r for k, r in written_rows.items() if not (kind == "postgres" and r["_change_operation_type"] == "d")
        }, f"window {n}"
        ok, why = jh.same_rows(window, hudi.read(path, jh.incremental(inst.timestamp, inst.completion_time)), DATA)
        assert ok, f"window {n}: {why}"


def test_compaction_merges_as_hudi(written, java_hudi, spark, tmp_path):
    """hoodie-stream's compaction of a copy of the table (its logs after Hudi's inline compaction): HoodieTable and
    Hudi 1.2 read the model."""
    from hoodie_stream.compaction.offline import compact_table

    kind, source = written
    path = str(tmp_path / "t")
    shutil.copytree(source, path)
    list(compact_table(path, spark=spark))
    table = HoodieTable(path)
    assert table.timeline.commits_timeline()[-1].action == "commit"
    final = data(model_states(kind)[-1])
    assert rows_of(table.read()) == final
    assert rows_of(table.read(query_type="read_optimized")) == final
    assert rows_of(java_hudi("1.2.0").read(path, jh.snapshot())) == final
