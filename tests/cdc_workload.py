"""The workload of the real CDC pipeline's tests (tests/test_cdc_real_*.py): three tables of many types in a
PostgreSQL schema, rows for Debezium's snapshot, a seeded random workload of multi-row transactions, and the
comparison of the Hudi tables with the database (hoodie_stream.debezium.source_check)."""

from __future__ import annotations

import os

from hoodie_stream import HoodieTable
from hoodie_stream.debezium import table_name
from hoodie_stream.debezium.source_check import difference, source_rows, table_rows

TYPES_DDL = """
CREATE TYPE {s}.mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE {s}.items (
    id bigint PRIMARY KEY, name text, price numeric(10, 2), big numeric(30, 8), at timestamptz,
    local_at timestamp, d date, t time, j jsonb, js json, u uuid, tags text[], raw bytea, ok boolean,
    mood {s}.mood, n int, r real, dp double precision, legacy text DEFAULT 'kept');
CREATE TABLE {s}.docs (id int PRIMARY KEY, title text, body text, n int);
ALTER TABLE {s}.docs ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE {s}.accounts (id int PRIMARY KEY, owner text, balance numeric(12, 2));
ALTER TABLE {s}.accounts REPLICA IDENTITY FULL;
"""
ITEM = """INSERT INTO {s}.items (id, name, price, big, at, local_at, d, t, j, js, u, tags, raw, ok, mood, n, r, dp)
    SELECT g, 'item ' || g, g * 1.25, g * 123456789.12345678, '2024-03-10 01:02:03.456789+05:30'::timestamptz + g * interval '1 hour',
           '2024-01-02 03:04:05.123456'::timestamp - g * interval '1 day', '2024-02-29'::date + g, '12:34:56.789'::time,
           jsonb_build_object('g', g, 'list', jsonb_build_array(1, 'two', null)), '{{"raw": [1, 2]}}',
           gen_random_uuid(), ARRAY['x', 'y ' || g], decode(lpad(to_hex(g), 4, '0'), 'hex'), g %% 2 = 0, 'ok', g,
           g / 3.0, g / 7.0
    FROM generate_series(%s::int, %s::int) g"""
# (table, key, JSON columns)
TABLES = [("items", ["id"], ["j", "js"]), ("docs", ["id"], []), ("accounts", ["id"], [])]


def big_text(rng, n=12_000):
    """Text PostgreSQL stores out of line (TOASTed; the column's storage is EXTERNAL: not compressed)."""
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(n))


def create_tables(db, schema, rng, items=30, others=8):
    """The three tables, with rows (Debezium's initial snapshot when the connector starts after)."""
    db.execute(TYPES_DDL.format(s=schema))
    db.execute(ITEM.format(s=schema), (1, items))
    for i in range(1, others + 1):
        db.execute(f"INSERT INTO {schema}.docs VALUES (%s, %s, %s, 0)", (i, f"doc {i}", big_text(rng)))
        db.execute(f"INSERT INTO {schema}.accounts VALUES (%s, %s, %s)", (i, f"owner {i}", i * 10.5))


def table_path(lake, prefix, schema, table):
    return str(lake / table_name(f"{prefix}.{schema}.{table}"))


def differences(db, lake, prefix, schema, tables, read=None):
    """{table: what differs} between the database and the Hudi tables ({} when all are equal)."""
    out = {}
    for table, key, json_columns in tables:
        want = source_rows(db.cursor(), f'SELECT * FROM "{schema}"."{table}"', key)
        path = table_path(lake, prefix, schema, table)
        if not os.path.exists(os.path.join(path, ".hoodie", "hoodie.properties")):
            got = {}
        else:
            got = table_rows((read or (lambda p: HoodieTable(p).read()))(path), key, json_columns)
        diff = difference(want, got)
        if diff is not None:
            out[table] = diff
    return out


def random_workload(db, schema, rng, steps, next_id):
    """Multi-row transactions of inserts, updates (some leaving the TOASTed body unchanged), deletes and primary key
    changes over the three tables."""
    for _ in range(steps):
        with db.transaction():
            for _ in range(rng.randint(1, 4)):
                kind = rng.random()
                if kind < 0.3:
                    next_id += 1
                    db.execute(ITEM.format(s=schema), (next_id, next_id))
                    db.execute(
                        f"INSERT INTO {schema}.accounts VALUES (%s, %s, %s)",
                        (next_id, f"o{next_id}", rng.randint(0, 10**6) / 100),
                    )
                elif kind < 0.5:
                    db.execute(
                        f"UPDATE {schema}.items SET price = price + 0.01, mood = %s, tags = tags || 'u'::text "
                        f"WHERE id = (SELECT id FROM {schema}.items ORDER BY random() LIMIT 1)",
                        (rng.choice(["sad", "ok", "happy"]),),
                    )
                elif kind < 0.65:
                    db.execute(
                        f"UPDATE {schema}.docs SET n = n + 1 WHERE id = (SELECT id FROM {schema}.docs ORDER BY random() LIMIT 1)"
                    )
                elif kind < 0.75:
                    db.execute(
                        f"UPDATE {schema}.docs SET body = %s WHERE id = (SELECT id FROM {schema}.docs ORDER BY random() LIMIT 1)",
                        (big_text(rng, 3000),),
                    )
                elif kind < 0.85:
                    db.execute(
                        f"DELETE FROM {schema}.items WHERE id = (SELECT id FROM {schema}.items ORDER BY random() LIMIT 1)"
                    )
                else:  # a primary key change: Debezium sends a delete of the old key and a create of the new one
                    next_id += 1
                    db.execute(
                        f"UPDATE {schema}.accounts SET id = %s, balance = balance + 1 "
                        f"WHERE id = (SELECT id FROM {schema}.accounts ORDER BY random() LIMIT 1)",
                        (next_id,),
                    )
    return next_id
