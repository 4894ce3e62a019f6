"""A table of three delta commits at known instant times (a1 | a2, b1 | c1, one file group), written without
Spark: the `timed_table` fixture (conftest) of the time-travel and incremental-argument tests."""

import pyarrow as pa
import pytest

from hoodie_stream.format.write.writer import HoodieWriter

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string())])
INSTANTS = ["20261123204819500", "20261123204820123", "20261123204821000"]


@pytest.fixture
def timed_table(tmp_path):
    """Three commits at known instant times: a1 | a2, b1 | c1."""
    base = str(tmp_path / "timed")
    writer = HoodieWriter.create(
        base, table_name="timed", record_key_fields=["id"], schema=SCHEMA, precombine_field="ts"
    )
    batches = [[("a", 1, "a1")], [("a", 2, "a2"), ("b", 1, "b1")], [("c", 1, "c1")]]
    file_id = None
    for instant, batch in zip(INSTANTS, batches):
        txn = writer.start(instant_time=instant)
        records = pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in batch], schema=SCHEMA)
        if file_id is None:
            file_id = txn.insert_log_only("", records).file_id
        else:  # one file group: later versions of a key replace earlier ones
            txn.append_log("", file_id, INSTANTS[0], records)
        txn.commit()
    return base


def values(table):
    return sorted(table["v"].to_pylist())
