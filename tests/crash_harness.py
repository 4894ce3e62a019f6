"""The crash harness of the streaming query: a child process (tests/crash_child.py) runs the query on the table, the
parent watches the table and the checkpoint from outside (no hooks in the library), SIGKILLs the child's whole session
when a chosen moment shows on disk, and starts it again from the same checkpoint location. Then the checks: which phase
a kill really hit, the completed delta commits hold Spark's batches once each and in order, both readers (hudi-rs and
HoodieTable) see exactly those batches, no data file is uncommitted, and the index state maps every live record.

Kill targets of `Harness.run_and_kill` (`Kill.target`):
- "write":    a marker of the pending delta commit exists (its log files are being written);
- "index":    an index state file of the pending delta commit exists (the bucket assigners are saving state);
- "inflight": a `delay` after a delta commit turned inflight;
- "commit":   the completed delta commit appeared (busy-polled, so the kill lands before the index LATEST pointer
              and Spark's commit log are written);
- "rollback": a rollback instant is pending;
- "rebuild":  the index is being rebuilt;
- "random":   a `delay` after the run's first delta commit appeared.
The table may be on local disk or on the S3 test server (a `locations.Location`): the parent watches it through the
project's storage layer (listings and existence checks, polled every few milliseconds locally and every 20 ms on the
S3 server), the child gets the storage options in its environment (HOODIE_TEST_STORAGE_OPTIONS, JSON), and hudi-rs
reads the table from the same location.
Used by tests/test_stream_crash.py; tests/test_compaction_crash.py uses the timeline watch and kill_session.

The child's side is here too: `run_child_query` is the streaming query every crash child runs (tests/crash_child.py,
tests/cdc_crash_child.py, tests/spark_read_crash_child.py), each child giving only its source and its sink, and
`start_child` starts one in a session of its own, its output in a log file.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from hoodie_stream.checkpoints import index_state
from hoodie_stream.checkpoints.batch_checkpoint import CHECKPOINT_KEY
from hoodie_stream.format.file_group.file_names import parse_base_file_name, parse_log_file_name
from hoodie_stream.format.log_file.reader import read_log_file
from hoodie_stream.storage import storage_for
from locations import Location
from stream_model import OPTIONS, TableModel, table_rows

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = "crash_child.py"
POLL = 0.002  # seconds between looks at a local table
POLL_REMOTE = 0.02  # ... at a table on the S3 test server (each look is a request or two)
STORAGE_OPTIONS_ENV = "HOODIE_TEST_STORAGE_OPTIONS"
RUN_TIMEOUT = 300  # seconds a child may run before it is killed anyway (never expected; room for a slow machine)

IDENTIFIER = OPTIONS.get("hoodie.datasource.write.streaming.checkpoint.identifier", "default_single_writer")
# a timeline file of either layout: `T.<action>[.<state>]` in .hoodie/ (table version 6), or in .hoodie/timeline/ with
# a completed instant named `T_C.<action>` (versions 8, 9)
_TIMELINE_FILE = re.compile(
    r"^(\d{17})(?:_\d{17})?\.(deltacommit|commit|replacecommit|rollback|compaction|clean)"
    r"(\.requested|\.inflight)?$"
)
TIMELINE_DIRS = (".hoodie", ".hoodie/timeline")
INFLIGHT_PHASES = ("inflight_before_write", "index_save", "mid_write")


# -- the child's side ------------------------------------------------------------------------------------------
def child_main(main, usage):
    """The entry of a crash child: `main(*arguments)`, the command line holding the arguments `usage` names."""
    if len(sys.argv) != len(usage.split()) + 1:
        sys.exit(f"usage: {os.path.basename(sys.argv[0])} {usage}")
    main(*sys.argv[1:])


def child_storage_options():
    """The table's storage options the parent passed (`start_child`), None on local disk."""
    return json.loads(os.environ.get(STORAGE_OPTIONS_ENV) or "{}") or None


def json_files(schema_ddl, path):
    """A child's source: the JSON batch files in `path`, one file per micro-batch."""
    return lambda spark: spark.readStream.schema(schema_ddl).option("maxFilesPerTrigger", 1).json(path)


def run_child_query(app, source, sink, checkpoint):
    """The crash child's streaming query: `source(spark)`'s micro-batches into `sink(spark)` (a foreachBatch
    function, closed at the end), from checkpoint location `checkpoint`, until every available input is processed.
    Prints when the query started and when it is done. Nothing here knows about the crashes: no hooks, no pauses;
    the parent watches the table from outside and SIGKILLs the child's session."""
    from conftest import spark_builder

    # A child starts many times: a JVM tuned for start-up (C1 only, serial GC) and no adaptive re-planning keep
    # each start short; neither changes what is written.
    spark = (
        spark_builder(app=app)
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    stream = source(spark)
    foreach = sink(spark)  # built once the session runs (a sink on S3 reads its fs.s3a settings)
    query = stream.writeStream.foreachBatch(foreach).option("checkpointLocation", checkpoint).start()
    started = time.monotonic()
    print(f"query {query.id} run {query.runId} started", flush=True)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
        foreach.close()
    last = query.lastProgress
    print(
        f"query {query.id} done in {time.monotonic() - started:.0f} s, last batch {last and last['batchId']}",
        flush=True,
    )
    spark.stop()


def start_child(script, args, log_path, tmp=None, storage_options=None):
    """Start crash child `script` (a file of tests/) with `args`, in a session of its own (PySpark's workers are
    killed with it: kill_session), its output into `log_path`; `tmp`: its temporary and Spark's local directories
    (a killed JVM leaves them behind); `storage_options`: the table's, passed in the environment."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if tmp is not None:
        env.update(TMPDIR=str(tmp), SPARK_LOCAL_DIRS=str(tmp))
    if storage_options is not None:
        env[STORAGE_OPTIONS_ENV] = json.dumps(storage_options)
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, os.path.join(HERE, script), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


# -- watching the table from outside ---------------------------------------------------------------------------
# `base`: a table's local path or its Storage
def timeline_state(base):
    """{(ts, action): 0 requested / 1 inflight / 2 completed} from the names in the timeline of either layout (cheap
    enough to poll)."""
    storage = storage_for(base)
    names = [info.name for d in TIMELINE_DIRS for info in storage.list(d)]
    rank = {".requested": 0, ".inflight": 1, "": 2}
    out = {}
    for name in names:
        m = _TIMELINE_FILE.match(name)
        if m:
            key, state = (m.group(1), m.group(2)), rank[m.group(3) or ""]
            out[key] = max(out.get(key, -1), state)
    return out


def pending(state, action):
    return sorted(ts for (ts, a), s in state.items() if a == action and s < 2)


def completed(state, action):
    return sorted(ts for (ts, a), s in state.items() if a == action and s == 2)


def markers_of(base, ts):
    return [info.path for info in storage_for(base).list(f".hoodie/.temp/{ts}", recursive=True)]


def index_files_of(base, ts, suffix=""):
    """Index state files (finished or .tmp) named after instant `ts`, as `<key group>/<name>`."""
    prefix = index_state.INDEX_DIR + "/"
    return [
        info.path[len(prefix) :]
        for info in storage_for(base).list(index_state.INDEX_DIR, recursive=True)
        if info.name.startswith(ts + suffix) and info.path.count("/") == prefix.count("/") + 1
    ]


def spark_batches(chk, kind):
    try:
        return sorted(int(n) for n in os.listdir(os.path.join(chk, kind)) if n.isdigit())
    except FileNotFoundError:
        return []


def query_id(chk):
    with open(os.path.join(chk, "metadata"), encoding="utf-8") as f:
        return json.load(f)["id"]


def _log_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line for line in f.read().splitlines()[1:] if line.strip()]  # line 1 is the log version


def spark_batch_files(chk):
    """{batch id: [input file index]} as Spark formed the batches, from its offsets log and the file source's log.

    Usually one file per batch (maxFilesPerTrigger=1), but a kill after the file source logged its next file and
    before the offsets log named it makes the restarted query read that file and the next one in one batch."""
    source_log = os.path.join(chk, "sources", "0")
    entries = {}  # source log offset -> input files
    for name in os.listdir(source_log) if os.path.isdir(source_log) else []:
        if name.startswith(".") or not name.split(".")[0].isdigit():
            continue
        for line in _log_lines(os.path.join(source_log, name)):
            entry = json.loads(line)
            index = int(re.match(r"batch-(\d+)\.json$", os.path.basename(entry["path"])).group(1))
            entries.setdefault(entry["batchId"], set()).add(index)
    out, prev = {}, -1
    for b in spark_batches(chk, "offsets"):
        end = json.loads(_log_lines(os.path.join(chk, "offsets", str(b)))[-1])["logOffset"]
        out[b] = sorted(i for offset in range(prev + 1, end + 1) for i in entries.get(offset, ()))
        prev = end
    return out


# -- the child's processes -------------------------------------------------------------------------------------
def session_members(sid):
    """(pid, process group) of every live process of session `sid`. PySpark's daemon moves itself and its Python
    workers into a process group of their own, so killing the child's process group alone would leave the workers
    writing; the child is started in a new session and every process group of that session is killed."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] not in "ZX":
            out.append((int(name), int(fields[2])))
    return out


def kill_when(proc, log_path, ready, what, timeout=300):
    """Poll `ready()` until it holds, then SIGKILL the child's whole session; fail with the child's log when it ends
    first, naming `what` when `ready` never held within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, Path(log_path).read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"the child never reached {what}"
        time.sleep(0.002)
    kill_session(proc, {group for _pid, group in session_members(proc.pid)})


def kill_session(proc, groups):
    """SIGKILL the child's process group and the known others at once, then any straggler; wait until no process
    of the session is alive, so the table is frozen when this returns."""
    for pgid in [proc.pid] + sorted(groups - {proc.pid}):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    deadline = time.monotonic() + 30
    while True:
        members = session_members(proc.pid)
        if not members:
            return
        assert time.monotonic() < deadline, f"processes of the killed child survive: {members}"
        for pgid in {g for _pid, g in members}:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)


@dataclass
class Kill:
    run: int
    target: str
    skip: int
    delay: float
    phase: str = ""
    detail: dict = field(default_factory=dict)


class Harness:
    def __init__(self, tmp_path, location=None):
        self.source = str(tmp_path / "in")
        self.loc = location or Location(str(tmp_path / "table"))
        self.base = self.loc.storage  # watched through the storage layer
        self.poll = POLL if self.loc.kind == "local" else POLL_REMOTE
        self.chk = str(tmp_path / "chk")
        self.logs = tmp_path / "logs"
        self.logs.mkdir()
        self.tmp = tmp_path / "child-tmp"  # Spark's local dirs: a killed JVM leaves them behind
        self.tmp.mkdir()
        self.runs = 0

    def start(self):
        self.runs += 1
        return start_child(
            CHILD,
            [self.source, self.loc.uri, self.chk],
            self.logs / f"run-{self.runs:02d}.log",
            tmp=self.tmp,
            storage_options=self.loc.options,
        )

    def log_tail(self, n=60):
        text = (self.logs / f"run-{self.runs:02d}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-n:])

    def run_to_end(self, timeout):
        """Start the child and let it finish every batch; fails with the log's tail if it fails or runs over."""
        proc = self.start()
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_session(proc, set())
            raise AssertionError(f"final run did not finish:\n{self.log_tail()}") from None
        assert rc == 0, f"final run failed (exit {rc}):\n{self.log_tail()}"

    def run_and_kill(self, kill):
        """Start the child and kill it when `kill.target` is reached. False when the child finished first."""
        before = timeline_state(self.base)
        latest_before = (completed(before, "deltacommit") or [None])[-1]
        storage = self.base
        proc = self.start()
        seen = []  # delta commits this run started, in order
        groups, next_scan = set(), 0.0
        armed = None
        started = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if now >= next_scan:  # learn the process groups (the PySpark daemon makes its own)
                    groups = {g for _pid, g in session_members(proc.pid)} or groups
                    next_scan = now + 0.05
                rc = proc.poll()
                if rc is not None:
                    assert rc == 0, f"child failed (exit {rc}) before {kill}:\n{self.log_tail()}"
                    return False
                state = timeline_state(self.base)
                for ts in sorted(t for (t, a) in state if a == "deltacommit" and (t, a) not in before):
                    if ts not in seen:
                        seen.append(ts)
                targets = seen[kill.skip :]
                writing = [ts for ts in targets if ts in pending(state, "deltacommit")]
                fire = False
                if kill.target == "write":
                    fire = any(markers_of(self.base, ts) for ts in writing)
                elif kill.target == "index":
                    fire = any(index_files_of(self.base, ts) for ts in writing)
                elif kill.target == "commit":
                    fire = any(ts in completed(state, "deltacommit") for ts in targets)
                    ready = [ts for ts in writing if markers_of(self.base, ts)]
                    if ready and not fire:  # the writes are under way: spin until the commit file appears
                        spins, check_every = 0, 20000 if self.loc.kind == "local" else 20
                        if storage.list(".hoodie/timeline"):  # layout 2: `T_C.deltacommit`, C unknown: listed
                            check_every = 20

                            def appeared(ts=ready[0]):
                                return ts in completed(timeline_state(storage), "deltacommit")
                        else:

                            def appeared(done=f".hoodie/{ready[0]}.deltacommit"):
                                return storage.exists(done)

                        while not appeared() and time.monotonic() - started < RUN_TIMEOUT:
                            spins += 1
                            if spins % check_every == 0 and proc.poll() is not None:
                                break
                        fire = appeared()
                elif kill.target == "rollback":
                    # a rollback can be quicker than the poll: then the delta commit after it is the fallback
                    fire = any((ts, "rollback") not in before for ts in pending(state, "rollback")) or bool(seen)
                elif kill.target == "rebuild":
                    fire = bool(seen) or (
                        latest_before is not None and bool(index_files_of(self.base, latest_before, ".full.arrow"))
                    )
                else:  # inflight, random: a random time after the delta commit appeared
                    if targets and armed is None:
                        armed = now
                    fire = armed is not None and now - armed >= kill.delay
                if fire or now - started > RUN_TIMEOUT:
                    kill_session(proc, groups)
                    kill.detail["timeout"] = not fire
                    kill.detail["seconds"] = round(time.monotonic() - started, 2)
                    return True
                time.sleep(self.poll)
        except BaseException:
            if proc.poll() is None:
                kill_session(proc, groups)
            raise


def classify(loc, chk, kill):
    """Which phase the kill really hit, from the table (a Location) and checkpoint it left behind."""
    base = loc.storage
    state = timeline_state(base)
    d = kill.detail
    d["spark_offsets"] = (spark_batches(chk, "offsets") or [None])[-1]
    d["spark_commits"] = (spark_batches(chk, "commits") or [None])[-1]
    rollbacks = pending(state, "rollback")
    writes = pending(state, "deltacommit")
    if writes:
        ts = writes[-1]
        d["instant"] = ts
        d["markers"] = len(markers_of(base, ts))
        idx = index_files_of(base, ts)
        d["index_files"] = len(idx)
        d["index_tmp"] = sum(n.endswith(".tmp") for n in idx)
    if rollbacks:
        return "mid_rollback"
    if writes:
        if d["markers"]:
            return "mid_write"
        if d["index_files"]:
            return "index_save"
        return "inflight_before_write"
    done = completed(state, "deltacommit")
    if not done:
        return "before_first_instant"
    table = loc.table()
    latest = table.timeline.completed(["deltacommit"])[-1].timestamp
    extra = table.timeline.read_commit_metadata(latest).extra_metadata
    hudi_batch = int(next(iter(json.loads(extra[CHECKPOINT_KEY]).values())))
    d["index_latest_stale"] = index_state.read_latest(base) != latest
    if d["spark_commits"] is None or hudi_batch > d["spark_commits"]:
        return "after_hudi_commit"
    if d["index_latest_stale"] and index_files_of(base, latest, ".full.arrow"):
        d["index_full_files"] = len(index_files_of(base, latest, ".full.arrow"))
        return "mid_rebuild"
    return "between_batches"


# -- checks ------------------------------------------------------------------------------------------------------
def committed_batches(loc, chk):
    """Batch ids of the completed delta commits, in timeline order (all of this query's)."""
    if not loc.exists(".hoodie/hoodie.properties"):
        return []
    table = loc.table()
    identifier = f"{IDENTIFIER}-{query_id(chk)}"
    ids = []
    for inst in table.timeline.completed(["deltacommit"]):
        entries = json.loads(table.timeline.read_commit_metadata(inst.timestamp).extra_metadata[CHECKPOINT_KEY])
        assert list(entries) == [identifier], entries
        ids.append(int(entries[identifier]))
    return ids


def model_after(batches, files, k):
    """The model after Spark batches 0..k-1 (`files`: their input files), each applied once, in order."""
    model = TableModel()
    for b in range(k):
        model.apply_batch([e for i in files[b] for e in batches[i]])
    return model


def check_readers(loc, chk, batches, context):
    """The completed delta commits hold Spark batches 0..k-1 once each, those batches hold input files 0..m-1 once
    each, and both readers see exactly the model after those batches. Returns k."""
    ids = committed_batches(loc, chk)
    assert ids == list(range(len(ids))), f"{context}: batch ids of the completed delta commits: {ids}"
    files = spark_batch_files(chk)
    read = [i for b in ids for i in files[b]]
    assert read == list(range(len(read))) and all(files[b] for b in ids), f"{context}: Spark's batches {files}"
    if ids:
        want, upto = model_after(batches, files, len(ids)).rows(), f"after batches 0..{len(ids) - 1}"
        assert_rows(table_rows(loc.rs_read()), want, f"{context}: hudi-rs {upto}")
        assert_rows(table_rows(loc.table().read()), want, f"{context}: HoodieTable {upto}")
    return len(ids)


def assert_rows(got, want, context):
    if got == want:
        return
    by_id = {}
    for r in got:
        by_id.setdefault(r["id"], []).append(r)
    want_by_id = {r["id"]: r for r in want}
    diff = [
        (k, by_id.get(k), want_by_id.get(k))
        for k in sorted(set(by_id) | set(want_by_id))
        if by_id.get(k) != ([want_by_id[k]] if k in want_by_id else None)
    ]
    raise AssertionError(
        f"{context}: {len(got)} rows, model {len(want)}; differing ids (table, model): "
        + "; ".join(f"{k}: {g} vs {w}" for k, g, w in diff[:10])
    )


def check_files(loc):
    """Every data file in the table was written by a completed delta commit that lists it; returns the leftover
    temp files (names starting with '_' or '.', which readers skip)."""
    table = loc.table()
    done = {i.timestamp for i in table.timeline.commits_timeline()}
    listed = {stat.path for ts in done for stat in table.timeline.read_commit_metadata(ts).all_write_stats()}
    leftovers = []
    for info in loc.storage.list("", recursive=True):
        rel, name = info.path, info.name
        if rel.startswith(".hoodie/"):
            continue
        if parse_log_file_name(name) is not None:
            instants = {b.instant_time for b in read_log_file(loc.storage, rel)}
            assert instants <= done, f"{rel}: blocks of instants {sorted(instants - done)} that never completed"
            assert rel in listed, f"{rel}: no completed commit lists this log file"
        elif parse_base_file_name(name) is not None:
            assert parse_base_file_name(name).instant in done and rel in listed, f"{rel}: uncommitted base file"
        elif name != ".hoodie_partition_metadata":
            leftovers.append(rel)
    return leftovers


def check_index(loc):
    """The index state is current and maps every live record to the file group holding it."""
    table = loc.table()
    committed = {i.timestamp for i in table.timeline.commits_timeline()}
    storage = loc.storage
    assert index_state.read_latest(storage) == table.timeline.completed(["deltacommit"])[-1].timestamp
    index_state._CACHE.clear()
    mapping = {}
    for group in storage.list_dirs(index_state.INDEX_DIR):
        if group.isdigit():
            state = index_state.load_index(storage, int(group), committed)[0].to_table()
            for key, part, fid in zip(*(state[c].to_pylist() for c in ("key", "partition", "file_id"))):
                assert key not in mapping, f"key {key} in two key groups"
                mapping[key] = (part, fid)
    index_state._CACHE.clear()
    rows = table.read().select(["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name"]).to_pylist()
    for r in rows:
        # a record of a log file names its file id; one of a base file (bulk insert, compaction) the file's
        # name, which begins with the file id and an underscore
        name = r["_hoodie_file_name"]
        file_id = name.split("_")[0] if name.endswith(".parquet") else name
        assert mapping.get(r["_hoodie_record_key"]) == (r["_hoodie_partition_path"], file_id), r
