"""The real CDC pipeline end to end: PostgreSQL -> Debezium (Kafka Connect) -> Kafka -> Spark -> Hudi.

Run by scripts/run-cdc-demo.sh, which starts the environment (scripts/cdc-env.sh) and exports its settings: PGHOST,
PGPORT, PGUSER, PGPASSWORD, PGDATABASE, KAFKA_BOOTSTRAP_SERVERS, KAFKA_CONNECT_URL, SPARK_KAFKA_JARS. It creates a
small shop schema with rows in it, registers Debezium's PostgreSQL connector, streams the topics with
`spark.readStream.format("kafka")` into `DebeziumSink`, runs a workload (inserts, updates, deletes, a primary key
change, an update leaving a TOASTed text column unchanged, ALTER TABLE ... ADD COLUMN), waits until every Hudi table
holds what PostgreSQL holds, and prints per table the rows on both sides and whether they are equal. Exit code 0
when every table is equal.

    python examples/cdc_demo.py [--lake DIR] [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import psycopg

from hoodie_stream import DebeziumSink, HoodieTable
from hoodie_stream.debezium import table_name
from hoodie_stream.debezium.source_check import difference, source_rows, table_rows
from hoodie_stream.local_spark import local_session_builder

SCHEMA = """
CREATE SCHEMA shop;
CREATE TABLE shop.customers (id int PRIMARY KEY, name text NOT NULL, email text, notes text);
ALTER TABLE shop.customers ALTER COLUMN notes SET STORAGE EXTERNAL;  -- kept out of line (TOAST), uncompressed
CREATE TABLE shop.products (sku text PRIMARY KEY, title text, price numeric(10, 2), tags text[]);
CREATE TABLE shop.orders (
    id bigint PRIMARY KEY, customer_id int, sku text, quantity int, amount numeric(12, 2),
    placed_at timestamptz DEFAULT now(), details jsonb);
"""
TABLES = {"customers": (["id"], []), "products": (["sku"], []), "orders": (["id"], ["details"])}


def say(text: str) -> None:
    print(text, flush=True)


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        sys.exit(f'{name} is not set: run `eval "$(bash scripts/cdc-env.sh start)"` first')
    return value


def long_note(rng: random.Random) -> str:
    return " ".join(rng.choice(["lorem", "ipsum", "dolor", "sit", "amet"]) for _ in range(2000))


def create_schema(db, rng) -> None:
    db.execute("DROP SCHEMA IF EXISTS shop CASCADE")
    db.execute(SCHEMA)
    for i in range(1, 11):
        db.execute(
            "INSERT INTO shop.customers VALUES (%s, %s, %s, %s)",
            (i, f"customer {i}", f"c{i}@example.com", long_note(rng)),
        )
    for i in range(1, 6):
        db.execute("INSERT INTO shop.products VALUES (%s, %s, %s, %s)", (f"sku-{i}", f"product {i}", i * 9.99, ["new"]))
    for i in range(1, 21):
        db.execute(
            "INSERT INTO shop.orders (id, customer_id, sku, quantity, amount, details) VALUES (%s, %s, %s, %s, %s, %s)",
            (i, rng.randint(1, 10), f"sku-{rng.randint(1, 5)}", 1, rng.randint(100, 9999) / 100, json.dumps({"n": i})),
        )


def register_connector(prefix: str) -> str:
    name = f"demo-{prefix}"
    config = {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": env("PGHOST"),
        "database.port": env("PGPORT"),
        "database.user": env("PGUSER"),
        "database.password": env("PGPASSWORD"),
        "database.dbname": env("PGDATABASE"),
        "topic.prefix": prefix,
        "plugin.name": "pgoutput",
        "slot.name": f"slot_{prefix}",
        "schema.include.list": "shop",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
    }
    connect("PUT", f"/connectors/{name}/config", config)
    deadline = time.monotonic() + 120
    while True:
        try:
            status = connect("GET", f"/connectors/{name}/status")
        except urllib.error.HTTPError as err:  # 404 until the connector's first status is written
            if err.code != 404:
                raise
            status = {}
        tasks = [t["state"] for t in status.get("tasks", [])]
        if tasks == ["RUNNING"]:
            return name
        if "FAILED" in tasks or time.monotonic() > deadline:
            sys.exit(f"connector {name} did not start: {status}")
        time.sleep(0.5)


def connect(method: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        env("KAFKA_CONNECT_URL") + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        text = answer.read()
    return json.loads(text) if text else {}


def drop_slot(db, slot: str) -> None:
    """The connector's replication slot, once the deleted connector let go of it (a slot keeps WAL until dropped)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = db.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
        if row is None:
            return
        if not row[0]:
            db.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            return
        time.sleep(0.2)


def workload(db, rng) -> None:
    with db.transaction():  # a multi-row transaction
        for i in range(21, 41):
            db.execute(
                "INSERT INTO shop.orders (id, customer_id, sku, quantity, amount, details) VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    i,
                    rng.randint(1, 10),
                    f"sku-{rng.randint(1, 5)}",
                    2,
                    rng.randint(100, 9999) / 100,
                    json.dumps({"n": i}),
                ),
            )
        db.execute("UPDATE shop.products SET price = price * 1.1, tags = tags || 'sale'::text WHERE sku <= 'sku-3'")
    db.execute("DELETE FROM shop.orders WHERE id % 7 = 0")
    db.execute("UPDATE shop.customers SET email = 'vip' || id || '@example.com' WHERE id <= 3")  # notes: TOASTed
    db.execute("UPDATE shop.products SET sku = 'sku-50' WHERE sku = 'sku-5'")  # a primary key change
    db.execute("ALTER TABLE shop.customers ADD COLUMN tier text")
    db.execute("UPDATE shop.customers SET tier = CASE WHEN id <= 3 THEN 'gold' ELSE 'basic' END")


def compare(db, lake: str, prefix: str) -> dict[str, tuple[int, int, str | None]]:
    out = {}
    for table, (key, json_columns) in TABLES.items():
        want = source_rows(db.cursor(), f"SELECT * FROM shop.{table}", key)
        path = os.path.join(lake, table_name(f"{prefix}.shop.{table}"))
        exists = os.path.exists(os.path.join(path, ".hoodie", "hoodie.properties"))
        got = table_rows(HoodieTable(path).read(), key, json_columns) if exists else {}
        out[table] = (len(want), len(got), difference(want, got))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lake", default=None, help="where the Hudi tables go (default: a new temporary directory)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for the tables to match")
    args = parser.parse_args(argv)
    lake = args.lake or tempfile.mkdtemp(prefix="hoodie-cdc-demo-")
    rng = random.Random(7)
    prefix = f"demo{uuid.uuid4().hex[:6]}"  # topics <prefix>.shop.<table>
    db = psycopg.connect(autocommit=True)  # PGHOST, PGPORT, ... from the environment
    say("1. a shop schema in PostgreSQL: customers, products, orders, with rows")
    create_schema(db, rng)
    say(f"2. Debezium's PostgreSQL connector, topics {prefix}.shop.*")
    connector = register_connector(prefix)
    say(f"3. Spark's Kafka source into DebeziumSink, tables under {lake}")
    spark = local_session_builder("local[2]", "hoodie-cdc-demo", {"spark.jars": env("SPARK_KAFKA_JARS")}).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sink = DebeziumSink(lake)
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", env("KAFKA_BOOTSTRAP_SERVERS"))
        .option("subscribePattern", prefix + r"\.shop\..*")
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", os.path.join(lake, "_checkpoint"))
        .trigger(processingTime="2 seconds")
        .start()
    )
    try:
        say("4. a workload: inserts, updates, deletes, a primary key change, an unchanged TOASTed column, ADD COLUMN")
        workload(db, rng)
        say("5. waiting until every Hudi table holds what PostgreSQL holds")
        deadline = time.monotonic() + args.timeout
        while True:
            if query.exception() is not None:
                say(f"the streaming query failed: {query.exception()}")
                return 1
            result = compare(db, lake, prefix)
            progress = ", ".join(f"{t} {h}/{p}" for t, (p, h, _) in result.items())
            if all(diff is None for _, _, diff in result.values()) or time.monotonic() > deadline:
                break
            say(f"   rows in Hudi/PostgreSQL: {progress}")
            time.sleep(3)
    finally:
        query.stop()
        sink.close()
        connect("DELETE", f"/connectors/{connector}")
        drop_slot(db, f"slot_{prefix}")
    say("")
    say(f"{'table':<12}{'PostgreSQL':>12}{'Hudi':>8}  equal")
    for table, (pg, hudi, diff) in result.items():
        say(f"{table:<12}{pg:>12}{hudi:>8}  {'yes' if diff is None else 'no: ' + diff}")
    equal = all(diff is None for _, _, diff in result.values())
    say("")
    say("every table equals PostgreSQL" if equal else "some tables differ from PostgreSQL")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
