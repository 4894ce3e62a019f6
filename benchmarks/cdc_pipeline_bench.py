"""The real CDC pipeline under a steady writer: PostgreSQL -> Debezium (Kafka Connect) -> Kafka -> Spark's Kafka
source -> DebeziumSink with default options (async compaction on), on loopback (scripts/cdc-env.sh).

A pgbench-like writer runs `--tps` transactions a second on PostgreSQL for `--minutes`: each updates one random row of
`bench.accounts` (balance and updated_at), one in ten also inserts a row and one in fifty deletes one. The streaming
query (default trigger: a micro-batch as soon as the previous one ends) writes the topic into a Hudi table, the
initial snapshot first (bulk inserted; left out of the figures). For each
micro-batch, the time its commit returned minus each event's `source.ts_ms` (the database commit) is that event's
latency. Prints events/s into Hudi over the run, the latency's median, p90 and p99 and its median per minute (flat
over a steady run), then checks that the table equals the database.

Run: python benchmarks/cdc_pipeline_bench.py [--tps 50] [--minutes 10] [--rows 10000]
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import spark_session

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from cdc_pipeline import CdcEnv, unique  # noqa: E402
from hoodie_stream import DebeziumSink, HoodieTable  # noqa: E402
from hoodie_stream.debezium import table_name  # noqa: E402
from hoodie_stream.debezium.source_check import difference, source_rows, table_rows  # noqa: E402


def writer(env, tps, seconds, rows, stop, counts):
    rng = random.Random(1)
    db = env.sql()
    next_id, start = rows, time.monotonic()
    i = 0
    while not stop.is_set():
        due = start + i / tps
        now = time.monotonic()
        if now - start >= seconds:
            break
        if due > now:
            time.sleep(due - now)
        with db.transaction():
            db.execute(
                "UPDATE bench.accounts SET balance = balance + %s, updated_at = now() WHERE id = %s",
                (rng.randint(-500, 500) / 100, rng.randint(1, rows)),
            )
            if i % 10 == 0:
                next_id += 1
                db.execute("INSERT INTO bench.accounts VALUES (%s, 0, now(), %s)", (next_id, f"new {next_id}"))
            if i % 50 == 25:
                db.execute("DELETE FROM bench.accounts WHERE id = (SELECT max(id) FROM bench.accounts)")
        counts["transactions"] += 1
        i += 1
    db.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tps", type=float, default=50)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--env-dir", default=str(ROOT / ".cdc-env" / "bench"))
    args = parser.parse_args()
    env = CdcEnv(Path(args.env_dir))
    work = Path(tempfile.mkdtemp(prefix="cdc-pipeline-bench-"))
    db = env.sql()
    db.execute("DROP SCHEMA IF EXISTS bench CASCADE")
    db.execute("CREATE SCHEMA bench")
    db.execute(
        "CREATE TABLE bench.accounts (id int PRIMARY KEY, balance numeric(12, 2), updated_at timestamptz, note text)"
    )
    db.execute(
        "INSERT INTO bench.accounts SELECT g, 100, now(), 'account ' || g FROM generate_series(1, %s::int) g",
        (args.rows,),
    )
    prefix = unique("bench")
    connector = env.connector(prefix, "bench")
    spark = spark_session(conf={"spark.jars": env.env["SPARK_KAFKA_JARS"]})
    from pyspark.sql import functions as F

    lake = work / "lake"
    sink = DebeziumSink(str(lake))
    latencies, per_batch = [], []  # (seconds since the start, latency ms)
    started = time.time()

    def timed(df, batch_id):
        df = df.persist()
        value = F.col("value").cast("string")
        stamps = [  # the benchmark's own measurement, one long per change event (the snapshot's are left out)
            r[0]
            for r in df.where(F.get_json_object(value, "$.payload.op") != "r")
            .select(F.get_json_object(value, "$.payload.source.ts_ms").cast("long"))
            .collect()
            if r[0] is not None
        ]
        sink(df, batch_id)
        done = time.time() * 1000
        df.unpersist()
        latencies.extend((done / 1000 - started, done - ts) for ts in stamps)
        per_batch.append(len(stamps))

    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", env.bootstrap)
        .option("subscribePattern", prefix + r"\..*")
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.foreachBatch(timed)
        .option("checkpointLocation", str(work / "chk"))
        .start()
    )
    path = str(lake / table_name(f"{prefix}.bench.accounts"))
    while not os.path.exists(os.path.join(path, ".hoodie", "hoodie.properties")):  # the snapshot, bulk inserted
        time.sleep(1)
    time.sleep(5)
    stop, counts = threading.Event(), {"transactions": 0}
    seconds = args.minutes * 60
    t0 = time.monotonic()
    thread = threading.Thread(target=writer, args=(env, args.tps, seconds, args.rows, stop, counts))
    thread.start()
    thread.join()
    wall = time.monotonic() - t0
    # the last events reach the table
    deadline = time.monotonic() + 300
    while True:
        want = source_rows(db.cursor(), "SELECT * FROM bench.accounts", ["id"])
        diff = difference(want, table_rows(HoodieTable(path).read(), ["id"])) if os.path.exists(path) else "no table"
        if diff is None or time.monotonic() > deadline:
            break
        time.sleep(2)
    query.stop()
    sink.close()
    connector.delete()
    spark.stop()
    env.stop()
    subprocess.run(["rm", "-rf", str(work)])

    values = sorted(lat for _, lat in latencies)
    events = len(values)

    def pct(p):
        return values[min(len(values) - 1, int(p / 100 * len(values)))] / 1000

    print(f"writer: {counts['transactions']} transactions in {wall:.0f} s ({counts['transactions'] / wall:.1f}/s)")
    print(f"events into Hudi: {events} in {len(per_batch)} micro-batches, {events / wall:.1f} events/s")
    print(f"latency, database commit -> Hudi commit: median {pct(50):.2f} s, p90 {pct(90):.2f} s, p99 {pct(99):.2f} s")
    minutes = {}
    for at, lat in latencies:
        minutes.setdefault(int(at // 60), []).append(lat / 1000)
    print("median latency per minute: " + ", ".join(f"{statistics.median(v):.2f}" for _, v in sorted(minutes.items())))
    print(f"table equals PostgreSQL: {'yes' if diff is None else 'no: ' + diff}")


if __name__ == "__main__":
    main()
