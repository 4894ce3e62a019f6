"""Streaming upserts and deletes into copies of the real v6 MOR tables Apache Hudi wrote: they land in the existing
file groups (the index state is rebuilt from the table) and hudi-rs reads the expected rows."""

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.errors import HoodieTableError
from hoodie_stream.format.file_group.fs_view import FileSystemView
from hoodie_stream.format.record.keygen import make_key_generator
from oracle import assert_same_rows, rs_read

TABLES = [
    "trips-mor-avro-v6_trips_8i1u",
    "trips-mor-avro-v6_trips_8i3d",
    "sample-mor-parquet-v6_complexkeygen_hivestyle",
    "sample-mor-parquet-v6_nonpartitioned",
    "sample-mor-parquet-v6_nonpartitioned_rollback",
    "sample-mor-parquet-v6_simplekeygen_nonhivestyle",
    "sample-mor-parquet-v6_simplekeygen_nonhivestyle_overwritetable",
]


def sink_options(cfg, **extra):
    opts = {
        "hoodie.table.name": cfg.table_name,
        "hoodie.datasource.write.recordkey.field": ",".join(cfg.record_key_fields),
        "hoodie.datasource.write.partitionpath.field": ",".join(cfg.partition_fields or []),
        "hoodie.datasource.write.hive_style_partitioning": str(cfg.hive_style).lower(),
    }
    if cfg.precombine_field:
        opts["hoodie.datasource.write.precombine.field"] = cfg.precombine_field
    opts.update(extra)
    return opts


def _changed_column(schema, cfg):
    fixed = set(cfg.record_key_fields) | set(cfg.partition_fields or []) | {cfg.precombine_field}
    for f in schema:
        if (pa.types.is_string(f.type) or pa.types.is_floating(f.type)) and f.name not in fixed:
            return f.name
    raise AssertionError("no column to update")


def _new_values(field, n):
    if pa.types.is_string(field.type):
        return pa.array([f"streamed-{i}" for i in range(n)], pa.string())
    return pa.array([1000.5 + i for i in range(n)], pa.float64()).cast(field.type)


@pytest.mark.parametrize("name", TABLES)
def test_upserts_and_deletes_land_in_existing_file_groups(spark, fixture_table, name):
    base = str(fixture_table(name))
    table = HoodieTable(base)
    cfg = table.config
    data_schema = table.arrow_schema(meta_fields=False)
    before = rs_read(base)
    groups_before = {(fs.partition, fs.file_id) for fs in FileSystemView(base).latest_slices()}
    current = before.select(data_schema.names).cast(data_schema)
    keygen = make_key_generator(cfg.props)
    keys = keygen.record_keys(current).to_pylist()
    n = current.num_rows
    assert n >= 1
    column = _changed_column(data_schema, cfg)

    # batch 0: update every other existing row in place
    upd_idx = list(range(0, n, 2))
    updates = current.take(upd_idx)
    updates = updates.set_column(
        data_schema.get_field_index(column), column, _new_values(data_schema.field(column), len(upd_idx))
    )
    if cfg.precombine_field:
        col = data_schema.get_field_index(cfg.precombine_field)
        bumped = pc.add(pc.fill_null(updates[cfg.precombine_field], 0), 1000).cast(data_schema.field(col).type)
        updates = updates.set_column(col, cfg.precombine_field, bumped)
    sink = HoodieStreamSink(base, sink_options(cfg))
    sink(spark.createDataFrame(updates), 0)
    result = sink.last_result
    assert result.instant is not None and result.num_writes == len(upd_idx)
    assert {(s.partition_path, s.file_id) for s in result.stats} <= groups_before
    assert all(s.prev_commit != "null" for s in result.stats)

    # batch 1: delete the last row (operation delete)
    delete_sink = HoodieStreamSink(base, sink_options(cfg, **{"hoodie.datasource.write.operation": "delete"}))
    deleted_row = current.slice(n - 1, 1)
    if cfg.precombine_field:
        col = data_schema.get_field_index(cfg.precombine_field)
        deleted_row = deleted_row.set_column(
            col,
            cfg.precombine_field,
            pc.add(pc.fill_null(deleted_row[cfg.precombine_field], 0), 2000).cast(data_schema.field(col).type),
        )
    delete_sink(spark.createDataFrame(deleted_row), 1)
    assert {(s.partition_path, s.file_id) for s in delete_sink.last_result.stats} <= groups_before

    # expected rows: the original ones with the updates applied and the deleted key gone
    updated = dict(zip([keys[i] for i in upd_idx], updates.to_pylist()))
    expected_rows = []
    for key, row in zip(keys, current.to_pylist()):
        if key == keys[n - 1]:
            continue
        expected_rows.append(updated.get(key, row))
    expected = pa.Table.from_pylist(expected_rows, schema=data_schema)
    after = rs_read(base)
    assert_same_rows(after.select(data_schema.names), expected, context=f"{name} hudi-rs vs expected")
    assert_same_rows(HoodieTable(base).read(), after, context=f"{name} ours vs hudi-rs")


def test_tables_without_meta_fields_are_refused(spark, fixture_table):
    base = str(fixture_table("sample-mor-parquet-v6_simplekeygen_hivestyle_no_metafields"))
    table = HoodieTable(base)
    sink = HoodieStreamSink(base, sink_options(table.config))
    rows = table.read()
    with pytest.raises(HoodieTableError, match="populate.meta.fields"):
        sink(spark.createDataFrame(rows.slice(0, 1)), 0)
