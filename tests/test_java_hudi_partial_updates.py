"""Blocks of partial updates (IS_PARTIAL) that Hudi 1.2's MERGE INTO writes into a merge-on-read table at table
version 8 and 9 (an UPDATE SET of a subset of the columns), read by HoodieTable (snapshot, time travel to each
commit, incremental windows) against Hudi 1.2's answers and a plain-Python model, then compacted by the project's
compaction, after which Hudi 1.2 and HoodieTable read the model again.

The model follows Hudi 1.2's file group reader: a key's log records are merged with each other in log order, then
with the base file's record; of two records the greater `ts` wins (ties: the newer), taking the columns its schema
has from the winner and the others from the loser, so an update that loses on `ts` still gives the columns the
winner lacks (Hudi 1.2 answers so); a delete is merged whole."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import java_hudi as jh
import test_java_hudi_writes as writes
from hoodie_stream import HoodieTable
from hoodie_stream.compaction.offline import compact_table
from hoodie_stream.format.log_file.log_block import BlockType, HeaderKey
from hoodie_stream.format.log_file.reader import read_log_file
from hoodie_stream.storage import storage_for

pytestmark = [pytest.mark.java_hudi]

SCHEMA = pa.schema(
    [("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.string()), ("p", pa.float64())]
)
DATA = ["id", "ts", "city", "v", "p"]
COLUMNS = sorted(["_hoodie_commit_time", "_hoodie_record_key", "_hoodie_partition_path"] + DATA)


class Model:
    """key -> the base record (a full dict) and the log records since (dicts of the columns they have, or a
    delete `None` with its ts)."""

    def __init__(self):
        self.base: dict[int, dict | None] = {}
        self.logs: dict[int, list[tuple[dict | None, int]]] = {}

    def write(self, rows):
        for r in rows:
            self.logs.setdefault(r["id"], []).append((dict(r), r["ts"]))

    def delete(self, i, ts):
        self.logs.setdefault(i, []).append((None, ts))

    @staticmethod
    def _merge(older, newer):
        winner, loser = (older, newer) if older[1] > newer[1] else (newer, older)
        if winner[0] is None or loser[0] is None:
            return winner
        return {**loser[0], **winner[0]}, winner[1]

    def expected(self):
        out = []
        for i in sorted(set(self.base) | set(self.logs)):
            merged = None
            for entry in self.logs.get(i, []):
                merged = entry if merged is None else self._merge(merged, entry)
            if self.base.get(i) is not None:
                base = (self.base[i], self.base[i]["ts"])
                merged = base if merged is None else self._merge(base, merged)
            if merged is not None and merged[0] is not None:
                out.append(tuple(merged[0].get(c) for c in DATA))
        return out

    def compact(self):
        rows = {r[0]: dict(zip(DATA, r)) for r in self.expected()}
        self.base = rows
        self.logs = {}


def rows_of(table):
    return sorted(tuple(r[c] for c in DATA) for r in table.select(DATA).to_pylist()) if table is not None else []


def options(name, version):
    """Hudi 1.2's writer options of test_java_hudi_writes (Hudi's index) at table version `version`, no inline
    compaction."""
    return writes.hudi_options(
        "1.2.0", name, global_index=False, **{"hoodie.write.table.version": version, "hoodie.compact.inline": "false"}
    )


def check(path, model, hudi, context):
    ours = HoodieTable(path).read()
    assert rows_of(ours) == model.expected(), f"{context}: HoodieTable.read differs from the model"
    ok, why = jh.same_rows(ours, hudi.read(path, jh.snapshot()), COLUMNS)
    assert ok, f"{context}: Hudi 1.2 vs HoodieTable.read: {why}"


def partial_blocks(path):
    """The data blocks of the table's log files whose header says IS_PARTIAL."""
    found = []
    for log in sorted(Path(path).glob("*/.*.log.*")):
        if log.suffix == ".crc":
            continue
        for block in read_log_file(storage_for(path), str(log.relative_to(path))):
            if block.block_type == BlockType.AVRO_DATA and block.header.get(HeaderKey.IS_PARTIAL) == "true":
                found.append(block)
    return found


def check_window(table, hudi, path, window, options, instants, partial):
    """An incremental window: the snapshot as of the window's last commit (equal to Hudi 1.2's, checked apart), its
    records written by the window's commits; and Hudi 1.2's own answer where the window holds no block of partial
    updates (`partial`: the instants that wrote one). Hudi 1.2's incremental read of a window that holds one fails
    (ArrayIndexOutOfBoundsException) or returns values of the wrong columns (e.g. a double 3.5e-33, a long
    755914244100 for the ordering value): its reader takes the partial block's columns by position."""
    ours = table.read(**window)
    snapshot = table.read(as_of=instants[-1].timestamp)
    written = {i.timestamp for i in instants}
    expected = snapshot.filter(pa.array([t in written for t in snapshot["_hoodie_commit_time"].to_pylist()]))
    ok, why = jh.same_rows(ours, expected, COLUMNS)
    assert ok, f"{window}: ours vs the snapshot as of its end: {why}"
    if not written & partial:
        ok, why = jh.same_rows(ours, hudi.read(path, options), COLUMNS)
        assert ok, f"{window}: Hudi 1.2 vs HoodieTable.read: {why}"


@pytest.mark.parametrize("version", ["8", "9"])
def test_merge_into_partial_updates_read_and_compacted(version, java_hudi, spark, tmp_path):
    hudi = java_hudi("1.2.0")
    path = str(tmp_path / "t")
    name = f"partial_v{version}"
    opts = options(name, version)
    model = Model()
    first = [dict(id=i, ts=10, city=("sf", "nyc")[i % 2], v=f"a{i}", p=float(i)) for i in range(6)]
    hudi.write(path, pa.Table.from_pylist(first, SCHEMA), opts)
    model.base = {r["id"]: r for r in first}
    full3 = [dict(id=3, ts=15, city="nyc", v="full3", p=33.0)]  # a whole record in a log, below a partial one
    hudi.write(path, pa.Table.from_pylist(full3, SCHEMA), opts)
    model.write(full3)
    hudi.sql(f"CREATE TABLE IF NOT EXISTS {name} USING hudi LOCATION '{path}'")
    check(path, model, hudi, "after the writes")

    def merge_into(source, assignments):
        hudi.sql(f"MERGE INTO {name} t USING ({source}) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET {assignments}")

    merge_into(
        "SELECT 1L AS id, 'nyc' AS city, 20L AS ts, 11.0D AS p UNION ALL SELECT 3L, 'nyc', 20L, 333.0D",
        "p = s.p, ts = s.ts",
    )
    model.write([dict(id=1, ts=20, p=11.0), dict(id=3, ts=20, p=333.0)])
    check(path, model, hudi, "after MERGE INTO SET p")
    merge_into("SELECT 1L AS id, 'nyc' AS city, 5L AS ts, 'late' AS v", "v = s.v, ts = s.ts")  # loses on ts
    model.write([dict(id=1, ts=5, v="late")])
    check(path, model, hudi, "after the MERGE INTO that loses on ts")
    hudi.sql(
        f"MERGE INTO {name} t USING (SELECT 4L AS id, 'sf' AS city, 100L AS ts UNION ALL SELECT 2L, 'sf', 1L) s "
        "ON t.id = s.id WHEN MATCHED THEN DELETE"
    )
    model.delete(4, 100)
    model.delete(2, 1)  # loses on ts
    check(path, model, hudi, "after MERGE INTO DELETE")
    merge_into("SELECT 5L AS id, 'nyc' AS city, 50L AS ts, 'v5' AS v, 55.0D AS p", "v = s.v, p = s.p, ts = s.ts")
    model.write([dict(id=5, ts=50, v="v5", p=55.0)])
    check(path, model, hudi, "after MERGE INTO SET v, p")

    blocks = partial_blocks(path)
    assert len(blocks) >= 3, "Hudi 1.2 wrote no blocks of partial updates"
    partial = {b.header.get(HeaderKey.INSTANT_TIME) for b in blocks}
    table = HoodieTable(path)
    commits = table.timeline.commits_timeline()
    for inst in commits:
        ok, why = jh.same_rows(table.read(as_of=inst.timestamp), hudi.read(path, jh.snapshot(inst.timestamp)), COLUMNS)
        assert ok, f"as of {inst.timestamp}: Hudi 1.2 vs HoodieTable.read: {why}"
    for n, inst in enumerate(commits):  # each commit's window, and from each commit on
        window = {"query_type": "incremental", "start": inst.timestamp, "end": inst.completion_time}
        check_window(table, hudi, path, window, jh.incremental(inst.timestamp, inst.completion_time), [inst], partial)
        window = {"query_type": "incremental", "start": inst.timestamp}
        check_window(table, hudi, path, window, jh.incremental(inst.timestamp), commits[n:], partial)
    got = spark.read.format("hoodie").load(path).toArrow()
    assert rows_of(got) == model.expected(), "the Spark data source differs from the model"
    for inst in commits:  # the Spark data source's incremental splits merge a window's partial updates alike
        incremental = {
            "hoodie.datasource.query.type": "incremental",
            "hoodie.datasource.read.begin.instanttime": inst.timestamp,
            "hoodie.datasource.read.end.instanttime": inst.completion_time,
        }
        got = spark.read.format("hoodie").options(**incremental).load(path).toArrow()
        ours = table.read("incremental", start=inst.timestamp, end=inst.completion_time)
        ok, why = jh.same_rows(got, ours, COLUMNS)
        assert ok, f"spark.read incremental {inst.timestamp}: {why}"

    done = [line for line in compact_table(path, spark=spark) if "completed" in line]
    assert done, "the project's compaction completed nothing"
    model.compact()
    table = HoodieTable(path)
    check(path, model, hudi, "after the project's compaction")
    ok, why = jh.same_rows(table.read("read_optimized"), hudi.read(path, jh.read_optimized()), COLUMNS)
    assert ok, f"read-optimized after the compaction: {why}"
    assert rows_of(table.read("read_optimized")) == model.expected()
