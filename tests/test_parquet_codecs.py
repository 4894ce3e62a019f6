"""hoodie.parquet.compression.codec: parsing and refusal, and base files, compacted base files and PARQUET_DATA log
blocks written with each codec, read back exactly by hudi-rs and by the project's reader."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hoodie_stream import HoodieTable
from hoodie_stream.compaction.execute import CompactTask, compact_operation
from hoodie_stream.compaction.operation import plan_operations
from hoodie_stream.compaction.plan import pending_plans, schedule_compaction
from hoodie_stream.errors import HoodieConfigError
from hoodie_stream.format.base_file.parquet import PARQUET_CODECS, read_base_file, read_footer, write_base_file
from hoodie_stream.format.file_group.file_names import parse_log_file_name
from hoodie_stream.format.log_file.data_block import parquet_data_content, read_parquet_content
from hoodie_stream.format.log_file.log_block import BlockType, LogBlock
from hoodie_stream.format.log_file.reader import read_log_file
from hoodie_stream.format.log_file.writer import encode_log_file
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.format.timeline.commit_metadata import CommitMetadata
from hoodie_stream.format.write.writer import HoodieWriter
from hoodie_stream.options import parse_compaction_options, parse_options, parse_table_service_options
from oracle import assert_same_rows, rs_read
from storage_helpers import at

CODECS = list(PARQUET_CODECS)
# the codec a parquet footer names for each (pyarrow's names; lz4 is parquet's LZ4_RAW, which pyarrow calls LZ4)
FOOTER_CODEC = {"gzip": "GZIP", "snappy": "SNAPPY", "zstd": "ZSTD", "lz4": "LZ4", "uncompressed": "UNCOMPRESSED"}
KEY = "hoodie.parquet.compression.codec"


def codecs_of(path):
    md = pq.ParquetFile(path).metadata
    return {md.row_group(g).column(c).compression for g in range(md.num_row_groups) for c in range(md.num_columns)}


# ------------------------------------------------------------------------------------------------ the option


def test_default_is_gzip_as_in_hudi():
    assert parse_compaction_options().parquet_codec == "gzip"
    assert parse_options("/t/orders", {"hoodie.datasource.write.recordkey.field": "id"}).parquet_codec == "gzip"


@pytest.mark.parametrize(
    ("given", "codec"),
    [("gzip", "gzip"), ("SNAPPY", "snappy"), ("Zstd", "zstd"), (" lz4 ", "lz4"), ("UNCOMPRESSED", "uncompressed")],
)
def test_codec_names_read_in_any_case(given, codec):
    assert parse_compaction_options({KEY: given}).parquet_codec == codec
    sink = parse_options("/t/orders", {"hoodie.datasource.write.recordkey.field": "id", KEY: given})
    assert sink.parquet_codec == sink.compaction.parquet_codec == codec
    # offline compaction (python -m hoodie_stream compact --option KEY=VALUE) takes it too
    assert parse_table_service_options({KEY: given})[0].parquet_codec == codec


def test_empty_codec_means_uncompressed_as_in_hudi():
    assert parse_compaction_options({KEY: ""}).parquet_codec == "uncompressed"


@pytest.mark.parametrize("bad", ["lzo", "brotli", "lz4_raw", "none", "gz", "snappy,gzip", "zstd:3"])
def test_other_codecs_are_refused_naming_the_option(bad):
    for parse in (
        lambda: parse_compaction_options({KEY: bad}),
        lambda: parse_table_service_options({KEY: bad}),
        lambda: parse_options("/t/orders", {"hoodie.datasource.write.recordkey.field": "id", KEY: bad}),
    ):
        with pytest.raises(HoodieConfigError, match=f"option '{KEY}' must be one of .*got '{bad}'"):
            parse()


def test_writers_refuse_an_unknown_codec_before_writing(tmp_path):
    with pytest.raises(HoodieConfigError, match="parquet codec"):
        HoodieWriter.create(
            str(tmp_path / "t"), table_name="t", record_key_fields=["id"], schema=SCHEMA, parquet_codec="brotli"
        )
    assert not (tmp_path / "t").exists()
    with pytest.raises(HoodieConfigError, match="parquet codec"):
        write_base_file(*at(tmp_path / "f.parquet"), table_with_meta(3), compression="lzo")
    with pytest.raises(HoodieConfigError, match="parquet codec"):
        parquet_data_content(pa.table({"a": [1]}), compression="none")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ base files

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.int64()),
        ("name", pa.string()),
        ("fare", pa.float64()),
        ("tags", pa.list_(pa.string())),
        ("city", pa.string()),
    ]
)


def rows(ids, ts, seed=0):
    rng = np.random.default_rng(seed + ts)
    n = len(ids)
    names = np.array(["ana", "bø", "", "long-" + "x" * 300, "日本"])[ids % 5]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array(np.full(n, ts), pa.int64()),
            "name": pa.array(names, pa.string(), mask=ids % 7 == 3),
            "fare": pa.array(rng.random(n) * 100),
            "tags": pa.array([["a"] * int(i % 3) for i in ids], pa.list_(pa.string())),
            "city": pa.array(np.array(["sf", "nyc", "chennai"])[ids % 3]),
        },
        schema=SCHEMA,
    )


def table_with_meta(n):
    data = rows(np.arange(n), 1)
    meta = {
        "_hoodie_commit_time": ["20250618054711154"] * n,
        "_hoodie_commit_seqno": [f"20250618054711154_0_{i}" for i in range(n)],
        "_hoodie_record_key": [f"k{i}" for i in range(n)],
        "_hoodie_partition_path": [""] * n,
        "_hoodie_file_name": ["f.parquet"] * n,
    }
    return pa.table(
        {**{k: pa.array(v, pa.string()) for k, v in meta.items()}, **dict(zip(data.column_names, data.columns))}
    )


@pytest.mark.parametrize("codec", CODECS)
def test_base_file_round_trip_with_each_codec(tmp_path, codec):
    table = table_with_meta(500)
    path = tmp_path / "f.parquet"
    write_base_file(*at(path), table, compression=codec)
    assert codecs_of(path) == {FOOTER_CODEC[codec]}
    assert read_base_file(*at(path)).equals(table)
    assert read_footer(*at(path))["hoodie_min_record_key"] == "k0"


def build_table(base, codec, n=3000, groups=3):
    """Base files written with `codec`, then two delta commits of updates, inserts and deletes in log files."""
    writer = HoodieWriter.create(
        str(base),
        table_name="codecs",
        record_key_fields=["id"],
        schema=SCHEMA,
        precombine_field="ts",
        parquet_codec=codec,
    )
    txn = writer.start(operation="INSERT")
    slices = [(chunk, txn.write_base("", rows(chunk, 1))) for chunk in np.array_split(np.arange(n), groups)]
    first = txn.commit()
    for ts in (2, 3):
        txn = writer.start()
        for chunk, stat in slices:
            updated = chunk[(chunk * ts) % 5 == 0]
            deleted = chunk[(chunk * ts) % 11 == 1]
            txn.append_log(
                "",
                stat.file_id,
                first,
                rows(np.concatenate([updated, [n * ts + int(chunk[0])]]), ts),
                deletes=(pa.array([str(k) for k in deleted]), None),
                base_file=stat.path.rsplit("/", 1)[-1],
            )
        txn.commit()
    return [stat.path for _chunk, stat in slices]


def same_as_hudi_rs(base, context):
    ours = HoodieTable(str(base)).read()
    theirs = rs_read(base)
    assert ours.num_rows == theirs.num_rows > 0, context
    assert_same_rows(ours, theirs, context=context)
    return ours


@pytest.mark.parametrize("codec", CODECS)
def test_hudi_rs_reads_base_files_written_with_each_codec(tmp_path, codec):
    base = tmp_path / "t"
    paths = build_table(base, codec)
    for rel in paths:
        assert codecs_of(base / rel) == {FOOTER_CODEC[codec]}
    same_as_hudi_rs(base, codec)
    gzip_base = tmp_path / "gzip"
    build_table(gzip_base, "gzip")
    # the codec changes the bytes, not the records
    assert_same_rows(HoodieTable(str(base)).read(), HoodieTable(str(gzip_base)).read(), columns=list(SCHEMA.names))


@pytest.mark.parametrize("codec", CODECS)
def test_hudi_rs_reads_base_files_compacted_with_each_codec(tmp_path, codec):
    base = tmp_path / "t"
    build_table(base, "gzip")
    before = same_as_hudi_rs(base, "before compaction")
    tl = Timeline(str(base))
    instant = schedule_compaction(str(base), tl, parse_compaction_options(), force=True)
    tl.transition_to_inflight(instant, "compaction", b"")
    committed = {i.timestamp for i in tl.commits_timeline()}
    stats = [
        compact_operation(str(base), instant, op, committed, 100 << 20, f"{k}-1-0", codec)[0]
        for k, op in enumerate(plan_operations(pending_plans(tl)[instant]))
    ]
    tl.complete(instant, "compaction", CommitMetadata({}, True, {}, "COMPACT").with_stats(stats).to_json())
    for stat in stats:
        assert codecs_of(base / stat.path) == {FOOTER_CODEC[codec]}
        assert read_footer(str(base), stat.path)["writer.model.name"] == "avro"
    after = same_as_hudi_rs(base, f"compacted with {codec}")
    assert_same_rows(after, before, columns=list(SCHEMA.names) + ["_hoodie_record_key", "_hoodie_commit_time"])
    assert_same_rows(rs_read(base, "read_optimized"), after, columns=list(SCHEMA.names))


def test_compact_task_carries_the_codec():
    task = CompactTask(None, "20250101000000000", set(), 1 << 20, 0, "zstd")
    assert task.compression == "zstd"
    assert CompactTask(None, "20250101000000000", set(), 1 << 20).compression == "gzip"


# ------------------------------------------------------------------------------------------- PARQUET_DATA blocks


@pytest.mark.parametrize("codec", CODECS)
def test_parquet_data_blocks_with_each_codec_read_by_hudi_rs(fixture_table, codec):
    """The fixture's Spark-written PARQUET_DATA blocks rewritten with each codec: both readers read the same rows."""
    base = fixture_table("sample-mor-parquet-v6_nonpartitioned")
    before_ours, before_rs = HoodieTable(str(base)).read(), rs_read(base)
    rewritten = 0
    for path in sorted(p for p in base.rglob(".*.log.*") if parse_log_file_name(p.name)):
        blocks = read_log_file(*at(path))
        new = []
        for block in blocks:
            if block.block_type == BlockType.PARQUET_DATA:
                records = read_parquet_content(block.content)
                content = parquet_data_content(records, compression=codec)
                assert codecs_of(pa.BufferReader(content)) == {FOOTER_CODEC[codec]}
                assert read_parquet_content(content).equals(records)
                block = LogBlock(block.block_type, block.header, content, block.footer)
                rewritten += 1
            new.append(block)
        path.write_bytes(encode_log_file(new))
    assert rewritten
    assert_same_rows(HoodieTable(str(base)).read(), before_ours, context=codec)
    assert_same_rows(rs_read(base), before_rs, context=codec)
    same_as_hudi_rs(base, codec)


def test_offline_compaction_writes_its_codec(tmp_path, spark):
    from hoodie_stream.compaction.offline import compact_table

    base = tmp_path / "t"
    build_table(base, "gzip")
    report = list(compact_table(str(base), options={KEY: "zstd"}, spark=spark))
    (instant,) = [line.split()[-1] for line in report if line.startswith("completed compaction")]
    compacted = list(base.glob(f"*_{instant}.parquet"))
    assert len(compacted) == 3
    for path in compacted:
        assert codecs_of(path) == {"ZSTD"}
