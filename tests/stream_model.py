"""A plain-Python model of a table written by the streaming sink, and generated CDC micro-batches for it.

Semantics modelled (event-time ordering, global index, as the sink is configured in the stream tests):
- inside a micro-batch, records of one key are pre-combined: the greatest `ts` wins, ties go to the later record;
- an upsert of a key that lives in the same partition wins when its `ts` >= the stored one (a delete leaves a
  tombstone with its `ts`, which later upserts with a smaller `ts` do not beat);
- an upsert of a key that lives in another partition moves it: it wins by arrival, whatever its `ts`;
- a delete (`_hoodie_is_deleted` true) of a key the table never held does nothing.
"""

import json
import os
import random

SCHEMA_DDL = "id long, city string, ts long, v string, _hoodie_is_deleted boolean"
COLUMNS = ["id", "city", "ts", "v", "_hoodie_is_deleted"]
CITIES = ["san_francisco", "sao_paulo", "chennai", "são luís"]
OPTIONS = {
    "hoodie.table.name": "stream_model",
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.datasource.write.partitionpath.field": "city",
    "hoodie.datasource.write.hive_style_partitioning": "true",
    # table services are exercised by the compaction tests; here hudi-rs must see every log at once
    "compaction.schedule.enabled": "false",
}


def generate_batches(n_batches, seed=0, keys_per_batch=40, key_space=120, monotonic=False):
    """Micro-batches of inserts, updates, deletes, in-batch duplicates, partition moves, ts going backwards.

    monotonic=True keeps `ts` increasing from batch to batch (as CDC log positions do): then a delete's ordering
    value never matters after compaction, which drops deleted records as Hudi does.
    """
    rng = random.Random(seed)
    batches = []
    for b in range(n_batches):
        events = []
        for _ in range(keys_per_batch):
            key = rng.randrange(key_space)
            kind = rng.random()
            ts = b * 100 + rng.randrange(0, 50) if monotonic else b * 10 + rng.randrange(-15, 10)
            city = CITIES[(key + (b // 4 if rng.random() < 0.15 else 0)) % len(CITIES)]
            deleted = kind < 0.12
            events.append(
                {"id": key, "city": city, "ts": ts, "v": f"b{b}-{rng.randrange(1000)}", "_hoodie_is_deleted": deleted}
            )
            if rng.random() < 0.15:  # a duplicate of the key inside the batch
                events.append(
                    dict(
                        events[-1],
                        ts=ts + rng.choice([-1, 0, 1]),
                        v=f"b{b}-dup{rng.randrange(1000)}",
                        _hoodie_is_deleted=False,
                    )
                )
        batches.append(events)
    return batches


class TableModel:
    """The table an event-time ordered sink holds: per key, the version with the greatest ordering value (ties: the
    later arrival) among all it was sent, across batches and partitions; a delete counts as a version (it removes
    the key, and a later-arriving version with a smaller ordering value does not bring it back)."""

    def __init__(self):
        self.state = {}  # id -> (row or None for a delete, ts, city)

    def apply_batch(self, events):
        winners = {}
        for e in events:
            cur = winners.get(e["id"])
            if cur is None or e["ts"] >= cur["ts"]:
                winners[e["id"]] = e
        for key, e in winners.items():
            current = self.state.get(key)
            if current is not None and e["ts"] < current[1]:
                continue  # late: it loses to what the table holds, whatever partition it names
            if e["_hoodie_is_deleted"]:
                self.state[key] = (None, e["ts"], current[2] if current else None)
            else:
                self.state[key] = (dict(e), e["ts"], e["city"])

    def rows(self):
        return sorted((r for r, _ts, _city in self.state.values() if r is not None), key=lambda r: r["id"])


def write_batch_file(directory, index, events):
    """One JSON-lines file per micro-batch, named and timed so the file source reads them in order."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"batch-{index:05d}.json")
    tmp = os.path.join(directory, f".batch-{index:05d}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    os.utime(tmp, (1_700_000_000 + index, 1_700_000_000 + index))
    os.replace(tmp, path)
    return path


def table_rows(arrow_table):
    """Rows of a read (ours or hudi-rs) in the model's shape, sorted by id."""
    if arrow_table is None:
        return []
    cols = [c for c in COLUMNS if c in arrow_table.column_names]
    rows = arrow_table.select(cols).to_pylist()
    for r in rows:
        r["_hoodie_is_deleted"] = bool(r.get("_hoodie_is_deleted"))
    return sorted(rows, key=lambda r: r["id"])


def events_df(spark, events):
    """A DataFrame of events, as foreachBatch would receive them."""
    return spark.createDataFrame([tuple(e[c] for c in COLUMNS) for e in events], SCHEMA_DDL)
