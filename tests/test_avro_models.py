import glob
import io
import json
import os
import struct

import fastavro
import pytest

from conftest import LOG_FILES, v6_table_zips
from hoodie_stream.errors import HoodieFormatError
from hoodie_stream.format.avro import models as avro_models
from hoodie_stream.format.avro.models import (
    SCHEMAS,
    container_schema,
    container_sync,
    read_container,
    schema,
    write_container,
)

V6 = [p.stem for p in v6_table_zips()]


def _avro_files(base):
    for f in sorted(glob.glob(os.path.join(base, ".hoodie", "*"))):
        if os.path.isfile(f):
            data = open(f, "rb").read()
            if data.startswith(b"Obj\x01"):
                yield f, data


@pytest.mark.parametrize("name", V6)
def test_fixture_containers_round_trip_exact(fixture_table, name):
    for path, data in _avro_files(fixture_table(name)):
        record = read_container(data)
        model = json.loads(container_schema(data))["name"]
        assert SCHEMAS[model] == container_schema(data), path
        assert write_container(model, record, sync=container_sync(data)) == data, path


def test_fixture_rollback_values(fixture_table):
    base = fixture_table("sample-mor-parquet-v6_nonpartitioned_rollback")
    meta = read_container((base / ".hoodie" / "20250126040936578.rollback").read_bytes())
    assert meta["commitsRollback"] == ["20250126040826878"]
    assert meta["instantsRollback"] == [{"commitTime": "20250126040826878", "action": "deltacommit"}]
    plan = read_container((base / ".hoodie" / "20250126040936578.rollback.requested").read_bytes())
    assert plan["version"] == 1 and len(plan["RollbackRequests"]) == 2


def _records(name):
    return {
        "HoodieCommitMetadata": {
            "partitionToWriteStats": {
                "p": [
                    {"fileId": "f", "path": "p/.f_1.log.1_0-1-1", "prevCommit": "1", "numWrites": 2, "logFiles": ["x"]}
                ]
            },
            "compacted": False,
            "extraMetadata": {"schema": "{}"},
            "version": 1,
            "operationType": "UPSERT",
        },
        "HoodieMergeArchiveFilePlan": {
            "candidate": ["file:/t/.hoodie/archived/.commits_.archive.1_1-0-1"],
            "mergedArchiveFileName": ".commits_.archive.2_1-0-1",
        },
        "HoodieCompactionPlan": {
            "operations": [
                {
                    "baseInstantTime": "1",
                    "deltaFilePaths": [".f_1.log.1_0-0-0"],
                    "dataFilePath": None,
                    "fileId": "f",
                    "partitionPath": "p",
                    "metrics": {"TOTAL_LOG_FILES": 1.0},
                }
            ],
            "extraMetadata": {},
            "version": 2,
        },
        "HoodieCleanerPlan": {
            "earliestInstantToRetain": {"timestamp": "1", "action": "commit", "state": "COMPLETED"},
            "policy": "KEEP_LATEST_COMMITS",
            "version": 2,
            "filePathsToBeDeletedPerPartition": {"p": [{"filePath": "/x", "isBootstrapBaseFile": False}]},
            "partitionsToBeDeleted": [],
        },
        "HoodieCleanMetadata": {
            "startCleanTime": "2",
            "timeTakenInMillis": 3,
            "totalFilesDeleted": 1,
            "earliestCommitToRetain": "1",
            "partitionMetadata": {
                "p": {
                    "partitionPath": "p",
                    "policy": "KEEP_LATEST_COMMITS",
                    "deletePathPatterns": ["x"],
                    "successDeleteFiles": ["x"],
                    "failedDeleteFiles": [],
                    "isPartitionDeleted": False,
                }
            },
            "version": 2,
        },
        "HoodieRollbackPlan": {
            "instantToRollback": {"commitTime": "1", "action": "deltacommit"},
            "RollbackRequests": [
                {
                    "partitionPath": "",
                    "fileId": "f",
                    "latestBaseInstant": "1",
                    "filesToBeDeleted": ["/a"],
                    "logBlocksToBeDeleted": {},
                }
            ],
            "version": 1,
        },
        "HoodieRollbackMetadata": {
            "startRollbackTime": "2",
            "timeTakenInMillis": 1,
            "totalFilesDeleted": 0,
            "commitsRollback": ["1"],
            "partitionMetadata": {},
            "version": 1,
            "instantsRollback": [{"commitTime": "1", "action": "deltacommit"}],
        },
        "HoodieRequestedReplaceMetadata": {
            "operationType": "INSERT_OVERWRITE_TABLE",
            "clusteringPlan": None,
            "extraMetadata": None,
            "version": 1,
        },
        "HoodieDeleteRecordList": {
            "deleteRecordList": [
                {
                    "recordKey": "k",
                    "partitionPath": "p",
                    "orderingVal": ("org.apache.hudi.avro.model.IntWrapper", {"value": 0}),
                }
            ]
        },
    }[name]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_write_container_read_by_fastavro(name):
    data = write_container(name, _records(name))
    reader = fastavro.reader(io.BytesIO(data))
    assert reader.codec == "null" and list(reader.metadata) == ["avro.schema"]
    (rec,) = list(reader)
    again = fastavro.reader(io.BytesIO(data), reader_schema=schema(name))
    assert list(again) == [rec]
    assert read_container(data) == rec


def test_defaults_filled():
    data = write_container(
        "HoodieRollbackPlan", {"instantToRollback": None, "RollbackRequests": [{"partitionPath": "p"}]}
    )
    rec = read_container(data)
    assert rec["version"] == 1
    assert rec["RollbackRequests"][0]["filesToBeDeleted"] == []


def test_bad_containers():
    with pytest.raises(HoodieFormatError):
        read_container(b"")
    with pytest.raises(HoodieFormatError):
        read_container(b"Obj\x01garbage")
    with pytest.raises(HoodieFormatError):
        write_container("HoodieRollbackMetadata", {"startRollbackTime": 1})


def _delete_payload():
    (path,) = glob.glob(str(LOG_FILES / "valid_log_delete" / ".*"))
    buf = open(path, "rb").read()
    assert buf[:6] == b"#HUDI#"
    pos = 6 + 8 + 4
    block_type, n = struct.unpack_from(">ii", buf, pos)
    assert block_type == 1
    pos += 8
    for _ in range(n):
        _key, length = struct.unpack_from(">ii", buf, pos)
        pos += 8 + length
    (content_len,) = struct.unpack_from(">q", buf, pos)
    content = buf[pos + 8 : pos + 8 + content_len]
    version, length = struct.unpack_from(">ii", content, 0)
    assert version == 3 and length == len(content) - 8
    return content[8:]


@pytest.mark.parametrize("schema_json", [avro_models.HOODIE_DELETE_RECORD_LIST, avro_models.DELETE_RECORD_LIST_SCHEMA])
def test_delete_record_list_payload_round_trip(schema_json):
    payload = _delete_payload()
    parsed = fastavro.parse_schema(json.loads(schema_json))
    rec = fastavro.schemaless_reader(io.BytesIO(payload), parsed, None, return_record_name=True)
    assert len(rec["deleteRecordList"]) == 3
    for item in rec["deleteRecordList"]:
        assert item["orderingVal"] == ("org.apache.hudi.avro.model.IntWrapper", {"value": 0})
        assert item["partitionPath"] == "city=san_francisco"
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, rec)
    assert out.getvalue() == payload


def test_wrapper_union_order():
    s = json.loads(avro_models.HOODIE_DELETE_RECORD_LIST)
    union = s["fields"][0]["type"]["items"]["fields"][2]["type"]
    assert [u if u == "null" else u["name"] for u in union] == [
        "null",
        "BooleanWrapper",
        "IntWrapper",
        "LongWrapper",
        "FloatWrapper",
        "DoubleWrapper",
        "BytesWrapper",
        "StringWrapper",
        "DateWrapper",
        "DecimalWrapper",
        "TimeMicrosWrapper",
        "TimestampMicrosWrapper",
    ]


def test_compaction_plan_matches_v8_without_1x_field():
    (path,) = glob.glob(str(LOG_FILES.parent / "hudi-tables" / "trips-mor-avro-v8_trips_8i3u1d.zip"))
    import zipfile

    with zipfile.ZipFile(path) as zf:
        name = next(
            n
            for n in zf.namelist()
            if n.endswith("timeline/20251220210129235.compaction.requested") and "__MACOSX" not in n
        )
        data = zf.read(name)
    plan = read_container(data)
    assert plan["operations"][0]["fileId"]
    extra = (
        ',{"name":"missingSchedulePartitions","type":["null",{"type":"array","items":'
        + avro_models.S
        + '}],"default":null}'
    )
    assert container_schema(data).replace(extra, "") == SCHEMAS["HoodieCompactionPlan"]
    plan.pop("missingSchedulePartitions")
    assert read_container(write_container("HoodieCompactionPlan", plan)) == plan
