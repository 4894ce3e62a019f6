"""Avro schemas of Hudi's timeline models (as Hudi 0.14/0.15's generated classes print them) and
Avro object container files with codec null holding one record."""

import io
import json
import os
from importlib import resources

import fastavro

from ...errors import HoodieFormatError

NAMESPACE = "org.apache.hudi.avro.model"

# Java-generated schemas mark every string (and map keys) with "avro.java.string": "String".
S = '{"type":"string","avro.java.string":"String"}'


def _map(values, extra=""):
    return '{"type":"map","values":%s%s,"avro.java.string":"String"}' % (values, extra)


def _array(items, extra=""):
    return '{"type":"array","items":%s%s}' % (items, extra)


def _field(name, type_, default=None, doc=None, has_default=True):
    out = '{"name":"%s","type":%s' % (name, type_)
    if doc is not None:
        out += ',"doc":%s' % json.dumps(doc)
    if has_default:
        out += ',"default":%s' % json.dumps(default, separators=(",", ":"))
    return out + "}"


def _req(name, type_, doc=None):
    return _field(name, type_, doc=doc, has_default=False)


def _opt(name, type_, doc=None):
    """A ["null", T] field with default null."""
    return _field(name, '["null",%s]' % type_, None, doc)


def _version():
    return _field("version", '["int","null"]', 1)


def _record(name, fields, doc=None, top=False):
    out = '{"type":"record","name":"%s"' % name
    if top:
        out += ',"namespace":"%s"' % NAMESPACE
    if doc is not None:
        out += ',"doc":%s' % json.dumps(doc)
    return out + ',"fields":[%s]}' % ",".join(fields)


_INSTANT_INFO = _record("HoodieInstantInfo", [_req("commitTime", S), _req("action", S)])

HOODIE_ROLLBACK_METADATA = _record(
    "HoodieRollbackMetadata",
    [
        _req("startRollbackTime", S),
        _req("timeTakenInMillis", '"long"'),
        _req("totalFilesDeleted", '"int"'),
        _req("commitsRollback", _array(S)),
        _req(
            "partitionMetadata",
            _map(
                _record(
                    "HoodieRollbackPartitionMetadata",
                    [
                        _req("partitionPath", S),
                        _req("successDeleteFiles", _array(S)),
                        _req("failedDeleteFiles", _array(S)),
                        _opt("rollbackLogFiles", _map('"long"')),
                        _opt("logFilesFromFailedCommit", _map('"long"')),
                    ],
                )
            ),
        ),
        _version(),
        _field("instantsRollback", _array(_INSTANT_INFO, ',"default":[]'), []),
    ],
    top=True,
)

HOODIE_ROLLBACK_PLAN = _record(
    "HoodieRollbackPlan",
    [
        _opt("instantToRollback", _INSTANT_INFO, doc="Hoodie instant that needs to be rolled back"),
        _opt(
            "RollbackRequests",
            _array(
                _record(
                    "HoodieRollbackRequest",
                    [
                        _req("partitionPath", S),
                        _opt("fileId", S),
                        _opt("latestBaseInstant", S),
                        _field("filesToBeDeleted", _array(S, ',"default":[]'), []),
                        _opt("logBlocksToBeDeleted", _map('"long"')),
                    ],
                )
            ),
        ),
        _version(),
    ],
    top=True,
)

_STRING_MAP = _map(S)
_SLICE_INFO = _record(
    "HoodieSliceInfo",
    [
        _opt("dataFilePath", S),
        _opt("deltaFilePaths", _array(S)),
        _req("fileId", '["null",%s]' % S),
        _opt("partitionPath", S),
        _opt("bootstrapFilePath", S),
        _version(),
    ],
)
_CLUSTERING_PLAN = _record(
    "HoodieClusteringPlan",
    [
        _opt(
            "inputGroups",
            _array(
                _record(
                    "HoodieClusteringGroup",
                    [
                        _opt("slices", _array(_SLICE_INFO)),
                        _opt("metrics", _map('"double"')),
                        _field("numOutputFileGroups", '["int","null"]', 1),
                        _opt("extraMetadata", _STRING_MAP),
                        _version(),
                    ],
                )
            ),
        ),
        _opt(
            "strategy",
            _record(
                "HoodieClusteringStrategy",
                [
                    _opt("strategyClassName", S),
                    _opt("strategyParams", _STRING_MAP),
                    _version(),
                ],
            ),
        ),
        _opt("extraMetadata", _STRING_MAP),
        _version(),
        _opt("preserveHoodieMetadata", '"boolean"'),
    ],
)
HOODIE_REQUESTED_REPLACE_METADATA = _record(
    "HoodieRequestedReplaceMetadata",
    [
        _opt("operationType", S),
        _opt("clusteringPlan", _CLUSTERING_PLAN),
        _opt("extraMetadata", _STRING_MAP),
        _version(),
    ],
    top=True,
)

HOODIE_COMPACTION_PLAN = _record(
    "HoodieCompactionPlan",
    [
        _opt(
            "operations",
            _array(
                _record(
                    "HoodieCompactionOperation",
                    [
                        _req("baseInstantTime", '["null",%s]' % S),
                        _opt("deltaFilePaths", _array(S)),
                        _opt("dataFilePath", S),
                        _req("fileId", '["null",%s]' % S),
                        _opt("partitionPath", S),
                        _opt("metrics", _map('"double"')),
                        _opt("bootstrapFilePath", S),
                    ],
                )
            ),
        ),
        _opt("extraMetadata", _STRING_MAP),
        _version(),
        _opt(
            "strategy",
            _record(
                "HoodieCompactionStrategy",
                [
                    _opt(
                        "compactorClassName",
                        S,
                        doc="The class name that is provided here should extend "
                        "CompactionExecutionStrategy abstract class, idea is that the plan generator will also provide the "
                        "execution strategy to use.",
                    ),
                    _opt(
                        "strategyParams",
                        _STRING_MAP,
                        doc="These parameters play a key role in determining which action "
                        "type it is i.e. compaction or logcompaction and it will also include configs that determine how "
                        "compaction needs to be executed.",
                    ),
                    _version(),
                ],
            ),
        ),
        _field("preserveHoodieMetadata", '["boolean","null"]', False),
    ],
    top=True,
)

HOODIE_CLEANER_PLAN = _record(
    "HoodieCleanerPlan",
    [
        _opt(
            "earliestInstantToRetain",
            _record("HoodieActionInstant", [_req("timestamp", S), _req("action", S), _req("state", S)]),
        ),
        _field("lastCompletedCommitTimestamp", S, ""),
        _req("policy", S),
        _opt("filesToBeDeletedPerPartition", _map(_array(S))),
        _version(),
        _opt(
            "filePathsToBeDeletedPerPartition",
            _map(
                _array(
                    _record(
                        "HoodieCleanFileInfo",
                        [
                            _opt("filePath", S),
                            _opt("isBootstrapBaseFile", '"boolean"'),
                        ],
                    )
                )
            ),
            doc="This field replaces the field filesToBeDeletedPerPartition",
        ),
        _opt("partitionsToBeDeleted", _array(S), doc="partitions to be deleted"),
    ],
    top=True,
)

HOODIE_CLEAN_METADATA = _record(
    "HoodieCleanMetadata",
    [
        _req("startCleanTime", S),
        _req("timeTakenInMillis", '"long"'),
        _req("totalFilesDeleted", '"int"'),
        _req("earliestCommitToRetain", S),
        _field("lastCompletedCommitTimestamp", S, ""),
        _req(
            "partitionMetadata",
            _map(
                _record(
                    "HoodieCleanPartitionMetadata",
                    [
                        _req("partitionPath", S),
                        _req("policy", S),
                        _req("deletePathPatterns", _array(S)),
                        _req("successDeleteFiles", _array(S)),
                        _req("failedDeleteFiles", _array(S)),
                        _opt("isPartitionDeleted", '"boolean"'),
                    ],
                )
            ),
        ),
        _version(),
        _opt("bootstrapPartitionMetadata", _map('"HoodieCleanPartitionMetadata"', ',"default":null')),
    ],
    top=True,
)

# Ordering-value wrappers of HoodieDeleteRecord, in union order (branch 1..11; 0 is null).
WRAPPERS = [
    ("BooleanWrapper", "boolean", '"boolean"'),
    ("IntWrapper", "int", '"int"'),
    ("LongWrapper", "long", '"long"'),
    ("FloatWrapper", "float", '"float"'),
    ("DoubleWrapper", "double", '"double"'),
    ("BytesWrapper", "bytes", '"bytes"'),
    ("StringWrapper", "string", S),
    ("DateWrapper", "Date logical", '"int"'),
    ("DecimalWrapper", "Decimal logical", '{"type":"bytes","logicalType":"decimal","precision":30,"scale":15}'),
    ("TimeMicrosWrapper", "Time-micros logical", '{"type":"long","logicalType":"time-micros"}'),
    ("TimestampMicrosWrapper", "Timestamp-micros logical", '"long"'),
]


def _delete_record_list(wrappers):
    union = ",".join(
        _record(
            name,
            [_req("value", value)],
            doc=f"A record wrapping {what} type to be able to be used it w/in Avro's Union",
        )
        for name, what, value in wrappers
    )
    return _record(
        "HoodieDeleteRecordList",
        [
            _req(
                "deleteRecordList",
                _array(
                    _record(
                        "HoodieDeleteRecord",
                        [
                            _opt("recordKey", S, doc="Record key in String"),
                            _opt("partitionPath", S, doc="Partition path in String"),
                            _field(
                                "orderingVal",
                                '["null",%s]' % union,
                                None,
                                doc="Ordering value determining the order of merging on the same key",
                            ),
                        ],
                        doc="Individual Hudi record to delete",
                    )
                ),
                doc="A list of Hudi records to delete",
            ),
        ],
        doc="A list of delete records stored in the delete block in log block version 3",
        top=True,
    )


HOODIE_DELETE_RECORD_LIST = _delete_record_list(WRAPPERS)
# Same bytes on the wire; DateWrapper / TimestampMicrosWrapper values annotated as date / timestamp-micros so
# Python date and datetime values map to them (Hudi's generated classes carry plain int / long there).
DELETE_RECORD_LIST_SCHEMA = _delete_record_list(
    [
        (
            n,
            w,
            '{"type":"int","logicalType":"date"}'
            if n == "DateWrapper"
            else '{"type":"long","logicalType":"timestamp-micros"}'
            if n == "TimestampMicrosWrapper"
            else v,
        )
        for n, w, v in WRAPPERS
    ]
)

HOODIE_MERGE_ARCHIVE_FILE_PLAN = _record(
    "HoodieMergeArchiveFilePlan",
    [_opt("candidate", _array(S)), _opt("mergedArchiveFileName", S)],
    top=True,
)

# HoodieCommitMetadata as Hudi 1.x writes it into a layout-2 timeline (the schema in the header of the commit files it
# writes)
HOODIE_COMMIT_METADATA = json.dumps(
    json.loads(resources.files(__package__).joinpath("resources/HoodieCommitMetadata.avsc").read_text("utf-8")),
    separators=(",", ":"),
)

SCHEMAS = {
    "HoodieCommitMetadata": HOODIE_COMMIT_METADATA,
    "HoodieMergeArchiveFilePlan": HOODIE_MERGE_ARCHIVE_FILE_PLAN,
    "HoodieCompactionPlan": HOODIE_COMPACTION_PLAN,
    "HoodieCleanerPlan": HOODIE_CLEANER_PLAN,
    "HoodieCleanMetadata": HOODIE_CLEAN_METADATA,
    "HoodieRollbackPlan": HOODIE_ROLLBACK_PLAN,
    "HoodieRollbackMetadata": HOODIE_ROLLBACK_METADATA,
    "HoodieRequestedReplaceMetadata": HOODIE_REQUESTED_REPLACE_METADATA,
    "HoodieDeleteRecordList": HOODIE_DELETE_RECORD_LIST,
}
_PARSED: dict[str, dict] = {}


def schema(name):
    """The parsed (fastavro) schema of a Hudi model by simple name."""
    if name not in _PARSED:
        if name not in SCHEMAS:
            raise HoodieFormatError(f"unknown Hudi Avro model {name!r}; known: {', '.join(SCHEMAS)}")
        _PARSED[name] = fastavro.parse_schema(json.loads(SCHEMAS[name]))
    return _PARSED[name]


def _long(n):
    out = bytearray()
    n = (n << 1) ^ (n >> 63)
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _bytes(b):
    return _long(len(b)) + b


def encode(name, record):
    """Avro binary (schemaless) encoding of a record; missing fields take their defaults."""
    buf = io.BytesIO()
    try:
        fastavro.schemaless_writer(buf, schema(name), record)
    except Exception as e:
        raise HoodieFormatError(f"cannot encode {name}: {e}") from None
    return buf.getvalue()


def decode(name, data):
    return fastavro.schemaless_reader(io.BytesIO(data), schema(name), None)


def write_container(schema_name, record, sync=None):
    """An Avro object container file (codec null, only avro.schema metadata, one block of one record)."""
    body = encode(schema_name, record)
    sync = sync or os.urandom(16)
    header = b"Obj\x01" + _long(1) + _bytes(b"avro.schema") + _bytes(SCHEMAS[schema_name].encode()) + _long(0)
    return header + sync + _long(1) + _long(len(body)) + body + sync


def read_container(data):
    """The single record of an Avro container file, resolved with the writer schema in its header."""
    if not data:
        raise HoodieFormatError("empty Avro container (no timeline content)")
    try:
        records = list(fastavro.reader(io.BytesIO(data)))
    except Exception as e:
        raise HoodieFormatError(f"not a readable Avro container file: {e}") from None
    if len(records) != 1:
        raise HoodieFormatError(f"Avro timeline file holds {len(records)} records, expected 1")
    return records[0]


def container_schema(data):
    """The writer schema JSON text stored in a container header."""
    return fastavro.reader(io.BytesIO(data)).metadata["avro.schema"]


def container_sync(data):
    """The 16-byte sync marker of a container file."""
    reader = fastavro.reader(io.BytesIO(data))
    return reader._header["sync"]
