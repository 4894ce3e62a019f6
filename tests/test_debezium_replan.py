"""A micro-batch written with the plan of the one before (replan.py), Spark-free: which record a plan does not
foresee, on real message sets (JSON with schemas as Spark cuts it, and Avro re-encoded), against a plain-Python
reading of the same records; the task then stops without failing (Flatten, given an accumulator) or names it."""

import dataclasses
import json

import pyarrow as pa
import pytest

from debezium_avro import to_avro
from debezium_model import load_set
from hoodie_stream.debezium import avro_envelope, events, kafka, replan
from hoodie_stream.errors import HoodieUnplannedInputError, TaskFailure, rebuild_task_error
from test_debezium_events import embedded_schemas

PG, MY = "pg_flink_products_schema.jsonl", "mysql_risingwave_customers_schema.jsonl"


def json_table(records, known):
    """The records as Spark gives them to a planned micro-batch's tasks (kafka._cut_by_schema): each value with a
    known schema cut to its payload, with that schema's position; -1 and the whole message for another schema."""
    values, codes = [], []
    for r in records:
        message = None if r["value"] is None else json.loads(r["value"])
        text = None if message is None else json.dumps(message["schema"], separators=(",", ":"))
        if text in known:
            values.append(json.dumps(message["payload"], separators=(",", ":")))
            codes.append(known.index(text))
        else:
            values.append(r["value"])
            codes.append(-1)
    return pa.table(
        {
            "key": pa.array([r["key"] for r in records], pa.string()),
            "value": pa.array(values, pa.string()),
            "topic": pa.array([r["topic"] for r in records], pa.string()),
            "partition": pa.array([r["partition"] for r in records], pa.int32()),
            "offset": pa.array([r["offset"] for r in records], pa.int64()),
            events.SCHEMA_CODE: pa.array(codes, pa.int32()),
        }
    )


def avro_table(records):
    return pa.table(
        {c: pa.array([r[c] for r in records], pa.binary()) for c in ("key", "value")}
        | {
            "topic": pa.array([r["topic"] for r in records], pa.string()),
            "partition": pa.array([r["partition"] for r in records], pa.int32()),
            "offset": pa.array([r["offset"] for r in records], pa.int64()),
        }
    )


def json_plan(records):
    """The plan a micro-batch of `records` (one topic) leaves: its topic and its schema texts."""
    known = []
    for r in records:
        if r["value"] is not None:
            text = json.dumps(json.loads(r["value"])["schema"], separators=(",", ":"))
            known += [text] if text not in known else []
    spec = events.topic_spec(records[0]["topic"], embedded_schemas(records), ["id"])
    return dataclasses.replace(spec, known_schemas=tuple(known)), known


def with_schema_field(record):
    """The record with a column added to its schema: a schema the plan does not know."""
    message = json.loads(record["value"])
    for image in ("before", "after"):
        part = next(f for f in message["schema"]["fields"] if f["field"] == image)
        part["fields"].append({"type": "string", "optional": True, "field": "colour"})
    return dict(record, value=json.dumps(message, separators=(",", ":")))


def test_json_records_of_another_topic_or_schema_are_not_foreseen_tombstones_are():
    pg, my = load_set(PG), load_set(MY)
    spec, known = json_plan(pg[:9])
    assert replan.first_unforeseen(json_table(pg, known), spec) is None  # the later messages: the same schema
    tombstone = dict(pg[3], value=None, offset=100)
    assert replan.first_unforeseen(json_table(pg[:5] + [tombstone] + pg[5:], known), spec) is None
    for batch, expected in [
        (pg[9:12] + [with_schema_field(pg[12])] + pg[13:], 3),  # a new schema
        (pg[9:11] + my[:2] + pg[11:], 2),  # a new topic
        (pg[9:10] + [dict(pg[10], topic=None)], 1),  # no topic
    ]:
        assert replan.first_unforeseen(json_table(batch, known), spec) == expected


def test_avro_records_of_an_unknown_value_or_key_id_are_not_foreseen():
    records = load_set("compat_transferia_mysql_customers3_crud.jsonl")  # keys, and tombstones (foreseen)
    avro, schemas = to_avro(records)
    live = [i for i, r in enumerate(avro) if r["value"] is not None]
    value_ids = sorted({int.from_bytes(avro[i]["value"][1:5], "big") for i in live})
    envelopes = [(avro_envelope.connect_schema(schemas[i]), f"id {i}") for i in value_ids]
    spec = events.topic_spec(records[0]["topic"], envelopes, ["pk"], value_format="avro", avro_schemas=schemas)
    spec = dataclasses.replace(spec, known_schemas=tuple(str(i) for i in value_ids))
    assert len(live) < len(avro) and replan.first_unforeseen(avro_table(avro), spec) is None
    reframed = b"\x00" + (999).to_bytes(4, "big")
    for i, change in [
        (live[-1], {"value": reframed + avro[live[-1]]["value"][5:]}),  # a value schema id the plan does not know
        (1, {"key": reframed + avro[1]["key"][5:]}),  # a key schema id
        (live[1], {"value": b"{}"}),  # not in the wire format: the plan made again names it
    ]:
        batch = [dict(r, **change) if j == i else r for j, r in enumerate(avro)]
        assert replan.first_unforeseen(avro_table(batch), spec) == i


def test_a_planned_task_stops_at_the_first_unforeseen_record_and_names_it_without_an_accumulator():
    pg, my = load_set(PG), load_set(MY)
    spec, known = json_plan(pg[:9])
    batches = json_table(pg[9:11] + my[:3] + pg[11:], known).to_batches(max_chunksize=2)
    with pytest.raises(TaskFailure) as raised:  # as a Spark task raises it (errors.in_task)
        list(kafka.Flatten(spec)(iter(batches)))
    error = rebuild_task_error(raised.value)
    assert isinstance(error, HoodieUnplannedInputError) and str(error) == (
        f"topic {my[0]['topic']!r} partition 0 offset {my[0]['offset']} is not in the plan of topic "
        f"{pg[0]['topic']!r} (a new topic)"
    )


def test_the_first_unforeseen_record_of_all_tasks_is_the_least_partition_and_offset():
    first = replan.FirstOf()
    reports = [(2, 5, "b"), None, (0, 9, "a"), (0, 7, "a")]
    value = first.zero(None)
    for report in reports:
        value = first.addInPlace(value, report)
    assert value == (0, 7, "a") == min(r for r in reports if r is not None)
    assert first.addInPlace(first.zero(None), None) is None
