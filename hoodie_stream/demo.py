"""The local demo: a few commits of inserts, updates and deletes, then the table's summary."""

import tempfile

import pyarrow as pa

from .format.summary import table_summary
from .format.writer import HoodieWriter

SCHEMA = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64()), ("fare", pa.float64())])
CITIES = ["sf", "nyc", "chennai"]


def _rows(ids, ts):
    return pa.table({"id": ids, "city": [CITIES[i % 3] for i in ids], "ts": [ts] * len(ids),
                     "fare": [float(i) * ts for i in ids]}, schema=SCHEMA)


def run_demo(path=None):
    base = path or tempfile.mkdtemp(prefix="hoodie-stream-demo-")
    writer = HoodieWriter.create(base, table_name="demo", record_key_fields=["id"], schema=SCHEMA,
                                 precombine_field="ts", partition_fields=["city"], hive_style=True)
    groups = {}
    txn = writer.start(operation="INSERT")
    for city in CITIES:
        ids = [i for i in range(30) if CITIES[i % 3] == city]
        groups[city] = txn.insert_log_only(f"city={city}", _rows(ids, 1)).file_id
    first = txn.commit()
    txn = writer.start()
    for city in CITIES:
        ids = [i for i in range(0, 30, 2) if CITIES[i % 3] == city]
        dels = [str(i) for i in range(1, 30, 5) if CITIES[i % 3] == city]
        txn.append_log(f"city={city}", groups[city], first, _rows(ids, 2), deletes=(dels, [2] * len(dels)))
    txn.commit()
    print(table_summary(base))
    return base
