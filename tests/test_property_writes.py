"""Property: random commits written with the low-level writer read back, through hudi-rs and HoodieTable.read,
exactly as a plain-Python model of the table says (snapshot, read_optimized, incremental)."""

import datetime
import decimal
import shutil
import tempfile

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hoodie_stream.format.hoodie_table import HoodieTable
from hoodie_stream.format.write.writer import HoodieWriter
from oracle import assert_same_rows, rs_read

KEYS = ["k,1", "a:b", "x/y", "sp ace", "ünï", "日本", "plain", "k:1,2", "", "z"]
PARTITIONS = ["north", "south", "ost-ü"]
SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("region", pa.string()),
        ("ts", pa.int64()),
        ("amount", pa.decimal128(10, 2)),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("info", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ("tags", pa.list_(pa.string())),
        ("attrs", pa.map_(pa.string(), pa.int64())),
        ("note", pa.string()),
    ]
)
DATA_COLUMNS = [f.name for f in SCHEMA]


def _row(key, part, ts, salt):
    return {
        "id": key,
        "region": part,
        "ts": ts,
        "amount": None if salt % 5 == 0 else decimal.Decimal(salt * 7 - 300) / 100,
        "day": datetime.date(2024, 1, 1) + datetime.timedelta(days=salt),
        "at": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
        + datetime.timedelta(microseconds=salt * 1234567),
        "info": None if salt % 4 == 0 else {"a": salt, "b": None if salt % 3 == 0 else f"b{salt}"},
        "tags": None if salt % 6 == 0 else [f"t{i}" for i in range(salt % 3)],
        "attrs": None if salt % 7 == 0 else [(f"m{i}", i * salt) for i in range(salt % 2 + 1)],
        "note": None if salt % 2 else "n\u00e9",
    }


event = st.one_of(
    st.tuples(
        st.just("upsert"), st.sampled_from(KEYS[:-2] + ["z"]), st.integers(0, 2), st.integers(0, 4), st.integers(0, 50)
    ),
    st.tuples(st.just("delete"), st.sampled_from(KEYS[:-2] + ["z"]), st.just(0), st.integers(0, 4), st.just(0)),
)
commit = st.tuples(st.lists(event, min_size=1, max_size=8), st.booleans())
history = st.lists(commit, min_size=1, max_size=5)


def precombine(events, event_time):
    """One event per key inside a commit: greatest ordering value (ties: later) or simply the last."""
    chosen = {}
    for ev in events:
        key = ev[1]
        if key not in chosen or not event_time or ev[3] >= chosen[key][3]:
            chosen[key] = ev
    return list(chosen.values())


class Model:
    """Per key: the visible row, its ordering value, and the instant that wrote it (None when deleted)."""

    def __init__(self, event_time):
        self.event_time = event_time
        self.state = {}  # key -> (row|None, ord|None, instant)
        self.log = []  # every written event: (instant, event, moved)

    def apply(self, ev, instant, moved):
        """Apply one (pre-combined, written) event; a partition move wins by arrival."""
        self.log.append((instant, ev, moved))
        self._apply(self.state, ev, instant, moved)

    def _apply(self, state, ev, instant, moved):
        kind, key, part, ts, salt = ev
        current = state.get(key)
        if kind == "delete":
            if current is not None and self.event_time and ts < current[1]:
                return
            state[key] = (None, ts, instant)
            return
        if moved or current is None or not self.event_time or ts >= current[1]:
            state[key] = (_row(key, PARTITIONS[part], ts, salt), ts, instant)

    def window_state(self, start, end):
        """What the writes of instants in (start, end] alone merge to: an incremental read's result."""
        state = {}
        for instant, ev, moved in self.log:
            if start < instant <= end:
                self._apply(state, ev, instant, moved)
        return state

    def rows(self, state=None):
        out = []
        for key, (row, _ts, instant) in (self.state if state is None else state).items():
            if row is None:
                continue
            out.append(
                dict(
                    row,
                    _hoodie_record_key=key,
                    _hoodie_partition_path=f"region={row['region']}",
                    _hoodie_commit_time=instant,
                )
            )
        return out


class Harness:
    """Routes events to file groups like a writer with a global index would."""

    def __init__(self, base, event_time):
        self.writer = HoodieWriter.create(
            base,
            table_name="prop",
            record_key_fields=["id"],
            schema=SCHEMA,
            precombine_field="ts" if event_time else None,
            partition_fields=["region"],
            hive_style=True,
        )
        self.index = {}  # key -> (partition path, file id, base instant, base file name)
        self.groups = {}  # partition path -> [(file id, base instant, base file name)]

    def write(self, events, use_base_files, model):
        txn = self.writer.start()
        per_group = {}
        inserts = {}
        for ev in events:
            kind, key, part, ts, salt = ev
            partition = f"region={PARTITIONS[part]}"
            loc = self.index.get(key)
            moved = False
            if kind == "delete":
                if loc is None:
                    continue
                per_group.setdefault(loc, ([], [], []))[1].append((key, ts if model.event_time else None))
                model.apply(ev, txn.instant, False)
                continue
            row = _row(key, PARTITIONS[part], ts, salt)
            if loc is not None and loc[0] != partition:
                per_group.setdefault(loc, ([], [], []))[1].append((key, None))  # natural delete: moves by arrival
                moved = True
                loc = None
            if loc is None:
                inserts.setdefault(partition, []).append(row)
            else:
                per_group.setdefault(loc, ([], [], []))[0].append(row)
            model.apply(ev, txn.instant, moved)
        for partition, new_rows in inserts.items():
            table = pa.Table.from_pylist(new_rows, schema=SCHEMA)
            existing = self.groups.get(partition)
            if use_base_files:
                stat = txn.write_base(partition, table)
                loc = (partition, stat.file_id, txn.instant, stat.path.rsplit("/", 1)[-1])
                self.groups.setdefault(partition, []).append(loc)
            elif existing and len(new_rows) % 2:
                loc = existing[0]
                per_group.setdefault(loc, ([], [], []))[2].extend(new_rows)
            else:
                stat = txn.insert_log_only(partition, table)
                loc = (partition, stat.file_id, txn.instant, "")
                self.groups.setdefault(partition, []).append(loc)
            for r in new_rows:
                self.index[r["id"]] = loc
        for loc, (updates, deletes, packed) in per_group.items():
            partition, file_id, base_instant, base_file = loc
            rows = updates + packed
            records = pa.Table.from_pylist(rows, schema=SCHEMA) if rows else None
            dels = ([k for k, _ in deletes], [o for _, o in deletes]) if deletes else None
            txn.append_log(
                partition, file_id, base_instant, records, deletes=dels, num_inserts=len(packed), base_file=base_file
            )
            for r in packed:
                self.index[r["id"]] = loc
        return txn.commit()


def _check(base, model, instants):
    ours = HoodieTable(base)
    columns = DATA_COLUMNS + ["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_commit_time"]
    expected = pa.Table.from_pylist(
        model.rows(),
        schema=pa.schema(
            list(SCHEMA)
            + [
                ("_hoodie_record_key", pa.string()),
                ("_hoodie_partition_path", pa.string()),
                ("_hoodie_commit_time", pa.string()),
            ]
        ),
    )
    snapshot = ours.read()
    assert_same_rows(snapshot, expected, columns, "ours vs model")
    theirs = rs_read(base)
    assert_same_rows(snapshot, theirs, None, "ours vs hudi-rs")
    assert_same_rows(ours.read("read_optimized"), rs_read(base, "read_optimized"), None, "read_optimized")
    if len(instants) > 1:
        start, end = instants[-2], instants[-1]
        inc = ours.read("incremental", start=start, end=end)
        expected_inc = model.rows(model.window_state(start, end))
        assert_same_rows(
            inc, pa.Table.from_pylist(expected_inc, schema=expected.schema), columns, "incremental vs model"
        )
        assert_same_rows(inc, rs_read(base, "incremental", start=start, end=end), None, "incremental vs hudi-rs")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=history, event_time=st.booleans())
def test_random_commits_read_as_the_model_says(history, event_time):
    base = tempfile.mkdtemp(prefix="prop-")
    try:
        harness = Harness(base, event_time)
        model = Model(event_time)
        instants = []
        for events, use_base in history:
            instants.append(harness.write(precombine(events, event_time), use_base, model))
            _check(base, model, instants)
    finally:
        shutil.rmtree(base, ignore_errors=True)
