"""Apache Hudi itself (0.15.0 and 1.2.0, tests/java_hudi.py) reads every kind of table the sink writes, and the
real Hudi-written fixtures, with snapshot, read_optimized, time-travel (`as.of.instant`) and incremental (begin/end
instants) queries; each answer must equal `HoodieTable.read` row for row, the five `_hoodie_*` columns included.
Hudi 0.15.0 (the version-6 writer) travels to every completed instant and reads every increment; Hudi 1.2.0 the
first and the middle ones (every query type, half the suite's time)."""

from __future__ import annotations

import pytest

import java_hudi as jh
from conftest import unzip_table, v6_table_zips
from hoodie_stream import HoodieTable
from hoodie_stream.errors import HoodieError
from hoodie_stream.format.timeline.instant import COMMIT_ACTIONS
from java_hudi_tables import MAKERS, plain

pytestmark = [pytest.mark.java_hudi, pytest.mark.spark]

# Where a Hudi version answers a partition column from the partition path instead of the data files, this project
# keeps the stored value (what the other Hudi version returns). {(table, Hudi version): (column, query kinds, why)};
# the column is compared apart: each of Hudi's values must be the stored one or the partition path's text.
_TIMESTAMP_KEYGEN_015 = (
    "Hudi 0.15's SparkHoodieTableFileIndex types the partition columns of a TimestampBasedKeyGenerator table as "
    "strings and fills them from the partition path where it merges file slices ('2023/11/15' for an epoch-millisecond "
    "field); Hudi 1.2 returns the stored values, as this project does"
)
PATH_VALUED = {
    ("timestamp_keys", "0.15.0"): ("ts", ("snapshot", "read_optimized", "incremental"), _TIMESTAMP_KEYGEN_015),
    ("sample-cow-v6_timebasedkeygen_nonhivestyle", "0.15.0"): (
        "ts_str",
        ("snapshot", "read_optimized", "incremental"),
        _TIMESTAMP_KEYGEN_015,
    ),
    ("url_encoded", "1.2.0"): (
        "city",
        ("incremental",),
        "Hudi 1.2's incremental query of a version 6 table fills the partition column from the URL-encoded path "
        "without decoding it ('a%2Fb' for 'a/b'), while its snapshot query and Hudi 0.15 return the stored 'a/b'",
    ),
}
# Queries a Hudi version fails on a real fixture, where this project reads the rows hudi-rs reads too:
# {(table, version): (text of Hudi's error, why)}.
HUDI_FAILS = {
    (f"sample-mor-parquet-v6_{shape}", "0.15.0"): (
        "incompatible types: optional fixed_len_byte_array(5) decimalField (DECIMAL(10,5)) != optional int64",
        "Hudi 0.15's log scanner reads PARQUET_DATA blocks with parquet-avro, which refuses the fixture's DECIMAL(10,5) "
        "stored as int64 (as Spark writes decimals of up to 18 digits); Hudi 1.2 and hudi-rs read them",
    )
    for shape in (
        "complexkeygen_hivestyle",
        "nonpartitioned",
        "nonpartitioned_rollback",
        "simplekeygen_hivestyle_no_metafields",
        "simplekeygen_nonhivestyle",
        "simplekeygen_nonhivestyle_overwritetable",
    )
}


def path_valued(name, version, query):
    known = PATH_VALUED.get((name, version))
    if known and query.split(" ")[0] in known[1]:
        return known[0]
    return None


def check_path_valued(ours, theirs, column):
    """Each of Hudi's `column` values is the stored one (ours, by record key) or its partition path's text
    (hive-style: what follows 'column=')."""
    stored = {k: str(v) for k, v in zip(ours["_hoodie_record_key"].to_pylist(), ours[column].to_pylist())}
    prefix = column + "="
    for key, value, path in zip(
        theirs["_hoodie_record_key"].to_pylist(),
        theirs[column].to_pylist(),
        theirs["_hoodie_partition_path"].to_pylist(),
    ):
        text = path[len(prefix) :] if path.startswith(prefix) else path
        if str(value) not in (stored.get(key), text):
            return (
                False,
                f"Hudi's {column} {value!r} of key {key} is neither ours {stored.get(key)!r} nor the path's {text!r}",
            )
    return True, ""


def queries(table: HoodieTable, every_instant: bool = True):
    """(name, our read's arguments, Hudi's options) of every query compared on a table: snapshot, read_optimized,
    time travel to every completed instant but the last, incremental from the start, to the first instant and
    between consecutive instants (not `every_instant`: travel to the first and the middle instant, the increment
    ending at the middle one)."""
    instants = [i.timestamp for i in table.timeline.commits_timeline()]
    out = [("snapshot", {}, jh.snapshot()), ("read_optimized", {"query_type": "read_optimized"}, jh.read_optimized())]
    pairs = list(zip(instants, instants[1:]))
    travels = instants[:-1]
    if not every_instant and len(instants) > 2:
        middle = len(instants) // 2
        travels, pairs = [instants[0], instants[middle]], [(instants[middle - 1], instants[middle])]
    for ts in travels:
        out.append((f"snapshot as of {ts}", {"as_of": ts}, jh.snapshot(ts)))
    if instants:
        out.append(("incremental from the start", {"query_type": "incremental"}, jh.incremental("000")))
        first = instants[0]
        out.append(
            (f"incremental to {first}", {"query_type": "incremental", "end": first}, jh.incremental("000", first))
        )
    for begin, end in pairs:
        args = {"query_type": "incremental", "start": begin, "end": end}
        out.append((f"incremental ({begin}, {end}]", args, jh.incremental(begin, end)))
    archived = [i.timestamp for i in table.archived_timeline().completed(list(COMMIT_ACTIONS))]
    if archived and instants:  # instants moved to .hoodie/archived/: travel to them, increments reaching them
        for ts in sorted({archived[0], archived[-1]}):
            out.append((f"snapshot as of {ts} (archived)", {"as_of": ts}, jh.snapshot(ts)))
        args = {"query_type": "incremental", "start": archived[0], "end": instants[0]}
        out.append((f"incremental from archived {archived[0]}", args, jh.incremental(archived[0], instants[0])))
    return out


def compare(hudi: jh.JavaHudi, path: str, name: str, storage_options=None) -> list[str]:
    """Every query of the table at `path` read by Hudi and by HoodieTable; the disagreements, described."""
    table = HoodieTable(path, storage_options)
    problems = []
    for query, ours_args, options in queries(table, every_instant=hudi.version == jh.VERSIONS[0]):
        try:
            ours = table.read(**ours_args)
        except HoodieError as e:
            ours = e
        try:
            theirs = hudi.read(path, options)
        except jh.JavaHudiError as e:
            # both refuse (a time travel to cleaned files): agreed; Hudi alone: a disagreement unless known
            known = HUDI_FAILS.get((name, hudi.version))
            ok = isinstance(ours, HoodieError) or (known is not None and known[0] in str(e))
            why = f"{str(e)[:600]}\n (we read {getattr(ours, 'num_rows', '')} rows)"
        else:
            if isinstance(ours, HoodieError):
                ok, why = False, f"we refused ({ours}) and Hudi read {0 if theirs is None else theirs.num_rows} rows"
            else:
                column = path_valued(name, hudi.version, query)
                if column is None:
                    ok, why = jh.same_rows(ours, theirs)
                else:
                    ok, why = jh.same_rows(ours, theirs, [c for c in sorted(ours.column_names) if c != column])
                    if ok and theirs is not None:
                        ok, why = check_path_valued(ours, theirs, column)
        if not ok:
            problems.append(f"{query}: {why}")
    return problems


@pytest.fixture(scope="module")
def sink_tables(spark, tmp_path_factory):
    """Each kind of sink-written table, made on first use and kept for the module."""
    made: dict[str, str] = {}

    def get(name):
        if name not in made:
            path = str(tmp_path_factory.mktemp("java-hudi-tables") / name)
            MAKERS[name](spark, path)
            made[name] = path
        return made[name]

    return get


@pytest.mark.parametrize("version", jh.VERSIONS)
@pytest.mark.parametrize("name", sorted(MAKERS))
def test_hudi_reads_what_the_sink_wrote(java_hudi, sink_tables, name, version):
    path = sink_tables(name)
    problems = compare(java_hudi(version), path, name)
    assert not problems, f"{name}, Hudi {version}:\n" + "\n".join(problems)


@pytest.mark.parametrize("version", jh.VERSIONS)
@pytest.mark.parametrize("zip_path", v6_table_zips(), ids=lambda p: p.stem)
def test_hudi_and_we_read_the_real_fixtures_alike(java_hudi, tmp_path, zip_path, version):
    path = str(unzip_table(zip_path, tmp_path))
    problems = compare(java_hudi(version), path, zip_path.stem)
    assert not problems, f"{zip_path.stem}, Hudi {version}:\n" + "\n".join(problems)


@pytest.fixture(scope="module")
def s3_plain(spark, s3_server):
    """The plain sink's table on the S3 test server (made once for both Hudi versions): its uri, storage options."""
    uri = s3_server.new_table_uri("plain")
    options = s3_server.options()
    plain(spark, uri, storage_options=options)
    return uri, options


@pytest.mark.parametrize("version", jh.VERSIONS)
def test_hudi_reads_a_sink_table_on_the_s3_test_server(java_hudi, s3_plain, version):
    """The plain sink's table on the S3 test server, read by Hudi through s3a (hadoop-aws) from the same endpoint."""
    uri, options = s3_plain
    hudi = java_hudi(version)
    hudi.hadoop_conf(jh.s3a_conf(options))
    problems = compare(hudi, uri, "plain", storage_options=options)
    assert not problems, f"s3 plain, Hudi {version}:\n" + "\n".join(problems)
