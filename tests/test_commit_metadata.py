import glob
import json
import os

import pytest

from conftest import v6_table_zips
from hoodie_stream.errors import HoodieFormatError
from hoodie_stream.format.timeline.commit_metadata import CommitMetadata, WriteStat, jackson_pretty

V6 = [p.stem for p in v6_table_zips()]


def _json_files(base):
    out = []
    for f in sorted(glob.glob(os.path.join(base, ".hoodie", "*"))):
        if os.path.isfile(f) and not f.endswith(".properties"):
            data = open(f, "rb").read()
            if data and not data.startswith(b"Obj\x01"):
                out.append((f, data))
    return out


@pytest.mark.parametrize("name", V6)
def test_fixture_json_round_trip_exact(fixture_table, name):
    files = _json_files(fixture_table(name))
    if "empty" not in name:
        assert files
    for path, data in files:
        meta = CommitMetadata.from_json(data)
        assert meta.to_json() == data, path
        assert json.loads(meta.to_json()) == json.loads(data)


def test_fixture_fields(fixture_table):
    base = fixture_table("trips-mor-avro-v6_trips_8i3d")
    meta = CommitMetadata.from_json((base / ".hoodie" / "20250618054714114.deltacommit").read_bytes())
    (stat,) = meta.all_write_stats()
    assert stat.is_delta and stat.log_version == 1 and stat.num_deletes == 3
    assert stat.base_file.endswith("_20250618054711154.parquet")
    assert stat.log_files == [".6d3d1d6e-2298-4080-a0c1-494877d6f40a-0_20250618054711154.log.1_0-26-85"]
    assert stat.records_stats == {"val": None}
    assert meta.schema.startswith('{"type":"record"')
    assert meta.file_ids() == {("city=san_francisco", "6d3d1d6e-2298-4080-a0c1-494877d6f40a-0")}
    assert meta.written_file_names() == {("city=san_francisco", stat.log_files[0])}
    base = fixture_table("sample-mor-parquet-v6_simplekeygen_nonhivestyle_overwritetable")
    meta = CommitMetadata.from_json((base / ".hoodie" / "20250121000702475.replacecommit").read_bytes())
    assert meta.partition_to_replace_file_ids["30"] == ["de3550df-e12c-4591-9335-92ff992258a2-0"]
    assert meta.operation_type == "INSERT_OVERWRITE_TABLE"


def test_new_stats_serialize_like_hudi():
    base_stat = WriteStat(
        file_id="f-0",
        path="p/f-0_0-1-2_20250101000000000.parquet",
        num_writes=2,
        num_inserts=2,
        total_write_bytes=10,
        file_size_in_bytes=10,
        partition_path="p",
        runtime_stats={"totalScanTime": 0, "totalUpsertTime": 0, "totalCreateTime": 5},
    )
    log_stat = WriteStat(
        file_id="f-0",
        path="p/.f-0_20250101000000000.log.1_0-1-2",
        prev_commit="20250101000000000",
        partition_path="p",
        is_delta=True,
        log_version=1,
        base_file="",
        log_files=[".f-0_x"],
    )
    meta = CommitMetadata({"p": [base_stat, log_stat]}, False, {"schema": "{}"}, "UPSERT", None)
    d = json.loads(meta.to_json())
    s0, s1 = d["partitionToWriteStats"]["p"]
    assert s0["prevCommit"] == "null" and "logVersion" not in s0 and "recordsStats" not in s0
    assert s1["recordsStats"] == {"val": None} and s1["baseFile"] == "" and s1["logOffset"] == 0
    assert list(s1)[:4] == ["fileId", "path", "cdcStats", "prevCommit"]
    assert "partitionToReplaceFileIds" not in d
    assert CommitMetadata.from_json(meta.to_json()) == meta
    text = meta.to_json().decode()
    assert text.startswith('{\n  "partitionToWriteStats" : {\n    "p" : [ {\n      "fileId" : "f-0",')


def test_hudi_rs_can_parse(tmp_path):
    pytest.importorskip("hudi")
    meta = CommitMetadata(
        {"": [WriteStat(file_id="a-0", path="a-0_0-0-0_1.parquet", partition_path="")]},
        False,
        {"schema": "{}", "k": 'ü\n"x"'},
        "INSERT",
        {"": ["b-0"]},
    )
    assert json.loads(meta.to_json())["extraMetadata"]["k"] == 'ü\n"x"'


def test_jackson_details():
    assert jackson_pretty({}) == "{ }"
    assert jackson_pretty({"a": []}) == '{\n  "a" : [ ]\n}'
    assert jackson_pretty({"a": ["x", "y"]}) == '{\n  "a" : [ "x", "y" ]\n}'
    assert jackson_pretty("\x01") == '"\\u0001"'


def test_bad_json():
    with pytest.raises(HoodieFormatError):
        CommitMetadata.from_json(b"{not json")
    assert CommitMetadata.from_json(b"").all_write_stats() == []
