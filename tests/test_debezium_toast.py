"""TOAST: a column holding Debezium's placeholder (`__debezium_unavailable_value`, or a custom one, `hex:` for
binary) keeps the value stored for its key, resolved when the table is written, so that hudi-rs reads the real value.
The update is the real message of tests/data/debezium/pg_toast_authors_noschema.jsonl (PostgreSQL, replica identity
DEFAULT, `biography` TOASTed and unchanged); the insert before it is that message made an insert with the value."""

import base64
import hashlib
import json
import uuid

from debezium_model import KAFKA_DDL, load_set
from hoodie_stream import DebeziumSink, HoodieStreamSink
from hoodie_stream.debezium import table_name
from oracle import rs_read
from test_debezium_events import AUTHORS

PLACEHOLDER = "__debezium_unavailable_value"
AUTHORS_WITH_PHOTO = dict(AUTHORS, fields=AUTHORS["fields"] + [{"type": "bytes", "optional": True, "field": "photo"}])


def records(spark, rows):
    return spark.createDataFrame(
        [tuple(r[c] for c in ("key", "value", "topic", "partition", "offset")) for r in rows], KAFKA_DDL
    )


def events():
    """(insert with the real values, the real update with the placeholder, a later update with the placeholder)."""
    update = load_set("pg_toast_authors_noschema.jsonl")[0]
    event = json.loads(update["value"])
    assert event["after"]["biography"] == PLACEHOLDER
    photo = base64.b64encode(b"\x89PNG...").decode()
    insert = json.loads(update["value"])
    insert.update(op="c", before=None)
    insert["after"] = dict(insert["after"], biography="Tom Wolfe wrote The Right Stuff.", photo=photo)
    insert["source"] = dict(insert["source"], lsn=insert["source"]["lsn"] - 1000)
    event["after"]["photo"] = base64.b64encode(PLACEHOLDER.encode()).decode()
    later = json.loads(json.dumps(event))
    later["after"]["last_name"] = "Wolfe Jr."
    later["source"] = dict(later["source"], lsn=later["source"]["lsn"] + 10)
    topic = update["topic"]
    return [
        {"key": update["key"], "value": json.dumps(e), "topic": topic, "partition": 0, "offset": i}
        for i, e in enumerate((insert, event, later))
    ]


def test_the_placeholder_keeps_the_stored_value_across_and_within_micro_batches(spark, tmp_path):
    rows = events()
    topic = rows[0]["topic"]
    sink = DebeziumSink(str(tmp_path / "lake"), schemas={topic: AUTHORS_WITH_PHOTO})
    path = str(tmp_path / "lake" / table_name(topic))
    sink(records(spark, rows[:1]), 0)
    sink(records(spark, rows[1:2]), 1)  # the real update: biography and photo unavailable
    (row,) = rs_read(path).to_pylist()
    assert row["biography"] == "Tom Wolfe wrote The Right Stuff." and row["photo"] == b"\x89PNG..."
    assert row["_change_operation_type"] == "u"
    sink(records(spark, rows[2:]), 2)
    (row,) = rs_read(path).to_pylist()
    assert (row["last_name"], row["biography"], row["photo"]) == (
        "Wolfe Jr.",
        "Tom Wolfe wrote The Right Stuff.",
        b"\x89PNG...",
    )
    sink.close()
    # within one micro-batch (the insert and both updates together, after a first batch of another key)
    other = DebeziumSink(str(tmp_path / "lake2"), schemas={topic: AUTHORS_WITH_PHOTO})
    first = json.loads(rows[0]["value"])
    first["after"] = dict(first["after"], id=7)
    other(records(spark, [dict(rows[0], key='{"id":7}', value=json.dumps(first))]), 0)
    other(records(spark, rows), 1)
    got = {r["id"]: r for r in rs_read(str(tmp_path / "lake2" / table_name(topic))).to_pylist()}
    assert got[1001]["biography"] == "Tom Wolfe wrote The Right Stuff." and got[1001]["last_name"] == "Wolfe Jr."
    other.close()
    # within the first micro-batch of a new table (bulk insert)
    first_batch = DebeziumSink(str(tmp_path / "lake3"), schemas={topic: AUTHORS_WITH_PHOTO})
    first_batch(records(spark, rows), 0)
    (stat,) = first_batch.sinks[topic].last_result.stats
    assert stat.path.endswith(".parquet") and stat.num_writes == 1  # bulk inserted: one base file, one record
    (row,) = rs_read(str(tmp_path / "lake3" / table_name(topic))).to_pylist()
    assert (row["last_name"], row["biography"], row["photo"]) == (
        "Wolfe Jr.",
        "Tom Wolfe wrote The Right Stuff.",
        b"\x89PNG...",
    )
    first_batch.close()


def test_a_custom_marker_in_hex_for_binary_columns_in_the_plain_sink(spark, tmp_path):
    options = {
        "hoodie.table.name": "t",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.write.partial.update.mode": "IGNORE_MARKERS",
        "hoodie.write.partial.custom.marker": "hex:00ff",
    }
    sink = HoodieStreamSink(str(tmp_path / "t"), options)
    ddl = "id long, ts long, blob binary, note string"
    sink(spark.createDataFrame([(1, 1, b"real", "kept"), (2, 1, b"two", "x")], ddl), 0)
    sink(spark.createDataFrame([(1, 2, b"\x00\xff", "\x00\ufffd"), (2, 2, b"\x00\xff", "\u00ff")], ddl), 1)
    got = {r["id"]: (r["blob"], r["note"]) for r in rs_read(str(tmp_path / "t")).to_pylist()}
    assert got == {1: (b"real", "kept"), 2: (b"two", "\u00ff")}
    sink.close()


def test_array_columns_take_the_placeholder_in_debeziums_forms(spark, tmp_path):
    """Debezium's PostgreSQL connector puts the placeholder in an unchanged TOASTed array column as a list: of the
    text (text[]), of the name-based UUID of its bytes (uuid[]), of its bytes (bytea[]), or of each byte as a number
    (int[], bigint[]): each keeps the stored value, across micro-batches and within one."""
    options = {
        "hoodie.table.name": "t",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.write.partial.update.mode": "IGNORE_MARKERS",
    }
    ddl = "id long, ts long, tags array<string>, ids array<int>, big array<bigint>, blobs array<binary>, ref array<string>"
    raw = PLACEHOLDER.encode()
    marker = ([PLACEHOLDER], list(raw), list(raw), [raw], [str(uuid.UUID(bytes=hashlib.md5(raw).digest(), version=3))])
    real = {
        1: (["a", "b"], [1, 2], [10], [b"x"], ["0f0e"]),
        2: (["c"], [3], [30, 31], [b"y", b"z"], ["1a1b"]),
    }
    sink = HoodieStreamSink(str(tmp_path / "t"), options)
    sink(spark.createDataFrame([(1, 1, *real[1])], ddl), 0)
    # key 1: all markers against the stored value; key 2: a real version then a marked one in the same batch;
    # key 3: a list that only starts like the marker is a value, kept as it is
    near = (["a", PLACEHOLDER], [*raw, 0], list(raw)[:-1], [raw, raw], [PLACEHOLDER])
    batch = [(1, 2, *marker), (2, 1, *real[2]), (2, 2, *marker), (3, 1, *near)]
    sink(spark.createDataFrame(batch, ddl), 1)
    columns = ("tags", "ids", "big", "blobs", "ref")
    got = {r["id"]: tuple(r[c] for c in columns) for r in rs_read(str(tmp_path / "t")).to_pylist()}
    assert got == {1: real[1], 2: real[2], 3: near}
    sink.close()


def test_placeholders_in_a_bulk_inserted_first_batch_whose_winners_spark_picks(spark, tmp_path):
    """A new table's first micro-batch is bulk inserted; unsorted (write.bulk_insert.sort_input=false), or with a
    global index over a partitioned table, Spark's window picks each key's winner: its markers take the key's latest
    earlier value too, in every form (string, binary, the array forms), and a null value counts as a value."""
    ddl = "id long, ts long, p string, note string, blob binary, tags array<string>, ids array<int>, ref array<string>"
    raw = PLACEHOLDER.encode()
    marker = (PLACEHOLDER, raw, [PLACEHOLDER], list(raw), [str(uuid.UUID(bytes=hashlib.md5(raw).digest(), version=3))])
    real = ("kept", b"x", ["a"], [1, 2], ["0f0e"])
    batch = [
        (1, 1, "a", *real),
        (1, 2, "a", *marker),  # markers: the values of ts 1
        (2, 1, "a", None, None, None, None, None),
        (2, 3, "b", *marker),  # markers after nulls: the nulls (under the global index the key moved partition)
        (3, 1, "a", *marker),  # markers with no earlier value: kept as they are
        (4, 5, "a", *real),
        (4, 4, "a", *marker),  # an older version (event time) is not the winner
    ]
    want = {1: real, 2: (None,) * 5, 3: marker, 4: real}
    columns = ("note", "blob", "tags", "ids", "ref")
    for extra in (
        {"write.bulk_insert.sort_input": "false"},
        {"index.global.enabled": "true", "hoodie.datasource.write.partitionpath.field": "p"},
    ):
        path = str(tmp_path / str(len(extra)))
        options = {
            "hoodie.table.name": "t",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.write.partial.update.mode": "IGNORE_MARKERS",
            **extra,
        }
        sink = HoodieStreamSink(path, options)
        sink(spark.createDataFrame(batch, ddl), 0)
        assert all(s.path.endswith(".parquet") for s in sink.last_result.stats)  # bulk inserted
        got = {r["id"]: tuple(r[c] for c in columns) for r in rs_read(path).to_pylist()}
        assert got == want, extra
        sink.close()


def test_hstore_and_geometry_columns_take_their_placeholders(spark, tmp_path):
    """Debezium's PostgreSQL connector (UnchangedToastedPlaceholder) gives an unchanged TOASTed hstore the map
    {placeholder: placeholder} (a map column in `hstore.handling.mode=map`, its JSON text in the default `json` mode),
    a geometry or geography the fixed SRID 4326 WKB point of each, a point x = y = -99999999, whatever placeholder is
    configured: each keeps the stored value, across micro-batches, within one, and in a bulk-inserted first batch."""
    from hoodie_stream.bucket_assign.markers import GEOGRAPHY_WKB, GEOMETRY_WKB, POINT_XY

    ddl = (
        "id long, ts long, h_json string, h_map map<string,string>, geom struct<wkb:binary,srid:int>, "
        "geog struct<wkb:binary,srid:int>, pt struct<x:double,y:double,wkb:binary,srid:int>"
    )

    def placeholders(text):
        return (
            json.dumps({text: text}, separators=(",", ":")),
            {text: text},
            (GEOMETRY_WKB, 4326),
            (GEOGRAPHY_WKB, 4326),
            (POINT_XY, POINT_XY, None, None),
        )

    marker = placeholders(PLACEHOLDER)
    real = {
        1: ('{"a":"1"}', {"a": "1"}, (b"\x01wkb-1", 4326), (b"\x01wkb-g", 4326), (1.5, 2.5, None, None)),
        2: ('{"b":"2"}', {"b": "2"}, (b"\x01wkb-2", 3857), (b"\x01wkb-h", 4326), (3.5, 4.5, b"\x01", 0)),
    }
    # a value only near a placeholder is a value: another SRID, a map with one more entry, one coordinate only
    near = (
        json.dumps({PLACEHOLDER: PLACEHOLDER}),
        {PLACEHOLDER: PLACEHOLDER, "x": "y"},
        (GEOMETRY_WKB, 3857),
        (GEOMETRY_WKB, None),
        (POINT_XY, 0.0, None, None),
    )
    columns = ("h_json", "h_map", "geom", "geog", "pt")

    def read(path):
        out = {}
        for r in rs_read(path).to_pylist():
            row = []
            for c in columns:
                v = r[c]
                if isinstance(v, dict):  # structs
                    v = tuple(v.values())
                elif isinstance(v, list):  # maps as hudi-rs gives them: [(key, value)]
                    v = dict(v)
                row.append(v)
            out[r["id"]] = tuple(row)
        return out

    options = {
        "hoodie.table.name": "t",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.write.partial.update.mode": "IGNORE_MARKERS",
    }
    path = str(tmp_path / "t")
    sink = HoodieStreamSink(path, options)
    sink(spark.createDataFrame([(1, 1, *real[1])], ddl), 0)
    batch = [(1, 2, *marker), (2, 1, *real[2]), (2, 2, *marker), (3, 1, *near)]
    sink(spark.createDataFrame(batch, ddl), 1)
    assert read(path) == {1: real[1], 2: real[2], 3: near}
    sink.close()
    # the first micro-batch, bulk inserted, sorted (each task's runs) and unsorted (Spark's window); with another
    # placeholder configured the hstore placeholders are made of it, the geometry ones stay
    for sort_input, custom in (("true", {}), ("false", {"hoodie.write.partial.custom.marker": "hex:00ff"})):
        path = str(tmp_path / f"first-{sort_input}")
        sink = HoodieStreamSink(path, {**options, **custom, "write.bulk_insert.sort_input": sort_input})
        text = "\x00\ufffd" if custom else PLACEHOLDER  # the custom marker's octets as text (UTF-8, replaced)
        first = [(1, 1, *real[1]), (1, 2, *placeholders(text)), (3, 1, *near)]
        sink(spark.createDataFrame(first, ddl), 0)
        assert read(path) == {1: real[1], 3: near}, sort_input
        sink.close()
