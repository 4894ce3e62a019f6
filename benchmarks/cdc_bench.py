"""Debezium change events through DebeziumSink against HoodieStreamSink on the same rows already flattened.

One PostgreSQL table (`bench.public.orders`: id, customer, status, a Decimal amount, a MicroTimestamp and a Date),
an initial load of inserts, then CDC micro-batches (70% updates, 25% inserts, 5% deletes, increasing LSNs). The
events are written once as Kafka-source rows (key, value, topic, partition, offset) in Parquet: as JsonConverter
messages with their schema, and in Confluent's Avro wire format. Each run streams them into a new table: DebeziumSink
(JSON), DebeziumSink (Avro), and the baseline, HoodieStreamSink writing the rows `hoodie_stream.debezium.flatten`
made of the same events (flattened before the clock starts; same options: record key, `_event_order` ordering,
DefaultHoodieRecordPayload). A last run streams the same events as JSON with `--toast` of the updates carrying
Debezium's placeholder of an unchanged TOASTed column in `status` (the stored value is read back from the key's file
group: what TOAST costs). Every system runs once per round (`--rounds`, the order reversed every other round: a
later run finds the JVM warmer). Prints seconds per CDC micro-batch (median over the rounds), events/s and the ratio
of the baseline's time to each DebeziumSink run's (goal: at least 0.7).

Run: python benchmarks/cdc_bench.py [--initial 200000] [--events 100000] [--batches 4] [--toast 0.2] [--rounds 2]
"""

import argparse
import base64
import io
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common import spark_session

TOPIC = "bench.public.orders"
ROW = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "int32", "optional": True, "field": "customer_id"},
    {"type": "string", "optional": True, "field": "status"},
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "field": "amount",
    },
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1, "field": "updated_at"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1, "field": "order_date"},
]
SOURCE = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": False, "field": "schema"},
    {"type": "string", "optional": False, "field": "table"},
    {"type": "int64", "optional": True, "field": "txId"},
    {"type": "int64", "optional": True, "field": "lsn"},
    {"type": "int64", "optional": True, "field": "xmin"},
]
SCHEMA = {
    "type": "struct",
    "name": f"{TOPIC}.Envelope",
    "optional": False,
    "fields": [
        {"type": "struct", "optional": True, "name": f"{TOPIC}.Value", "field": "before", "fields": ROW},
        {"type": "struct", "optional": True, "name": f"{TOPIC}.Value", "field": "after", "fields": ROW},
        {
            "type": "struct",
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "field": "source",
            "fields": SOURCE,
        },
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
    ],
}
KEY_SCHEMA = {"type": "struct", "name": f"{TOPIC}.Key", "optional": False, "fields": ROW[:1]}
AVRO_ROW = {
    "type": "record",
    "name": "Value",
    "namespace": TOPIC,
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer_id", "type": ["null", "int"], "default": None},
        {"name": "status", "type": ["null", "string"], "default": None},
        {
            "name": "amount",
            "type": [
                "null",
                {
                    "type": "bytes",
                    "logicalType": "decimal",
                    "precision": 10,
                    "scale": 2,
                    "connect.name": "org.apache.kafka.connect.data.Decimal",
                },
            ],
            "default": None,
        },
        {
            "name": "updated_at",
            "type": ["null", {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}],
            "default": None,
        },
        {
            "name": "order_date",
            "type": ["null", {"type": "int", "connect.name": "io.debezium.time.Date"}],
            "default": None,
        },
    ],
}
AVRO_SCHEMA = {
    "type": "record",
    "name": "Envelope",
    "namespace": TOPIC,
    "fields": [
        {"name": "before", "type": ["null", AVRO_ROW], "default": None},
        {"name": "after", "type": ["null", f"{TOPIC}.Value"], "default": None},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "namespace": "io.debezium.connector.postgresql",
                "connect.name": "io.debezium.connector.postgresql.Source",
                "fields": [
                    {
                        "name": f["field"],
                        "type": (
                            {"int64": "long", "string": "string"}[f["type"]]
                            if not f["optional"]
                            else ["null", {"int64": "long", "string": "string"}[f["type"]]]
                        ),
                    }
                    for f in SOURCE
                ],
            },
        },
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}
AVRO_KEY = {"type": "record", "name": "Key", "namespace": TOPIC, "fields": [{"name": "id", "type": "long"}]}
OPTIONS = {"compaction.schedule.enabled": "false"}
PLACEHOLDER = "__debezium_unavailable_value"  # table services aside: the write path is measured


def unscaled(cents):
    return int(cents).to_bytes(5, "big", signed=True)


class Events:
    """Change events of the orders table: (op, key, row, lsn)."""

    def __init__(self, seed=3):
        self.rng = np.random.default_rng(seed)
        self.keys = []
        self.next_key, self.lsn = 0, 1_000_000

    def batch(self, n, updates=0.70, deletes=0.05):
        ops = self.rng.random(n)
        out = []
        for i in range(n):
            self.lsn += 8
            if len(self.keys) and ops[i] < updates + deletes:
                key = self.keys[int(self.rng.integers(len(self.keys)))]
                op = "d" if ops[i] < deletes else "u"
            else:
                key, op = self.next_key, "c"
                self.next_key += 1
                self.keys.append(key)
            row = {
                "id": key,
                "customer_id": key % 9973,
                "status": ["NEW", "PAID", "SHIPPED"][i % 3],
                "amount": int(self.rng.integers(1, 10**7)),
                "updated_at": 1_700_000_000_000_000 + self.lsn,
                "order_date": 19000 + key % 700,
            }
            out.append((op, key, row, self.lsn))
        return out

    def initial(self, n):
        return self.batch(n, updates=0.0, deletes=0.0)


def json_payload(op, row, lsn):
    image = dict(row, amount=base64.b64encode(unscaled(row["amount"])).decode())
    return {
        "before": image if op == "d" else None,
        "after": None if op == "d" else image,
        "source": {
            "version": "2.7.3.Final",
            "connector": "postgresql",
            "name": "bench",
            "ts_ms": lsn // 1000,
            "db": "shop",
            "schema": "public",
            "table": "orders",
            "txId": lsn // 64,
            "lsn": lsn,
            "xmin": None,
        },
        "op": op,
        "ts_ms": lsn // 1000 + 5,
    }


def kafka_rows(events, offset, fmt):
    schema_text = json.dumps(SCHEMA, separators=(",", ":"))
    key_text = json.dumps(KEY_SCHEMA, separators=(",", ":"))
    parsed, parsed_key = fastavro.parse_schema(_plain(AVRO_SCHEMA)), fastavro.parse_schema(AVRO_KEY)
    keys, values = [], []
    for op, key, row, lsn in events:
        payload = json_payload(op, row, lsn)
        if fmt == "json":
            keys.append(('{"schema":' + key_text + ',"payload":{"id":' + str(key) + "}}").encode())
            values.append(
                ('{"schema":' + schema_text + ',"payload":' + json.dumps(payload, separators=(",", ":")) + "}").encode()
            )
        else:
            for image in ("before", "after"):
                if payload[image] is not None:
                    payload[image] = dict(payload[image], amount=unscaled(row["amount"]))
            keys.append(_framed(2, parsed_key, {"id": key}))
            values.append(_framed(1, parsed, payload))
    n = len(events)
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array([TOPIC] * n),
            "partition": pa.array(np.zeros(n, np.int32)),
            "offset": pa.array(np.arange(offset, offset + n, dtype=np.int64)),
        }
    )


def _plain(schema):
    """The Avro schema without logical types: the test data's decimals are given as their unscaled bytes."""
    return json.loads(json.dumps(schema).replace('"logicalType": "decimal", ', ""))


def _framed(schema_id, parsed, datum):
    out = io.BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(out, parsed, datum)
    return out.getvalue()


def baseline_options():
    from hoodie_stream.debezium.sink import PAYLOAD_CLASS

    return {
        **OPTIONS,
        "hoodie.table.name": "orders",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "_event_order",
        "hoodie.datasource.write.payload.class": PAYLOAD_CLASS,
    }


def timed_run(spark, sink, dirs):
    times = []
    for b, d in enumerate(dirs):
        df = spark.read.parquet(str(d))
        started = time.perf_counter()
        sink(df, b)
        times.append(time.perf_counter() - started)
    sink.close()
    return times


def _medians(rounds):
    """(median CDC micro-batch, median initial load) of a system's runs: each run's times, initial load first."""
    return statistics.median(t for times in rounds for t in times[1:]), statistics.median(t[0] for t in rounds)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--initial", type=int, default=200_000, help="events of the first (bulk) micro-batch")
    parser.add_argument("--events", type=int, default=100_000, help="events per CDC micro-batch")
    parser.add_argument("--batches", type=int, default=4, help="CDC micro-batches")
    parser.add_argument("--toast", type=float, default=0.2, help="fraction of updates with a TOAST placeholder")
    parser.add_argument("--rounds", type=int, default=2, help="runs of every system, the order reversed each round")
    args = parser.parse_args(argv)
    from hoodie_stream import DebeziumSink, HoodieStreamSink
    from hoodie_stream.debezium import flatten

    work = Path(tempfile.mkdtemp(prefix="cdc-bench-"))
    spark = spark_session()
    try:
        gen = Events()
        batches = [gen.initial(args.initial)] + [gen.batch(args.events) for _ in range(args.batches)]
        dirs = {fmt: [] for fmt in ("json", "avro", "rows", "toast")}
        offset = 0
        rng = np.random.default_rng(11)
        for b, events in enumerate(batches):
            toasted = [
                (op, key, dict(row, status=PLACEHOLDER) if op == "u" and rng.random() < args.toast else row, lsn)
                for op, key, row, lsn in events
            ]
            d = work / "toast" / f"{b:03d}"
            d.mkdir(parents=True)
            pq.write_table(kafka_rows(toasted, offset, "json"), d / "part-0.parquet")
            dirs["toast"].append(d)
            for fmt in ("json", "avro"):
                d = work / fmt / f"{b:03d}"
                d.mkdir(parents=True)
                pq.write_table(kafka_rows(events, offset, fmt), d / "part-0.parquet")
                dirs[fmt].append(d)
            d = work / "rows" / f"{b:03d}"
            flatten(spark.read.parquet(str(dirs["json"][-1]))).write.parquet(str(d))  # before any clock starts
            dirs["rows"].append(d)
            offset += len(events)
        # the Python workers warmed up first (imports, JSON and Avro readers) on small copies of two batches
        for fmt in ("json", "avro", "rows"):
            small = []
            for b in range(2):
                d = work / "warm" / fmt / f"{b:03d}"
                spark.read.parquet(str(dirs[fmt][b])).limit(5000).write.parquet(str(d))
                small.append(d)
            if fmt == "rows":
                warm = HoodieStreamSink(str(work / "warm" / "lake-rows"), baseline_options())
            else:
                warm = DebeziumSink(
                    str(work / "warm" / f"lake-{fmt}"),
                    OPTIONS,
                    value_format=fmt,
                    schemas={1: AVRO_SCHEMA, 2: AVRO_KEY} if fmt == "avro" else None,
                )
            timed_run(spark, warm, small)
        systems = {
            "DebeziumSink (json)": ("json", lambda lake: DebeziumSink(lake, OPTIONS)),
            "DebeziumSink (avro)": (
                "avro",
                lambda lake: DebeziumSink(lake, OPTIONS, value_format="avro", schemas={1: AVRO_SCHEMA, 2: AVRO_KEY}),
            ),
            "HoodieStreamSink (flattened rows)": (
                "rows",
                lambda lake: HoodieStreamSink(f"{lake}/orders", baseline_options()),
            ),
            f"DebeziumSink (json, {args.toast:.0%} of updates TOAST)": (
                "toast",
                lambda lake: DebeziumSink(lake, OPTIONS),
            ),
        }
        # every system once per round, into a new table, the order reversed every other round (a later run finds
        # the JVM warmer)
        runs = {name: [] for name in systems}
        for r in range(args.rounds):
            for name in list(systems)[:: -1 if r % 2 else 1]:
                data, make = systems[name]
                runs[name].append(timed_run(spark, make(str(work / f"lake-{data}-{r}")), dirs[data]))
        base = runs["HoodieStreamSink (flattened rows)"]
        print(
            f"initial load {args.initial:,} events, then {args.batches} CDC micro-batches of {args.events:,} events; "
            f"{args.rounds} round(s), medians over them"
        )
        base_cdc, base_initial = _medians(base)
        for name, times in runs.items():
            cdc, initial = _medians(times)
            print(
                f"  {name:36s} initial {initial:6.2f} s   CDC batch {cdc:6.2f} s  {args.events / cdc:10,.0f} "
                f"events/s   ratio {base_cdc / cdc:4.2f}x (initial {base_initial / initial:4.2f}x)"
            )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
