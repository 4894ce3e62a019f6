"""File-system view rules checked end to end: pending compactions, replaced file groups, uncommitted files."""

import pyarrow as pa

from hoodie_stream.format.avro.models import write_container
from hoodie_stream.format.file_group.fs_view import FileSystemView
from hoodie_stream.format.hoodie_table import HoodieTable
from hoodie_stream.format.timeline.instant import new_instant_time
from hoodie_stream.format.write.writer import HoodieWriter
from oracle import assert_same_rows, rs_read

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("v", pa.string())])


def rows(*triples, part="p1"):
    return pa.Table.from_pylist([{"id": k, "part": part, "ts": ts, "v": v} for k, ts, v in triples], schema=SCHEMA)


def new_table(base):
    return HoodieWriter.create(
        base,
        table_name="view",
        record_key_fields=["id"],
        schema=SCHEMA,
        precombine_field="ts",
        partition_fields=["part"],
    )


def visible(table, **kw):
    t = table.read(**kw)
    return sorted(zip(t["id"].to_pylist(), t["v"].to_pylist()))


def test_logs_under_pending_compaction_join_the_previous_slice(tmp_path):
    base = str(tmp_path)
    writer = new_table(base)
    txn = writer.start()
    first = txn.insert_log_only("p1", rows(("a", 1, "a1"), ("b", 1, "b1"), ("c", 1, "c1")))
    i1 = txn.commit()
    # a compaction is planned for the slice, but not executed
    compaction = new_instant_time(writer.timeline.last_instant_time())
    plan = {
        "operations": [
            {
                "baseInstantTime": i1,
                "deltaFilePaths": [first.path.rsplit("/", 1)[-1]],
                "dataFilePath": None,
                "fileId": first.file_id,
                "partitionPath": "p1",
                "metrics": {},
                "bootstrapFilePath": None,
            }
        ],
        "extraMetadata": None,
        "version": 2,
        "strategy": None,
        "preserveHoodieMetadata": None,
    }
    writer.timeline.create_requested(compaction, "compaction", write_container("HoodieCompactionPlan", plan))
    writer.timeline.reload()
    # a later write goes to the new slice (base instant = the compaction instant)
    txn = writer.start()
    txn.append_log("p1", first.file_id, compaction, rows(("b", 2, "b2")), deletes=(["c"], [5]))
    txn.commit()

    view = FileSystemView(base)
    (fs,) = list(view.latest_slices())
    assert fs.base_instant == i1 and len(fs.log_files) == 2 and fs.base_file is None
    table = HoodieTable(base)
    assert visible(table) == [("a", "a1"), ("b", "b2")]
    assert visible(table, as_of=i1) == [("a", "a1"), ("b", "b1"), ("c", "c1")]
    assert table.read("read_optimized").num_rows == 0


def test_replaced_file_groups_are_hidden(tmp_path):
    base = str(tmp_path)
    writer = new_table(base)
    txn = writer.start(action="commit", operation="INSERT")
    old = txn.write_base("p1", rows(("a", 1, "a1"), ("b", 1, "b1")))
    kept = txn.write_base("p2", rows(("x", 1, "x1"), part="p2"))
    i1 = txn.commit()
    txn = writer.start(action="replacecommit", operation="INSERT_OVERWRITE")
    txn.write_base("p1", rows(("c", 1, "c1")))
    txn.commit(replaced={"p1": [old.file_id]})

    table = HoodieTable(base)
    assert visible(table) == [("c", "c1"), ("x", "x1")]
    assert visible(table, as_of=i1) == [("a", "a1"), ("b", "b1"), ("x", "x1")]
    assert_same_rows(table.read(), rs_read(base), context="after replace")
    assert_same_rows(table.read(as_of=i1), rs_read(base, as_of=i1), context="before replace")
    assert kept.file_id in {fs.file_id for fs in FileSystemView(base).latest_slices()}


def test_uncommitted_and_rolled_back_files_are_ignored(tmp_path):
    base = str(tmp_path)
    writer = new_table(base)
    txn = writer.start()
    group = txn.insert_log_only("p1", rows(("a", 1, "a1")))
    i1 = txn.commit()
    pending = writer.start()
    pending.append_log("p1", group.file_id, i1, rows(("a", 9, "a-pending")))
    pending.write_base("p1", rows(("z", 1, "z-pending")))
    table = HoodieTable(base)
    assert visible(table) == [("a", "a1")]
    assert_same_rows(table.read(), rs_read(base), context="with a pending instant")
    pending.rollback()
    txn = writer.start()
    txn.append_log("p1", group.file_id, i1, rows(("a", 2, "a2")))
    txn.commit()
    table = HoodieTable(base)
    assert visible(table) == [("a", "a2")]
    assert_same_rows(table.read(), rs_read(base), context="after rollback and a new write")
