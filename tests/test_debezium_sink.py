"""DebeziumSink end to end: real Debezium messages (tests/data/debezium) streamed as Kafka-source rows from files
through a streaming query, every table read by hudi-rs after every micro-batch and compared with the plain-Python
model of Debezium semantics (tests/debezium_model.py)."""

import json
import os

import pytest

from debezium_model import KAFKA_DDL, final_rows, load_set
from hoodie_stream import DebeziumSink, HoodieTable
from hoodie_stream.debezium import table_name
from hoodie_stream.errors import HoodieConfigError, HoodieError
from oracle import META, _norm, rs_read
from spark_log import spark_log

# (message set, record key, connector, messages per micro-batch)
SETS = [
    ("pg_flink_products_schema.jsonl", ["id"], "postgresql", 5),
    ("mysql_flink_products_schema.jsonl", ["id"], "mysql", 4),
    ("mysql_risingwave_customers_schema.jsonl", ["id"], "mysql", 3),
    ("pg_risingwave_chbench_neworder.jsonl", ["no_w_id", "no_d_id", "no_o_id"], "postgresql", 60),
    ("pg_risingwave_chbench_district.jsonl", ["d_w_id", "d_id"], "postgresql", 5),
    ("compat_transferia_pg_replica_identity_full.jsonl", None, "postgresql", 1),
    ("compat_transferia_mysql_customers3_crud.jsonl", None, "mysql", 2),
]


def write_batch(directory, index, records):
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".batch-{index:04d}.json"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    stamp = 1_700_000_000 + index  # the file source takes files in modification-time order: one second apart
    os.utime(tmp, (stamp, stamp))
    tmp.rename(directory / f"batch-{index:04d}.json")


def table_rows(table, key_fields):
    """{record key tuple: row} of a hudi-rs read, values normalized, meta columns left out."""
    out = {}
    if table is None:
        return out
    for row in table.drop_columns([c for c in META if c in table.column_names]).to_pylist():
        out[tuple(row[k] for k in key_fields)] = row
    return out


def assert_table_matches(table, expected, key_fields, context):
    got = table_rows(table, key_fields)
    assert sorted(got, key=repr) == sorted(expected, key=repr), f"{context}: keys differ"
    for key, row in expected.items():
        for column, value in row.items():
            assert _norm(got[key][column]) == _norm(value), f"{context}: key {key} column {column!r}"


def key_fields_of(records, given):
    if given is not None:
        return given
    key = json.loads(next(r["key"] for r in records if r["key"]))
    return [f["field"] for f in key["schema"]["fields"]]


@pytest.mark.parametrize(("name", "key", "connector", "per_batch"), SETS, ids=[s[0] for s in SETS])
def test_real_messages_stream_into_tables_that_match_the_model(spark, tmp_path, name, key, connector, per_batch):
    records = load_set(name)
    topic = records[0]["topic"]
    key_fields = key_fields_of(records, key)
    tables = {topic: {"hoodie.datasource.write.recordkey.field": ",".join(key)}} if key else None
    sink = DebeziumSink(str(tmp_path / "lake"), tables=tables)
    source, chk = tmp_path / "in", tmp_path / "chk"
    batches = [records[i : i + per_batch] for i in range(0, len(records), per_batch)]
    write_batch(source, 0, batches[0])
    stream = spark.readStream.schema(KAFKA_DDL).option("maxFilesPerTrigger", 1).json(str(source))
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(chk)).start()
    path = tmp_path / "lake" / table_name(topic)
    try:
        for i, batch in enumerate(batches):
            if i:
                write_batch(source, i, batch)
            query.processAllAvailable()
            expected = final_rows([r for b in batches[: i + 1] for r in b], key_fields, connector)
            assert_table_matches(rs_read(str(path)), expected, key_fields, f"{name} after batch {i}")
    finally:
        query.stop()
        sink.close()


@pytest.mark.parametrize("version", [8, 9])
def test_real_messages_into_a_table_of_hudi_1x_versions(spark, tmp_path, version):
    """`hoodie.write.table.version`: the Postgres set (updates, deletes, a composite key) into a table of version 8 or
    9 with compaction every 2 delta commits; HoodieTable and hudi-rs read the model after every micro-batch."""
    name, key, connector, per_batch = SETS[4]
    records = load_set(name)
    topic = records[0]["topic"]
    options = {"hoodie.write.table.version": str(version), "compaction.schedule.enabled": "true"}
    options.update({"compaction.delta_commits": "2", "compaction.async.enabled": "false"})
    sink = DebeziumSink(
        str(tmp_path / "lake"), options, tables={topic: {"hoodie.datasource.write.recordkey.field": ",".join(key)}}
    )
    path = str(tmp_path / "lake" / table_name(topic))
    batches = [records[i : i + per_batch] for i in range(0, len(records), per_batch)]
    try:
        for i, batch in enumerate(batches):
            sink(spark.createDataFrame(batch, KAFKA_DDL), i)
            expected = final_rows([r for b in batches[: i + 1] for r in b], key, connector)
            assert_table_matches(rs_read(path), expected, key, f"hudi-rs after batch {i}")
            assert_table_matches(HoodieTable(path).read(), expected, key, f"HoodieTable after batch {i}")
    finally:
        sink.close()
    table = HoodieTable(path)
    assert table.config.version == version and table.timeline.layout == 2
    assert "commit" in [i.action for i in table.timeline.commits_timeline()]


# -- several topics ------------------------------------------------------------------------------------------------
THREE = [  # (message set, record key, connector)
    ("pg_flink_products_schema.jsonl", ["id"], "postgresql"),
    ("mysql_risingwave_customers_schema.jsonl", ["id"], "mysql"),
    ("pg_risingwave_chbench_district.jsonl", ["d_w_id", "d_id"], "postgresql"),
]


def interleaved(sets, n_batches):
    """The sets' records cut into n_batches micro-batches, each holding a slice of every topic."""
    batches = [[] for _ in range(n_batches)]
    for records in sets:
        size = -(-len(records) // n_batches)
        for i in range(n_batches):
            batches[i].extend(records[i * size : (i + 1) * size])
    return batches


def batch_ids(path, storage_options=None):
    from hoodie_stream import HoodieTable

    table = HoodieTable(str(path), storage_options)
    out = []
    for inst in table.timeline.commits_timeline():
        extra = table.timeline.read_commit_metadata(inst.timestamp).extra_metadata
        out.extend(int(v) for v in json.loads(extra["_hudi_streaming_sink_checkpoint"]).values())
    return out


class FailOnce:
    """A table sink that fails its next micro-batch (a crash between two tables' commits), then writes again."""

    def __init__(self, sink):
        self.sink, self.failed = sink, False

    def __call__(self, df, batch_id):
        if not self.failed:
            self.failed = True
            raise RuntimeError("injected failure before this table's commit")
        return self.sink(df, batch_id)

    def close(self, wait=True):
        self.sink.close(wait)

    def metrics(self):
        return self.sink.metrics()


def test_three_topics_make_three_tables_and_a_replayed_batch_writes_only_the_tables_that_missed_it(spark, tmp_path):
    sets = [load_set(name) for name, _, _ in THREE]
    topics = [records[0]["topic"] for records in sets]
    tables = {t: {"hoodie.datasource.write.recordkey.field": ",".join(k)} for t, (_, k, _) in zip(topics, THREE)}
    sink = DebeziumSink(str(tmp_path / "lake"), tables=tables)
    batches = interleaved(sets, 3)
    paths = [tmp_path / "lake" / table_name(t) for t in topics]
    ordered = sorted(range(3), key=lambda i: topics[i])  # tables are written in topic order
    for b, batch in enumerate(batches):
        df = spark.createDataFrame(
            [tuple(r[c] for c in ("key", "value", "topic", "partition", "offset")) for r in batch], KAFKA_DDL
        )
        if b == 1:
            second = topics[ordered[1]]
            sink._sinks[second] = FailOnce(sink._sinks[second])
            with pytest.raises(RuntimeError, match="injected failure"):
                sink(df, b)
            assert batch_ids(paths[ordered[0]]) == [0, 1]
            assert batch_ids(paths[ordered[1]]) == [0] and batch_ids(paths[ordered[2]]) == [0]
        sink(df, b)  # the replay after the failure: the first table is not written again
        for i, (name, key, connector) in enumerate(THREE):
            assert batch_ids(paths[i]) == list(range(b + 1)), f"{name} after batch {b}"
            expected = final_rows([r for bb in batches[: b + 1] for r in bb if r["topic"] == topics[i]], key, connector)
            assert_table_matches(rs_read(str(paths[i])), expected, key, f"{name} after batch {b}")
    # the sink's figures: per table, one committed row per micro-batch, at the table's own instants (the replay
    # skipped by the first table is a row without an instant)
    rows = sink.metrics().to_pylist()
    for topic, path in zip(topics, paths):
        mine = [r for r in rows if r["table"] == table_name(topic)]
        instants = [i.timestamp for i in HoodieTable(str(path)).timeline.commits_timeline()]
        assert [r["instant"] for r in mine if r["instant"]] == instants
        assert [r["batch_id"] for r in mine if r["instant"]] == [0, 1, 2]
    assert [r["skipped"] for r in rows if r["table"] == table_name(topics[ordered[0]])] == [False, False, True, False]
    sink.close()


# -- without schemas ----------------------------------------------------------------------------------------------
def test_messages_without_schema_use_the_schema_given_per_topic(spark, tmp_path):
    from test_debezium_events import embedded_schemas

    records = load_set("pg_flink_products_noschema.jsonl")
    schema = embedded_schemas(load_set("pg_flink_products_schema.jsonl"))[0][0]
    topic = records[0]["topic"]
    sink = DebeziumSink(
        str(tmp_path / "lake"),
        tables={topic: {"hoodie.datasource.write.recordkey.field": "id"}},
        schemas={topic: json.dumps(schema)},
    )
    for b in range(2):
        part = records[b * 8 : (b + 1) * 8]
        sink(
            spark.createDataFrame(
                [tuple(r[c] for c in ("key", "value", "topic", "partition", "offset")) for r in part], KAFKA_DDL
            ),
            b,
        )
    expected = final_rows(records, ["id"], "postgresql", schema)
    assert_table_matches(rs_read(str(tmp_path / "lake" / table_name(topic))), expected, ["id"], "bare")
    sink.close()


# -- bad input: an error naming topic, partition and offset, and no table changed --------------------------------------
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset")


def kafka_df(spark, records):
    return spark.createDataFrame([tuple(r[c] for c in KAFKA_COLUMNS) for r in records], KAFKA_DDL)


def rollback_instants(path):
    from hoodie_stream import HoodieTable

    return [i.timestamp for i in HoodieTable(str(path)).timeline.instants if i.action == "rollback"]


def snapshot(path):
    """The table's files and their sizes: what 'unchanged' means."""
    return sorted(
        (str(p.relative_to(path)), p.stat().st_size)
        for p in path.rglob("*")
        if p.is_file() and ".hoodie/.index" not in str(p) and "/.temp" not in str(p) and "/.locks/" not in str(p)
    )


@pytest.fixture
def two_tables(spark, tmp_path):
    """A DebeziumSink whose two tables (PostgreSQL and MySQL topics) hold a first micro-batch."""
    pg, my = load_set("pg_flink_products_schema.jsonl"), load_set("mysql_risingwave_customers_schema.jsonl")
    tables = {
        pg[0]["topic"]: {"hoodie.datasource.write.recordkey.field": "id"},
        my[0]["topic"]: {"hoodie.datasource.write.recordkey.field": "id"},
    }
    sink = DebeziumSink(str(tmp_path / "lake"), tables=tables)
    sink(kafka_df(spark, pg[:9] + my[:4]), 0)
    paths = [tmp_path / "lake" / table_name(pg[0]["topic"]), tmp_path / "lake" / table_name(my[0]["topic"])]
    before = [snapshot(p) for p in paths]
    yield sink, pg, my, paths, before
    sink.close()


def _with_offset(record, offset, **changes):
    return dict(record, offset=offset, **changes)


def test_a_truncate_stops_the_batch_under_the_default_policy(spark, two_tables):
    sink, pg, my, paths, before = two_tables
    event = json.loads(my[5]["value"])
    event["payload"].update(op="t", before=None, after=None)
    truncate = _with_offset(my[5], 77, value=json.dumps(event, separators=(",", ":")))
    with pytest.raises(HoodieError, match=rf"topic '{my[0]['topic']}' partition 0 offset 77: a truncate"):
        sink(kafka_df(spark, pg[9:12] + [my[4], truncate]), 1)
    assert [snapshot(p) for p in paths] == before


def test_an_undecodable_message_stops_the_batch_naming_its_offset(spark, two_tables):
    sink, pg, my, paths, before = two_tables
    bad = _with_offset(my[5], 78, value='{"schema":{"type":"struct"},"payload":')
    with pytest.raises(HoodieError, match=rf"topic '{my[0]['topic']}' partition 0 offset 78"):
        sink(kafka_df(spark, pg[9:12] + [bad]), 1)
    broken = json.loads(pg[10]["value"])
    broken["payload"]["after"]["weight"] = "heavy"
    bad = _with_offset(pg[10], 79, value=json.dumps(broken, separators=(",", ":")))
    with pytest.raises(HoodieError, match=rf"topic '{pg[0]['topic']}' partition 0 offset 79"):
        sink(kafka_df(spark, my[4:6] + [pg[9], bad]), 1)
    assert [snapshot(p) for p in paths] == before


def test_an_incompatible_schema_change_stops_the_batch_naming_topic_column_and_offset(spark, two_tables):
    sink, pg, my, paths, before = two_tables
    changed = json.loads(pg[9]["value"])
    for image in ("before", "after"):
        part = next(f for f in changed["schema"]["fields"] if f["field"] == image)
        next(f for f in part["fields"] if f["field"] == "name")["type"] = "int32"
    changed["payload"]["after"]["name"] = 5
    changed["payload"]["before"] = None
    bad = _with_offset(pg[9], 80, value=json.dumps(changed, separators=(",", ":")))
    with pytest.raises(HoodieError, match=rf"topic '{pg[0]['topic']}' partition 0 offset 80: column 'name'"):
        sink(kafka_df(spark, my[4:6] + [bad]), 1)
    assert [snapshot(p) for p in paths] == before


def test_a_topic_without_key_or_configured_record_key_is_refused(spark, tmp_path):
    records = load_set("pg_flink_products_schema.jsonl")
    sink = DebeziumSink(str(tmp_path / "lake"))
    with pytest.raises(HoodieConfigError, match=r"topic 'fullfillment.inventory.products' partition 0 offset 0: the"):
        sink(kafka_df(spark, records[:3]), 0)
    assert not (tmp_path / "lake").exists()


def test_a_new_column_evolves_the_table_and_a_dropped_one_stays_null(spark, two_tables):
    sink, pg, my, paths, _before = two_tables
    added = json.loads(pg[9]["value"])
    for image in ("before", "after"):
        part = next(f for f in added["schema"]["fields"] if f["field"] == image)
        part["fields"].append({"type": "string", "optional": True, "field": "colour"})
    added["payload"]["after"]["colour"] = "red"
    if added["payload"]["before"]:
        added["payload"]["before"]["colour"] = None
    sink(kafka_df(spark, [_with_offset(pg[9], 81, value=json.dumps(added, separators=(",", ":")))]), 1)
    dropped = json.loads(pg[10]["value"])
    for image in ("before", "after"):
        part = next(f for f in dropped["schema"]["fields"] if f["field"] == image)
        part["fields"] = [f for f in part["fields"] if f["field"] != "description"]
        if dropped["payload"][image]:
            dropped["payload"][image].pop("description")
    sink(kafka_df(spark, [_with_offset(pg[10], 82, value=json.dumps(dropped, separators=(",", ":")))]), 2)
    rows = {r["id"]: r for r in rs_read(str(paths[0])).to_pylist()}
    key_added, key_dropped = added["payload"]["after"]["id"], dropped["payload"]["after"]["id"]
    assert rows[key_added]["colour"] == "red"
    assert rows[key_dropped]["description"] is None and rows[key_dropped]["colour"] is None
    assert all(rows[k]["colour"] is None for k in rows if k != key_added)
    assert all(rows[k]["description"] is not None for k in rows if k != key_dropped)


def test_a_new_schema_or_topic_in_a_one_topic_stream_is_planned_again(spark, tmp_path, caplog):
    """After a micro-batch of one topic, the next is written in one pass with that batch's plan; a message of a
    schema or a topic the plan does not know makes the micro-batch planned again, with nothing written twice. A task
    that meets it stops without failing and the driver abandons the instant before the commit: Spark logs no error
    (no executor traceback); the instant is rolled back when other tasks wrote files (batch 2: one message per task,
    the first of the known schema), else it leaves nothing (batch 3). A payload field its schema does not declare is
    ignored, as Kafka Connect's JsonConverter ignores it, and logged once."""
    pg, my = load_set("pg_flink_products_schema.jsonl"), load_set("mysql_risingwave_customers_schema.jsonl")
    tables = {
        pg[0]["topic"]: {"hoodie.datasource.write.recordkey.field": "id"},
        my[0]["topic"]: {"hoodie.datasource.write.recordkey.field": "id"},
    }
    sink = DebeziumSink(str(tmp_path / "lake"), tables=tables)
    pg_path, my_path = (tmp_path / "lake" / table_name(r[0]["topic"]) for r in (pg, my))
    caplog.set_level("INFO", logger="hoodie_stream")
    sink(kafka_df(spark, pg[:9]), 0)
    undeclared = json.loads(pg[9]["value"])
    undeclared["payload"]["after"]["colour"] = "blue"  # not in the message's schema
    with spark_log(spark) as logged:
        sink(kafka_df(spark, [dict(pg[9], value=json.dumps(undeclared, separators=(",", ":")))]), 1)
        added = json.loads(pg[11]["value"])
        for image in ("before", "after"):
            part = next(f for f in added["schema"]["fields"] if f["field"] == image)
            part["fields"].append({"type": "string", "optional": True, "field": "colour"})
        added["payload"]["after"]["colour"] = "red"
        added["payload"]["after"]["shade"] = "dark"  # not in the message's schema
        two_tasks = [pg[10], dict(pg[11], value=json.dumps(added, separators=(",", ":")))]  # a new schema
        one_each = spark.sparkContext.parallelize([tuple(r[c] for c in KAFKA_COLUMNS) for r in two_tasks], 2)
        sink(spark.createDataFrame(one_each, KAFKA_DDL), 2)
        rollbacks = rollback_instants(pg_path)
        sink(kafka_df(spark, pg[12:13] + my[:4]), 3)  # a new topic
        lines = logged()
    sink.close()
    assert "ERROR" not in lines and "Exception in task" not in lines and "Lost task" not in lines, lines
    assert len(rollbacks) == 1, "batch 2's first instant wrote pg[10]'s row and was rolled back"
    assert rollback_instants(pg_path) == rollbacks, "batch 3's first instant wrote nothing: it left nothing"
    messages = [r.getMessage() for r in caplog.records if r.name == "hoodie_stream"]
    pg_topic = pg[0]["topic"]
    replans = [m for m in messages if "planned again" in m]
    assert replans == [
        f"micro-batch 2 planned again: topic {pg_topic!r} partition 0 offset {pg[11]['offset']} is not in the plan "
        f"of topic {pg_topic!r} (a new schema)",
        f"micro-batch 3 planned again: topic {my[0]['topic']!r} partition 0 offset {my[0]['offset']} is not in the "
        f"plan of topic {pg_topic!r} (a new topic)",
    ]
    ignored = sorted(m for m in messages if "not declared" in m)
    assert ignored == [
        f"topic {pg_topic!r}: field '{f}' of the payloads is not declared by the schema their messages carry; it is "
        f"ignored, as Kafka Connect's JsonConverter ignores it"
        for f in ("after.colour", "after.shade")
    ]
    assert batch_ids(pg_path) == [0, 1, 2, 3] and batch_ids(my_path) == [3]
    rows = {r["id"]: r for r in rs_read(str(pg_path)).to_pylist()}
    assert rows[added["payload"]["after"]["id"]]["colour"] == "red"
    assert rows[undeclared["payload"]["after"]["id"]]["colour"] is None  # written under the message's own schema
    assert "shade" not in rows[added["payload"]["after"]["id"]]
    expected = final_rows(pg[:11] + pg[12:13], ["id"], "postgresql")
    got = table_rows(rs_read(str(pg_path)), ["id"])
    assert sorted(got) == sorted(set(expected) | {(added["payload"]["after"]["id"],)})
    assert_table_matches(rs_read(str(my_path)), final_rows(my[:4], ["id"], "mysql"), ["id"], "mysql")


def test_flatten_gives_a_topics_rows_as_the_model_says(spark):
    from hoodie_stream.debezium import flatten

    pg, my = load_set("pg_flink_products_schema.jsonl"), load_set("mysql_risingwave_customers_schema.jsonl")
    df = kafka_df(spark, pg + my)
    with pytest.raises(HoodieConfigError, match="holds the topics"):
        flatten(df)
    tables = {my[0]["topic"]: {"hoodie.datasource.write.recordkey.field": "id"}}
    rows = flatten(df, my[0]["topic"], tables=tables).toArrow()
    from debezium_model import event_row

    expected = [e[3] for e in (event_row(r, ["id"], "mysql") for r in my) if e is not None]

    def order_key(row):
        return (row["_event_order"], row["id"], row["_change_operation_type"], row["_upstream_event_processed_ts_ms"])

    assert rows.num_rows == len(expected)
    for got, want in zip(sorted(rows.to_pylist(), key=order_key), sorted(expected, key=order_key)):
        assert {k: _norm(got[k]) for k in want} == {k: _norm(v) for k, v in want.items()}
