"""Apache Hudi as the oracle of incremental reads whose window reaches the archived timeline, on tables Hudi wrote
and archived (keep.min/max.commits 2/3, the cleaner retaining 1 commit), with hoodie.datasource.read.incr.fallback.fulltablescan.enable=false (0.15's default; 1.2's default is true:
the full table scan, not done here):

- Hudi 1.2.0, table version 9 (LSM history): the window is the commits, archived ones included, that completed in
  [begin, end]; a window from `000` or from an archived instant, open at its end, returns the latest versions of the
  records those commits wrote, file groups only archived commits wrote among them; a window whose end's slices the
  cleaner deleted fails, on the same file here as in Hudi;
- Hudi 0.15.0, table version 6 (`.hoodie/archived/`): the window's commits are the active timeline's in
  (begin, end]; a window starting in the archived part returns the rows with commit times in (begin, end] of the
  file groups active commits wrote, not those only archived commits wrote; one ending in the archived part
  returns no rows.

HoodieTable.read and the Spark data source (spark.read.format("hoodie")) answer as Hudi for every window."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

import java_hudi as jh
import test_java_hudi_writes as writes
from hoodie_stream import HoodieTable
from hoodie_stream.errors import HoodieError
from hoodie_stream.spark import register

pytestmark = [pytest.mark.java_hudi]

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.string())])
SMALL = {
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
    "hoodie.clean.commits.retained": "1",
    "hoodie.cleaner.commits.retained": "1",
    "hoodie.metadata.enable": "false",
}
# Hudi 1.2 falls back to a full table scan by default (0.15 does not): HoodieTable answers as Hudi without it
NO_FALLBACK = "hoodie.datasource.read.incr.fallback.fulltablescan.enable"
FILE = re.compile(r"[0-9a-f-]+-0_[0-9-]+_\d{17}\.parquet")


def _write_table(hudi, path, version):
    """8 commits: the first three insert into partition la (then archived), the others into sf; every third
    updates key 0 (in sf once it is there)."""
    extra = {} if version == "0.15.0" else {"hoodie.write.table.version": "9"}
    opts = writes.hudi_options(version, "incr_archived", global_index=False, **SMALL, **extra)
    for n in range(8):
        city = "la" if n < 3 else "sf"
        rows = [{"id": n, "ts": n, "city": city, "v": f"v{n}"}]
        if n % 3 == 2 and n > 3:
            rows.append({"id": 3, "ts": n, "city": "sf", "v": f"u{n}"})
        hudi.write(path, pa.Table.from_pylist(rows, SCHEMA), opts)


def _answers(hudi, table, path, begin, end):
    """(ours, Hudi's): the rows, or the name of the file the read failed on."""
    try:
        theirs = hudi.read(path, {**jh.incremental(begin, end), NO_FALLBACK: "false"})
    except jh.JavaHudiError as e:
        theirs = FILE.search(str(e)).group(0) if FILE.search(str(e)) else str(e)
    try:
        ours = table.read("incremental", start=begin, end=end)
    except HoodieError as e:
        ours = FILE.search(str(e)).group(0) if FILE.search(str(e)) else str(e)
    return ours, theirs


@pytest.mark.parametrize("version", ["1.2.0", "0.15.0"])
def test_windows_reaching_the_archived_timeline(java_hudi, spark, tmp_path, version):
    hudi = java_hudi(version)
    path = str(tmp_path / "t")
    _write_table(hudi, path, version)
    table = HoodieTable(path)
    archived = table.archived_timeline().completed(["commit", "deltacommit"])
    active = table.timeline.commits_timeline()
    assert len(archived) >= 3, "Hudi archived too little"
    commits = sorted(archived + active, key=lambda i: i.timestamp)
    ts = [i.timestamp for i in commits]
    done = [i.completion_time or i.timestamp for i in commits]
    windows = [
        ("000", None),
        (ts[0], None),
        (done[0], None),
        (ts[1], None),
        (ts[2], done[3]),  # from the archived part into the active one
        (ts[3], done[4]),
        ("000", done[1]),  # inside the archived part
        (ts[1], done[4]),
        (active[0].timestamp, None),
        (ts[-2], ts[-1]),
    ]
    register(spark)
    for begin, end in windows:
        ours, theirs = _answers(hudi, table, path, begin, end)
        if isinstance(theirs, str) or isinstance(ours, str):
            assert ours == theirs, f"Hudi {version} ({begin}, {end}]: ours {ours}, Hudi's {theirs}"
            continue
        same, why = jh.same_rows(ours, theirs)
        assert same, f"Hudi {version} ({begin}, {end}]: {why}"
        options = {"hoodie.datasource.query.type": "incremental", "hoodie.datasource.read.begin.instanttime": begin}
        if end:
            options["hoodie.datasource.read.end.instanttime"] = end
        spark_rows = spark.read.format("hoodie").options(**options).load(path).toArrow()
        same, why = jh.same_rows(ours, spark_rows)
        assert same, f"the Spark data source ({begin}, {end}]: {why}"
    if version == "1.2.0":  # the partition only archived commits wrote
        assert {r["city"] for r in table.read("incremental", start="000").to_pylist()} == {"la", "sf"}
    else:
        assert {r["city"] for r in table.read("incremental", start="000").to_pylist()} == {"sf"}
