"""Tables with a metadata table, as Hudi 0.14/0.15 writers leave them by default: the writers (the sink, offline
compaction and cleaning) remove it before their first commit, as Hudi's writer with hoodie.metadata.enable=false
does, and the table reads the same before and after, by hudi-rs and by HoodieTable.

The metadata tables are built by hand on copies of a real Hudi-written v6 table, in the layout Hudi 0.14/0.15 give
a data table whose writer had the metadata table on from its first commit (`add_metadata_table`):

- the data table's hoodie.properties gains `hoodie.table.metadata.partitions=files,record_index` and an empty
  `hoodie.table.metadata.partitions.inflight`, stored as Hudi's HoodieTableConfig.update stores it ("Updated at"
  comment, same checksum);
- `.hoodie/metadata/.hoodie/hoodie.properties` holds the keys HoodieBackedTableMetadataWriter.initializeMetaClient
  sets (name `<table>_metadata`, MERGE_ON_READ, HFILE base files, record key `key`, no meta fields,
  HoodieMetadataPayload, HoodieTableMetadataKeyGenerator, table version 6, layout 1, checksum), with the empty
  directories of a new table's .hoodie;
- each partition is initialised at `00000000000000010` (files) and `00000000000000011` (record_index): the
  partition metadata file (depth 1), the first log file of file group `<prefix>-0000-0` holding one empty DELETE
  block written with the default write token `0-0-0` (byte-exact: the test below compares it with the file Hudi
  wrote in the v8 fixture), for `files` an HFile base file at that instant, and a deltacommit on the metadata
  table's flat (layout 1) timeline;
- every completed instant of the data table has a deltacommit of the same time on the metadata table's timeline and
  one more log file version per partition, holding one HFILE_DATA block.

Not byte-exact, and why it is still Hudi's layout: the HFile bytes (base file and HFILE_DATA block content) and the
HoodieMetadataRecord schema of the blocks' SCHEMA header are taken from the metadata table Hudi 1.x wrote in the v8
fixture (this project has no HFile writer), so they are real Hudi HFiles with Hudi's record schema, but their records
name the v8 table's files, not this table's; the JSON of the metadata table's instants is written by this project's
commit metadata writer (Hudi's fields, this table's files); tokens other than `0-0-0` are made up. None of this is
read by a reader of a version-6 data table: hudi-rs 0.5.0 uses a metadata table only for table version 8 and up
(`Table::is_metadata_table_enabled`), HoodieTable lists files; Java readers would use it (their listing comes from
the `files` partition once hoodie.table.metadata.partitions names it), which is why the writers remove it.
"""

import logging
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest
from hudi import HudiReadOptions, HudiTableBuilder

from conftest import TABLE_ZIPS
from hoodie_stream import HoodieStreamSink, HoodieTable, HoodieWriter
from hoodie_stream.compaction.offline import clean_table, compact_table
from hoodie_stream.errors import HoodieConfigError, HoodieTableError
from hoodie_stream.format.log_file.delete_block import delete_content
from hoodie_stream.format.log_file.log_block import BlockType, HeaderKey, LogBlock, decode_block_at
from hoodie_stream.format.log_file.writer import encode_log_file
from hoodie_stream.format.table.config import (
    BACKUP_PATH,
    EMPTY_DIRS,
    METADATA_TABLE_DIR,
    PROPERTIES_PATH,
    TableConfig,
    checksum,
    properties_bytes,
)
from hoodie_stream.format.table.metadata_table import remove_metadata_table
from hoodie_stream.format.table.partition_metadata import read_partition_metadata, write_partition_metadata
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.commit_metadata import CommitMetadata, WriteStat
from hoodie_stream.format.util import java_properties
from hoodie_stream.storage import LocalStorage, storage_for
from oracle import assert_same_rows, rs_read

TABLE = "trips-mor-avro-v6_trips_8i3d"
DATA_COLUMNS = ["ts", "uuid", "rider", "driver", "fare", "city"]
V8 = TABLE_ZIPS / "trips-mor-avro-v8_trips_8i3u1d.zip"
V8_MDT = "v8_trips_8i3u1d/.hoodie/metadata"
MDT_KEYS = ("hoodie.table.metadata.partitions", "hoodie.table.metadata.partitions.inflight")
# metadata table partition -> (file group, initialisation instant): FILES first, then the record index
PARTITIONS = {
    "files": ("files-0000-0", "00000000000000010"),
    "record_index": ("record-index-0000-0", "00000000000000011"),
}
DEFAULT_WRITE_TOKEN = "0-0-0"


def v8_metadata_files():
    """Real Hudi-written metadata table files of the v8 fixture: the `files` partition's first HFile base file, and
    per partition one HFILE_DATA block (SCHEMA header: HoodieMetadataRecord)."""
    with zipfile.ZipFile(V8) as zf:
        base = zf.read(f"{V8_MDT}/files/files-0000-0_0-955-2690_00000000000000000.hfile")
        logs = {
            "files": zf.read(f"{V8_MDT}/files/.files-0000-0_20251220210108078.log.1_10-999-2838"),
            "record_index": zf.read(f"{V8_MDT}/record_index/.record-index-0003-0_20251220210108078.log.1_1-999-2829"),
        }
    blocks = {}
    for partition, data in logs.items():
        block, _ = decode_block_at(data, 0)
        assert block.block_type == BlockType.HFILE_DATA and bytes(block.content[:8]) == b"DATABLK*"
        blocks[partition] = block
    assert base.startswith(b"DATABLK*")
    return base, blocks


def empty_delete_log(instant):
    """The first log file of a metadata table file group: one DELETE block of no record (initializeFileGroups)."""
    return encode_log_file([LogBlock(BlockType.DELETE, {HeaderKey.INSTANT_TIME: instant}, delete_content([], []))])


def _mdt_deltacommit(mdt, instant, operation, stats, schema):
    """A deltacommit on the metadata table's timeline (layout 1: flat in its .hoodie): requested, inflight, completed
    with the write stats {partition: stat}."""
    grouped = {p: [s] for p, s in stats.items()}
    metadata = CommitMetadata(grouped, extra_metadata={"schema": schema}, operation_type=operation)
    mdt.create(f".hoodie/{instant}.deltacommit.requested", b"")
    mdt.create(f".hoodie/{instant}.deltacommit.inflight", CommitMetadata(operation_type=operation).to_json())
    mdt.create(f".hoodie/{instant}.deltacommit", metadata.to_json())


def add_metadata_table(table):
    """Give the table (a path or Storage) a metadata table in Hudi 0.14/0.15's layout (module docstring)."""
    storage = storage_for(table)
    config = TableConfig.load(storage)
    data_instants = [i.timestamp for i in Timeline(storage).commits_timeline()]
    base_hfile, blocks = v8_metadata_files()
    schema = blocks["files"].header[HeaderKey.SCHEMA]
    mdt = storage.child(METADATA_TABLE_DIR)
    mdt_props = {
        "hoodie.table.name": config.table_name + "_metadata",
        "hoodie.table.type": "MERGE_ON_READ",
        "hoodie.table.version": "6",
        "hoodie.timeline.layout.version": "1",
        "hoodie.archivelog.folder": "archived",
        "hoodie.compaction.payload.class": "org.apache.hudi.metadata.HoodieMetadataPayload",
        "hoodie.table.base.file.format": "HFILE",
        "hoodie.table.recordkey.fields": "key",
        "hoodie.populate.meta.fields": "false",
        "hoodie.table.keygenerator.class": "org.apache.hudi.metadata.HoodieTableMetadataKeyGenerator",
        "hoodie.datasource.write.drop.partition.columns": "false",
    }
    mdt_props["hoodie.table.checksum"] = str(checksum(mdt_props))
    for d in EMPTY_DIRS:
        mdt.make_dirs(f".hoodie/{d}")
    mdt.create(".hoodie/hoodie.properties", properties_bytes(mdt_props))
    for partition, (file_id, init) in PARTITIONS.items():
        write_partition_metadata(mdt, partition, init)
        first_log = f".{file_id}_{init}.log.1_{DEFAULT_WRITE_TOKEN}"
        mdt.create(f"{partition}/{first_log}", empty_delete_log(init))
        base = ""
        if partition == "files":
            base = f"{file_id}_0-4-9_{init}.hfile"
            mdt.create(f"{partition}/{base}", base_hfile)
        written = base or first_log
        stat = WriteStat(
            file_id=file_id,
            path=f"{partition}/{written}",
            prev_commit="null",
            num_writes=1,
            num_inserts=1,
            partition_path=partition,
            total_write_bytes=mdt.size(f"{partition}/{written}"),
            file_size_in_bytes=mdt.size(f"{partition}/{written}"),
        )
        _mdt_deltacommit(mdt, init, "BULK_INSERT_PREPPED", {partition: stat}, schema)
    for version, instant in enumerate(data_instants, start=2):
        stats = {}
        for partition, (file_id, init) in PARTITIONS.items():
            block = blocks[partition]
            header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: block.header[HeaderKey.SCHEMA]}
            log_name = f".{file_id}_{init}.log.{version}_0-{20 + version}-{60 + version}"
            size = mdt.create(
                f"{partition}/{log_name}", encode_log_file([LogBlock(BlockType.HFILE_DATA, header, block.content)])
            )
            stats[partition] = WriteStat(
                file_id=file_id,
                path=f"{partition}/{log_name}",
                prev_commit=init,
                num_writes=1,
                num_update_writes=1,
                partition_path=partition,
                total_write_bytes=size,
                file_size_in_bytes=size,
                is_delta=True,
                log_version=version,
                base_file=f"{file_id}_0-4-9_{init}.hfile" if partition == "files" else "",
                log_files=[log_name],
            )
        _mdt_deltacommit(mdt, instant, "UPSERT_PREPPED", stats, schema)
    # the data table's properties, as HoodieTableConfig.update stores them once the partitions are initialised
    props = dict(config.props)
    props["hoodie.table.metadata.partitions"] = ",".join(sorted(PARTITIONS))
    props["hoodie.table.metadata.partitions.inflight"] = ""
    storage.write(PROPERTIES_PATH, properties_bytes(props, "Updated at " + java_properties.java_instant_string()))
    return storage


def snapshot_files(storage, under=".hoodie"):
    """{path: bytes} of every object under `under` (the lease object aside)."""
    return {
        info.path: storage.read(info.path)
        for info in storage.list(under, recursive=True)
        if not info.path.startswith(".hoodie/.locks/")
    }


def assert_removed(storage, original_props):
    """No metadata table left: no directory, no backup, hoodie.properties as it was without the metadata table's
    keys, stored as Hudi's update stores it."""
    assert not storage.exists(METADATA_TABLE_DIR)
    assert not storage.list(METADATA_TABLE_DIR, recursive=True)
    assert not storage.exists(BACKUP_PATH)
    text = storage.read(PROPERTIES_PATH).decode("latin-1")
    assert text.startswith("#Updated at ")
    props = java_properties.loads(text)
    assert props == original_props
    assert not any(k in props for k in MDT_KEYS)
    assert TableConfig.load(storage).props == original_props  # checksum valid
    TableConfig.load(storage).check_writable()


def rs_read_enabled(base):
    """hudi-rs told to use the metadata table (hoodie.metadata.enable=true)."""
    table = HudiTableBuilder.from_base_uri(str(base)).with_hudi_option("hoodie.metadata.enable", "true").build()
    return pa.Table.from_batches(table.read(HudiReadOptions()))


def mdt_warnings(caplog):
    return [r for r in caplog.records if r.levelno == logging.WARNING and "metadata table" in r.getMessage()]


@pytest.fixture
def mdt_table(fixture_table):
    """(base path, rows hudi-rs read before the metadata table was added, hoodie.properties before it)."""
    base = fixture_table(TABLE)
    baseline = rs_read(base)
    original = dict(TableConfig.load(base).props)
    add_metadata_table(base)
    return base, baseline, original


# -- the hand-built metadata table -------------------------------------------------------------------------------
def test_hand_built_metadata_table_has_hudi_layout(mdt_table):
    base, _baseline, original = mdt_table
    storage = LocalStorage(base)
    # the first log file of a file group is byte for byte the one Hudi wrote in the v8 fixture's metadata table
    with zipfile.ZipFile(V8) as zf:
        real = zf.read(f"{V8_MDT}/files/.files-0000-0_00000000000000000.log.1_0-0-0")
    assert empty_delete_log("00000000000000000") == real
    assert storage.read(f"{METADATA_TABLE_DIR}/files/.files-0000-0_00000000000000010.log.1_0-0-0") == empty_delete_log(
        "00000000000000010"
    )
    mdt = storage.child(METADATA_TABLE_DIR)
    mdt_config = TableConfig.load(mdt)
    assert mdt_config.table_name == "v6_trips_8i3d_metadata" and mdt_config.base_file_format == "HFILE"
    assert not mdt_config.populate_meta_fields
    assert read_partition_metadata(mdt, "files") == {"commitTime": "00000000000000010", "partitionDepth": "1"}
    instants = [i.timestamp for i in Timeline(mdt).commits_timeline()]
    data_instants = [i.timestamp for i in Timeline(storage).commits_timeline()]
    assert instants == ["00000000000000010", "00000000000000011", *data_instants]
    config = TableConfig.load(storage)
    assert config.props["hoodie.table.metadata.partitions"] == "files,record_index"
    assert config.metadata_table_keys == ["hoodie.table.metadata.partitions"]
    assert {k: v for k, v in config.props.items() if k not in MDT_KEYS} == original
    with pytest.raises(HoodieTableError, match="metadata"):
        config.check_writable()


# -- readers -----------------------------------------------------------------------------------------------------
def test_readers_list_files_and_read_the_same_before_and_after_the_removal(mdt_table, caplog):
    base, baseline, original = mdt_table
    storage = LocalStorage(base)
    assert baseline.num_rows > 0
    ours_before = HoodieTable(base).read()
    files_before = snapshot_files(storage)

    # with the metadata table: hudi-rs (even told to use it) and HoodieTable read the rows they read without it,
    # and reading changes nothing
    assert_same_rows(rs_read(base), baseline, context="hudi-rs with a metadata table")
    assert_same_rows(rs_read_enabled(base), baseline, context="hudi-rs with hoodie.metadata.enable=true")
    assert_same_rows(HoodieTable(base).read(), ours_before, context="HoodieTable with a metadata table")
    assert snapshot_files(storage) == files_before

    # the low-level writer, which holds no lease, refuses the table until a writer holding it removed it
    with pytest.raises(HoodieTableError, match="metadata"):
        HoodieWriter(base)
    caplog.set_level(logging.INFO, logger="hoodie_stream")
    assert remove_metadata_table(base)
    assert_removed(storage, original)
    (warning,) = mdt_warnings(caplog)
    message = warning.getMessage()
    assert str(base) in message and "does not maintain a metadata table" in message
    assert "hoodie.metadata.enable=false" in message and "list" in message
    HoodieWriter(base)

    assert_same_rows(rs_read(base), baseline, context="hudi-rs after the removal")
    assert_same_rows(HoodieTable(base).read(), ours_before, context="HoodieTable after the removal")
    # the data files, the timeline and the other .hoodie files are untouched
    after = snapshot_files(storage)
    assert {p: b for p, b in files_before.items() if not p.startswith(METADATA_TABLE_DIR) and p != PROPERTIES_PATH} == {
        p: b for p, b in after.items() if p != PROPERTIES_PATH
    }
    # a second removal finds nothing to do and says nothing
    caplog.clear()
    assert not remove_metadata_table(base)
    assert not mdt_warnings(caplog)


def test_metadata_enable_stored_in_hoodie_properties_is_removed(fixture_table):
    base = fixture_table(TABLE)
    storage = LocalStorage(base)
    original = dict(TableConfig.load(storage).props)
    props = dict(original, **{"hoodie.metadata.enable": "true"})
    storage.write(PROPERTIES_PATH, properties_bytes(props))
    assert TableConfig.load(storage).metadata_table_keys == ["hoodie.metadata.enable"]
    assert remove_metadata_table(storage)
    assert_removed(storage, original)


# -- interrupted removals ----------------------------------------------------------------------------------------
class Crash(BaseException):
    """The process dies here."""


class CrashingStorage(LocalStorage):
    """A local storage whose process dies right after one operation on one path (for `delete_tree`: after part of
    the tree is deleted)."""

    def __init__(self, root, op, path):
        super().__init__(root)
        self.crash_at = (op, path)

    def create(self, path, data=b""):
        size = super().create(path, data)
        if self.crash_at == ("create", path):
            raise Crash(path)
        return size

    def delete(self, path):
        done = super().delete(path)
        if done and self.crash_at == ("delete", path):
            raise Crash(path)
        return done

    def delete_tree(self, path):
        if self.crash_at != ("delete_tree", path):
            return super().delete_tree(path)
        infos = self.list(path, recursive=True)
        first = [i.path for i in infos if i.path.endswith(".hoodie/hoodie.properties")] + [i.path for i in infos[::2]]
        for p in first:
            super().delete(p)
        raise Crash(path)


CRASHES = {
    "after the backup": ("create", BACKUP_PATH),
    "after hoodie.properties was deleted": ("delete", PROPERTIES_PATH),
    "after hoodie.properties was rewritten": ("create", PROPERTIES_PATH),
    "after the backup was deleted": ("delete", BACKUP_PATH),
    "in the middle of deleting the directory": ("delete_tree", METADATA_TABLE_DIR),
}


@pytest.mark.parametrize("crash", list(CRASHES))
def test_an_interrupted_removal_is_finished_by_the_next_writer(mdt_table, crash, caplog):
    base, baseline, original = mdt_table
    ours_before = HoodieTable(base).read()
    with pytest.raises(Crash):
        remove_metadata_table(CrashingStorage(base, *CRASHES[crash]))
    storage = LocalStorage(base)

    # the table is never without readable properties: hoodie.properties, else the backup
    config = TableConfig.load(storage)
    assert {k: v for k, v in config.props.items() if k not in MDT_KEYS} == original
    keys_gone = crash not in ("after the backup", "after hoodie.properties was deleted")
    assert (config.metadata_table_keys == []) == keys_gone
    assert storage.exists(METADATA_TABLE_DIR)
    assert storage.exists(BACKUP_PATH) == (
        CRASHES[crash][0] != "delete_tree" and crash != "after the backup was deleted"
    )
    assert_same_rows(HoodieTable(base).read(), ours_before, context=f"HoodieTable, crash {crash}")
    if storage.exists(PROPERTIES_PATH):  # hudi-rs reads no backup (Java's readers do)
        assert_same_rows(rs_read(base), baseline, context=f"hudi-rs, crash {crash}")

    caplog.set_level(logging.WARNING, logger="hoodie_stream")
    assert remove_metadata_table(base)
    assert_removed(storage, original)
    assert len(mdt_warnings(caplog)) == 1
    assert_same_rows(rs_read(base), baseline, context=f"hudi-rs after finishing, crash {crash}")
    assert_same_rows(HoodieTable(base).read(), ours_before, context=f"HoodieTable after finishing, crash {crash}")


# -- the writers -------------------------------------------------------------------------------------------------
def test_offline_compaction_removes_the_metadata_table(mdt_table, caplog):
    base, baseline, original = mdt_table
    caplog.set_level(logging.WARNING, logger="hoodie_stream")
    lines = list(compact_table(str(base), schedule=True, run=False))
    assert lines[0].startswith("removed the metadata table")
    assert lines[-1].startswith("scheduled compaction")
    assert_removed(LocalStorage(base), original)
    assert len(mdt_warnings(caplog)) == 1
    assert_same_rows(rs_read(base), baseline, context="hudi-rs after offline compaction scheduling")


def test_offline_cleaning_removes_the_metadata_table(mdt_table, caplog):
    base, baseline, original = mdt_table
    caplog.set_level(logging.WARNING, logger="hoodie_stream")
    assert clean_table(str(base)) == 0
    assert_removed(LocalStorage(base), original)
    assert len(mdt_warnings(caplog)) == 1
    assert_same_rows(rs_read(base), baseline, context="hudi-rs after offline cleaning")


def test_the_sink_refuses_to_write_a_metadata_table(mdt_table):
    base, _baseline, _original = mdt_table
    files_before = snapshot_files(LocalStorage(base))
    options = {"hoodie.datasource.write.recordkey.field": "uuid", "hoodie.metadata.enable": "true"}
    with pytest.raises(HoodieConfigError, match="hoodie.metadata.enable.*does not write a metadata table"):
        HoodieStreamSink(str(base), options)
    assert snapshot_files(LocalStorage(base)) == files_before


def test_a_sink_micro_batch_removes_the_metadata_table_and_writes_the_rows(spark, mdt_table, caplog):
    base, baseline, original = mdt_table
    current = baseline.select(DATA_COLUMNS).to_pylist()
    assert len(current) >= 4
    # plain-Python model of the table: record key -> row; an upsert with a greater `ts` replaces the row
    model = {r["uuid"]: r for r in current}
    updates = [dict(r, ts=r["ts"] + 1000, fare=r["fare"] + 0.5, driver="driver-streamed") for r in current[::3]]
    inserts = [
        {"ts": 1, "uuid": f"new-{i}", "rider": f"rider-{i}", "driver": "d", "fare": 1.5 * i, "city": city}
        for i, city in enumerate(["chennai", "sao_paulo", "london"])
    ]
    for r in updates + inserts:
        model[r["uuid"]] = r
    schema = pa.schema(
        [("ts", pa.int64()), ("uuid", pa.string()), ("rider", pa.string()), ("driver", pa.string()),
         ("fare", pa.float64()), ("city", pa.string())]
    )  # fmt: skip
    batch = spark.createDataFrame(pa.Table.from_pylist(updates + inserts, schema=schema).to_pandas())
    sink = HoodieStreamSink(
        str(base),
        {
            "hoodie.datasource.write.recordkey.field": "uuid",
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.datasource.write.partitionpath.field": "city",
            "hoodie.datasource.write.hive_style_partitioning": "true",
            "compaction.schedule.enabled": "false",
        },
    )
    caplog.set_level(logging.WARNING, logger="hoodie_stream")
    try:
        sink(batch, 0)
    finally:
        sink.close()
    assert sink.last_result.instant is not None
    assert_removed(LocalStorage(base), original)
    (warning,) = mdt_warnings(caplog)
    assert str(base) in warning.getMessage()

    expected = pa.Table.from_pylist(sorted(model.values(), key=lambda r: r["uuid"]), schema=schema)
    after = rs_read(base)
    assert_same_rows(after.select(DATA_COLUMNS), expected, context="hudi-rs after the micro-batch vs the model")
    assert_same_rows(HoodieTable(base).read(), after, context="HoodieTable vs hudi-rs after the micro-batch")


def test_on_object_storage(s3_table, fixture_table, caplog):
    uri, options = s3_table
    local = Path(fixture_table(TABLE))
    storage = storage_for(uri, options)
    for path in sorted(p for p in local.rglob("*") if p.is_file() and p.name != ".DS_Store"):
        storage.write(path.relative_to(local).as_posix(), path.read_bytes())
    baseline = rs_read(uri, storage_options=options)
    original = dict(TableConfig.load(storage).props)
    add_metadata_table(storage)
    assert storage.exists(METADATA_TABLE_DIR)  # a prefix: no object is named so
    assert_same_rows(rs_read(uri, storage_options=options), baseline, context="hudi-rs on S3 with a metadata table")

    caplog.set_level(logging.WARNING, logger="hoodie_stream")
    assert remove_metadata_table(storage)
    assert_removed(storage, original)
    assert len(mdt_warnings(caplog)) == 1
    assert_same_rows(rs_read(uri, storage_options=options), baseline, context="hudi-rs on S3 after the removal")
    assert_same_rows(HoodieTable(uri, storage_options=options).read(), baseline, context="HoodieTable on S3")
