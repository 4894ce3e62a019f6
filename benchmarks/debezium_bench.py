"""Kafka Connect JSON messages with their schema: split, grouped by schema and parsed into Arrow columns
(`debezium.json_envelope`) against a per-message baseline doing the same with the standard library: the messages
taken out of the Arrow array Spark hands over, `json.loads` of each, the payloads of each schema built into an Arrow
struct array (`pa.array`). Both in one process, one after the other.

The messages are the real Debezium change events of tests/data/debezium (the sets that carry their schema), repeated
to `--messages`; `--schemas` of the sets are mixed (each set brings its own schemas). Prints seconds and messages/s of
each and the ratio.

Run: python benchmarks/debezium_bench.py [--messages 100000] [--schemas 1]
"""

import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import pyarrow as pa

from hoodie_stream.debezium.json_envelope import group_by_schema

DATA = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "debezium"


def message_sets():
    sets = {}
    for path in sorted(DATA.glob("*.jsonl")):
        values = [json.loads(line)["value"] for line in path.read_text().splitlines()]
        values = [v for v in values if v is not None and json.loads(v).get("schema") is not None]
        if values:
            sets[path.name] = values
    return sets


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--schemas", type=int, default=1, help="message sets mixed in (1: pg_flink_products_schema)")
    args = parser.parse_args(argv)
    sets = message_sets()
    names = ["pg_flink_products_schema.jsonl"] + [n for n in sets if n != "pg_flink_products_schema.jsonl"]
    pool = [v for name in names[: args.schemas] for v in sets[name]]
    texts = (pool * (args.messages // len(pool) + 1))[: args.messages]
    values = pa.array(texts, pa.string())
    started = time.perf_counter()
    groups = group_by_schema(values)
    ours = time.perf_counter() - started
    started = time.perf_counter()
    by_schema = {}
    for text in values.to_pylist():
        message = json.loads(text)
        by_schema.setdefault(json.dumps(message["schema"]), []).append(message["payload"])
    for group in groups:
        pa.array(by_schema[json.dumps(group.schema)], group.payload.type)
    baseline = time.perf_counter() - started
    print(f"{len(texts):,} messages ({values.nbytes / 1e6:.0f} MB) of {len(groups)} schemas from {args.schemas} set(s)")
    print(f"  json_envelope.group_by_schema {ours:7.2f} s  {len(texts) / ours:12,.0f} messages/s")
    print(f"  per message (json.loads)      {baseline:7.2f} s  {len(texts) / baseline:12,.0f} messages/s")
    print(f"  ratio (baseline time / ours)  {baseline / ours:7.2f}x")


if __name__ == "__main__":
    main()
