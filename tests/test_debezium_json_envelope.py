"""Kafka Connect JSON messages with their schema, split and grouped by schema without parsing each message, against
Python's json: every real message of tests/data/debezium that carries its schema, and random messages whose strings
hold quotes, backslashes, braces and the separator's own text."""

import decimal
import json
import pathlib
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hoodie_stream.debezium import json_envelope
from hoodie_stream.errors import HoodieFormatError

DATA = pathlib.Path(__file__).parent / "data" / "debezium"


def real_messages():
    out = []
    for path in sorted(DATA.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            value = json.loads(line)["value"]
            if value is not None and json.loads(value).get("schema") is not None:
                out.append(value)
    return out


def as_json_holds(schema, value):
    """A payload value (parsed with exact decimals) as the schema types it: floats as float, the rest as parsed."""
    if value is None:
        return None
    kind = schema.get("type")
    if kind == "struct":
        return {f["field"]: as_json_holds(f, value.get(f["field"])) for f in schema.get("fields", [])}
    if kind == "array":
        return [as_json_holds(schema["items"], v) for v in value]
    if kind in ("float32", "float64", "float", "double"):
        return float(value)
    return value


def test_every_real_message_splits_groups_and_parses_as_json_reads_it():
    messages = real_messages()
    assert len(messages) >= 200
    schemas, payloads = json_envelope.split_envelopes(pa.array(messages))
    for i, text in enumerate(messages):
        message = json.loads(text)
        assert json.loads(schemas[i].as_py()) == message["schema"]
        assert json.loads(payloads[i].as_py()) == message["payload"]
    groups = json_envelope.group_by_schema(pa.array(messages))
    assert sorted(r for g in groups for r in g.rows) == list(range(len(messages)))
    assert len(groups) < len(messages) / 5  # a topic's messages share their schemas
    for group in groups:
        parsed = group.payload.to_pylist()
        for k, row in enumerate(group.rows):
            message = json.loads(messages[row], parse_float=decimal.Decimal)
            assert message["schema"] == group.schema
            assert parsed[k] == as_json_holds(group.schema, message["payload"]), f"message {row}"


PIECES = st.sampled_from(list('ab{}[]",:\\ é\n\x00') + ['"payload"', ',"payload":', '"},"payload":{'])
TEXT = st.lists(PIECES, max_size=8).map("".join)


@st.composite
def messages(draw):
    """Compact JsonConverter-shaped messages of two schemas, their strings full of JSON's special characters."""
    out = []
    for _ in range(draw(st.integers(1, 8))):
        doc = draw(TEXT)
        schema = {
            "type": "struct",
            "fields": [
                {"type": "string", "optional": True, "field": "s", "doc": doc},
                {"type": "int64", "optional": True, "field": "n"},
                {"type": "struct", "optional": True, "field": "inner", "fields": [{"type": "string", "field": "t"}]},
            ],
            "optional": False,
            "name": draw(st.sampled_from(["a.Envelope", "b.Envelope"])),
        }
        payload = {"s": draw(st.one_of(st.none(), TEXT)), "n": draw(st.integers(-(2**63), 2**63 - 1)), "inner": None}
        if draw(st.booleans()):
            payload["inner"] = {"t": draw(TEXT)}
        out.append((schema, payload, json.dumps({"schema": schema, "payload": payload}, separators=(",", ":"))))
    return out


@settings(max_examples=300, deadline=None)
@given(messages(), st.booleans(), st.sampled_from([0, 1, 32]))
def test_random_messages_split_as_json_reads_them(batch, spaced, prefix_groups):
    """Cut by the prefixes of up to `prefix_groups` schemas, the rest by the byte scan (0: all of them)."""
    texts = [t for _s, _p, t in batch]
    if spaced:  # another shape: Python's json splits it
        texts[0] = json.dumps({"schema": batch[0][0], "payload": batch[0][1]}, indent=1)
    with mock.patch.object(json_envelope, "PREFIX_GROUPS", prefix_groups):
        schemas, payloads = json_envelope.split_envelopes(pa.array(texts))
    for i, (schema, payload, _text) in enumerate(batch):
        assert json.loads(schemas[i].as_py()) == schema
        assert json.loads(payloads[i].as_py()) == payload
    # the byte scan itself reads every compact message (Python's json only the other shape)
    _schemas, _payloads, regular = json_envelope._split_scanned(pa.array(texts), np.arange(len(texts)))
    assert regular.tolist() == [not (spaced and i == 0) for i in range(len(texts))]
    for group in json_envelope.group_by_schema(pa.array(texts)):
        assert group.payload.to_pylist() == [batch[r][1] for r in group.rows]
        assert all(batch[r][0] == group.schema for r in group.rows)


def test_messages_that_are_not_connect_json_are_named():
    with pytest.raises(HoodieFormatError, match="message 1 is not a Kafka Connect JSON message"):
        json_envelope.split_envelopes(pa.array(['{"schema":{"type":"string"},"payload":"x"}', '{"payload":1}']))
    with pytest.raises(HoodieFormatError, match="tombstones"):
        json_envelope.split_envelopes(pa.array(['{"schema":{},"payload":{}}', None]))
    wrong = '{"schema":{"type":"struct","fields":[{"type":"int64","field":"n"}]},"payload":{"n":"x"}}'
    with pytest.raises(HoodieFormatError, match="does not match its schema: field 'n' holds a string \"x\""):
        json_envelope.group_by_schema(pa.array([wrong]))
