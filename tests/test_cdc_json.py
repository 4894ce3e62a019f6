"""The changelog's JSON images (format/cdc/json_images.py, vectorized with Arrow) against a plain-Python model: every row
parses back, with Python's json module, to the row's values as Avro renders them (dates as days, timestamps as their
stored integers, decimals as text), whatever the strings hold (quotes, backslashes, control characters, any
Unicode) and whatever the floats are (NaN, infinities)."""

import datetime
import decimal
import json
import math

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from hoodie_stream.format.cdc.json_images import json_rows

SCHEMA = pa.schema(
    [
        ("s", pa.string()),
        ("i", pa.int64()),
        ("f", pa.float64()),
        ("b", pa.bool_()),
        ("d", pa.date32()),
        ("t", pa.timestamp("us")),
        ("tm", pa.time32("ms")),
        ("m", pa.decimal128(10, 2)),
        ("raw", pa.binary()),
        ("tags", pa.list_(pa.string())),
    ]
)
EPOCH = datetime.date(1970, 1, 1)

row_strategy = st.fixed_dictionaries(
    {
        "s": st.none() | st.text(),
        "i": st.none() | st.integers(-(2**63), 2**63 - 1),
        "f": st.none() | st.floats(allow_nan=True, allow_infinity=True),
        "b": st.none() | st.booleans(),
        "d": st.none() | st.dates(datetime.date(1900, 1, 1), datetime.date(2200, 1, 1)),
        "t": st.none() | st.datetimes(datetime.datetime(1900, 1, 1), datetime.datetime(2200, 1, 1)),
        "tm": st.none() | st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
        "m": st.none() | st.decimals(-(10**7), 10**7, places=2, allow_nan=False, allow_infinity=False),
        "raw": st.none() | st.binary(max_size=8),
        "tags": st.none() | st.lists(st.text(max_size=5), max_size=3),
    }
)


def model(row):
    """The values the JSON of one row must parse back to."""
    out = dict(row)
    if row["d"] is not None:
        out["d"] = (row["d"] - EPOCH).days
    if row["t"] is not None:
        delta = row["t"] - datetime.datetime(1970, 1, 1)
        out["t"] = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if row["tm"] is not None:
        tm = row["tm"]
        out["tm"] = ((tm.hour * 60 + tm.minute) * 60 + tm.second) * 1000 + tm.microsecond // 1000
    if row["m"] is not None:
        out["m"] = str(decimal.Decimal(row["m"]).quantize(decimal.Decimal("0.01")))
    if row["raw"] is not None:
        out["raw"] = row["raw"].decode("latin-1")
    return out


def same(a, b):
    if isinstance(b, float):  # a float stays a float (1.0, not 1)
        return isinstance(a, float) and ((math.isnan(a) and math.isnan(b)) or a == b)
    return a == b


@settings(max_examples=60, deadline=None)
@given(st.lists(row_strategy, min_size=1, max_size=20))
def test_every_image_parses_back_to_its_row(rows):
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    texts = json_rows(table).to_pylist()
    assert len(texts) == len(rows)
    for text, row in zip(texts, rows, strict=True):
        parsed = json.loads(text)
        assert list(parsed) == SCHEMA.names  # fields in schema order
        expected = model(row)
        assert all(same(parsed[k], expected[k]) for k in SCHEMA.names), (text, expected)


def test_the_text_is_avros_shape():
    table = pa.table(
        {"id": ['k"1'], "v": [1], "ok": [True], "x": [None]},
        schema=pa.schema([("id", pa.string()), ("v", pa.int32()), ("ok", pa.bool_()), ("x", pa.float64())]),
    )
    assert json_rows(table).to_pylist() == ['{"id": "k\\"1", "v": 1, "ok": true, "x": null}']
