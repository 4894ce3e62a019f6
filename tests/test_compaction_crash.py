"""Crash safety of the table services for real: compaction (plan -> execute -> commit) and cleaning SIGKILLed at
chosen steps, on local disk and on the S3 test server, and a compaction cancelled when its query ends.

SIGKILL: the offline table services run in a child process (`python -m hoodie_stream clean`, or `compact --schedule
--run --clean`) whose whole session is killed when the table shows a kill target. The parent watches the table from
outside (on local disk it scans the directories without pause while a compaction or a clean runs; on the S3 server
it lists them through the storage layer every 20 ms); when a target shows, it freezes the child's session
(SIGSTOP), looks again at the frozen table, and kills the session, or lets it go on when the moment passed. The
targets:
- "clean":      a clean is requested or inflight (the cleaner deletes superseded slices);
- "plan":       the plan is written (`.compaction.requested`) and execution has not started;
- "execute":    the compaction is inflight and a marker exists (base files are being written);
- "late":       the compaction is inflight and every operation's base file is finished (the commit is next);
and on local disk, where every file is written as a temporary file and then linked or renamed to its name, the
moments that temporary file is in flight:
- "clean_tmp":  the next timeline file of a pending clean (inflight or completed) being written;
- "marker_tmp": a marker's temporary file in `.hoodie/.temp/<instant>/` (such a file, left by a cancelled task,
                made every later run of its plan fail with 'not a marker name' while listings showed it);
- "base_tmp":   a base file of the compaction being written;
- "commit_tmp": the compaction's completed timeline file (`<instant>.commit`) being written.
Two compaction tasks run at once, so that one kill can land while a marker's temporary file and a base file's are
both in flight (PAIRED: the parent waits for such a moment while one may still come).
A table (delta commits, a compaction, more delta commits: a clean has slices to delete and a plan logs to compact;
written once on local disk and copied to each location) goes through the location's targets (TARGETS): each run of a child restarts from what the previous kill left
and watches every target not hit yet, in order; a target a run missed is hit by a later run (when a compaction run
completed, a batch of new data gives the next one a plan). After each kill the table is classified (which step the
kill really hit, as the target expects), a *_tmp target's temporary file is there (listed only with `temp=True`),
no listing shows a temporary name, `validate` finds the table valid (a pending plan can run), and this project's
reader and hudi-rs equal the model. Then the offline services run once more (in this process, on the tests'
Spark): nothing stays pending, the last compaction wrote one base file per operation, every data file is named by
a completed commit, no temporary file is left anywhere and nothing in `.hoodie/.temp/`, `python -m hoodie_stream
validate` finds the table valid, and both readers (hudi-rs read_optimized too) equal the model.

Cancellation: a streaming query is stopped while its async compaction writes a base file; with
compaction.timeout.seconds=1 the query's end cancels the compaction instead of waiting for it. Its plan is requested
again and nothing of it is left (no base file, temporary file or marker of the instant, whatever the cancelled
task was writing when Spark stopped it), both readers equal the model and `validate` finds the table valid; the
next query's writer completes the plan, and both readers equal the model. A clean cannot be cancelled: the
service thread runs it on the driver, and stopping the services waits for it.
"""

import contextlib
import copy
import io
import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from crash_harness import check_files, kill_session, session_members
from hoodie_stream.__main__ import main as cli_main
from hoodie_stream.compaction.offline import compact_table
from hoodie_stream.compaction.plan import pending_plans
from hoodie_stream.format.avro.models import read_container
from hoodie_stream.format.file_group.file_names import parse_base_file_name
from hoodie_stream.format.timeline.active_timeline import Timeline
from hoodie_stream.storage import LocalStorage
from hoodie_stream.storage.local import is_temp_name
from locations import Location
from stream_model import OPTIONS, SCHEMA_DDL, TableModel, events_df, generate_batches, table_rows, write_batch_file
from test_compaction import _setup, compaction_commits

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
POLL = {"local": 0.002, "s3": 0.02}  # seconds between looks (none on local disk while a service runs)
TIMEOUT = 400
# 4 delta commits, a compaction, a delta commit: 8 small file groups, a plan of most of them, a clean of dozens of
# files
SETUP = dict(n=4, seed=41)
AFTER_COMPACTION = 1
EXTRA_BATCHES = 3  # new data for a run after one that completed every plan with targets left
# two compaction tasks at once: one writes a base file while the other creates its next marker
SERVICE_OPTIONS = {"clean.retain_commits": "1", "compaction.tasks": "2"}

# kill target -> the step classify() must find after the kill
PHASE = {
    "plan": "plan_written",
    "execute": "mid_execute",
    "marker_tmp": "mid_execute",
    "base_tmp": "mid_execute",
    "late": "before_commit",
    "commit_tmp": "before_commit",
    "clean": "mid_clean",
    "clean_tmp": "mid_clean",
}
# the kill targets one table goes through, in order. (The archiver, which runs after each clean, is killed at random
# moments of its own child process in test_archiver.py::test_sigkill_during_archiving_loses_nothing.)
TARGETS = {
    "local": ["clean_tmp", "plan", "marker_tmp", "base_tmp", "commit_tmp"],
    "s3": ["clean", "plan", "execute", "late"],
}
TEMP_TARGETS = {"marker_tmp", "base_tmp", "commit_tmp", "clean_tmp"}
# while both are wanted, a kill waits for a moment that shows both (one kill for two), unless it is the last chance
PAIRED = ("marker_tmp", "base_tmp")
# the child a run starts: the cleaner alone (no Spark) for a clean target, else the compaction then the cleaner (so
# for a clean target too once a cleaner alone missed it: what is left to clean comes with the next compaction)
CLEAN = ["clean"]
COMPACT = ["compact", "--schedule", "--run", "--clean"]
CLEAN_TARGETS = {"clean", "clean_tmp"}
MAX_RUNS = 10


# -- looking at the table from outside -------------------------------------------------------------------------
class Look:
    """One look at a table from outside, temporary files included: the names in `.hoodie`, and on demand the
    compaction's marker directory and the data files. On local disk the directories are scanned for names only (a
    marker's temporary file is there for a millisecond or a few: a look must be quicker); on an object store
    through the storage layer."""

    def __init__(self, storage, plans):
        self.storage = storage
        self.plans = plans  # {instant: number of operations}, read once per plan
        self.dir = timeline_dir(storage)
        self.names = set(self._names(self.dir))
        self.state = {}  # (ts, action) -> 0 requested / 1 inflight / 2 completed
        rank = {"requested": 0, "inflight": 1}
        for name in self.names:
            if is_temp_name(name):
                continue
            parts = name.split(".")
            parts[0] = parts[0].split("_")[0]  # layout 2: `T_C.<action>` once completed
            if len(parts) in (2, 3) and parts[0].isdigit() and len(parts[0]) == 17:
                key = (parts[0], parts[1])
                self.state[key] = max(self.state.get(key, -1), rank.get(parts[2], 2) if len(parts) == 3 else 2)
        compactions = sorted(ts for (ts, action) in self.state if action == "compaction")
        self.instant = compactions[-1] if compactions else None
        # the newest compaction: 0 requested / 1 inflight / 2 completed (as `<instant>.commit`), None: there is none
        self.step = None
        if self.instant is not None:
            self.step = 2 if self.state.get((self.instant, "commit")) == 2 else self.state[(self.instant, "compaction")]
        self.cleans = sorted(ts for (ts, action), s in self.state.items() if action == "clean" and s < 2)
        self._markers = self._data = None

    def _names(self, path, recursive=False, skip=None):
        """Names of the files in directory `path` (and below it), but those under `skip`."""
        if isinstance(self.storage, LocalStorage):
            out, top = [], os.path.join(self.storage.root, path) if path else self.storage.root
            for directory, dirs, names in os.walk(top):
                out += names
                dirs[:] = [d for d in dirs if recursive and not (d == skip and directory == top)]
            return out
        infos = self.storage.list(path, recursive, temp=True)
        return [i.name for i in infos if not (skip and i.path.startswith(skip + "/"))]

    def ops(self):
        if self.instant not in self.plans:
            self.plans[self.instant] = _plan_ops(self.storage, self.instant)
        return self.plans[self.instant]

    def markers(self):
        if self._markers is None:
            self._markers = self._names(f".hoodie/.temp/{self.instant}", True)
        return self._markers

    def data_names(self):
        """Names of the files outside `.hoodie`."""
        if self._data is None:
            self._data = self._names("", True, skip=".hoodie")
        return self._data

    def base_files(self):
        """Finished base files of the newest compaction."""
        return [
            n for n in self.data_names() if (p := parse_base_file_name(n)) is not None and p.instant == self.instant
        ]

    def reached(self, target):
        inflight = self.step == 1
        if target == "plan":
            return self.step == 0
        if target == "execute":
            return inflight and any(not is_temp_name(n) for n in self.markers())
        if target == "marker_tmp":
            return inflight and any(is_temp_name(n) for n in self.markers())
        if target == "base_tmp":
            return inflight and any(is_temp_name(n) and f"_{self.instant}.parquet." in n for n in self.data_names())
        if target == "late":
            return inflight and len(self.base_files()) >= self.ops()
        if target == "commit_tmp":
            return inflight and any(_temp_of(n, self.instant, ".commit.") for n in self.names)
        if target == "clean":
            return bool(self.cleans)
        if target == "clean_tmp":
            return any(_temp_of(n, ts, ".clean") for ts in self.cleans for n in self.names)
        raise ValueError(target)

    def classify(self):
        """Which step of the table services the table shows."""
        if self.cleans:
            return "mid_clean"
        if self.step is None:
            return "before_plan"
        if self.step == 0:
            return "plan_written"
        if self.step == 1:
            return "before_commit" if len(self.base_files()) >= self.ops() else "mid_execute"
        return "after_commit"


_TIMELINE_DIRS: dict[str, str] = {}


def timeline_dir(storage):
    """`.hoodie/timeline` on timeline layout 2 (table versions 8, 9), else `.hoodie` (listed once per table: object
    stores have no directories to ask for)."""
    if storage.uri not in _TIMELINE_DIRS:
        _TIMELINE_DIRS[storage.uri] = ".hoodie/timeline" if storage.list(".hoodie/timeline") else ".hoodie"
    return _TIMELINE_DIRS[storage.uri]


def _temp_of(name, ts, action):
    """Whether `name` is the temporary file of instant `ts`'s timeline file of `action` (`.commit.`, `.clean`), named
    `T.<action>` on layout 1 and `T_C.<action>` once completed on layout 2."""
    if not is_temp_name(name) or not name.startswith(f".{ts}"):
        return False
    rest = name[len(ts) + 1 :]
    return rest.startswith(action) or (rest[:1] == "_" and rest[18:].startswith(action))


def _plan_ops(storage, instant):
    """The number of operations of compaction plan `instant`."""
    plan = storage.read(f"{timeline_dir(storage)}/{instant}.compaction.requested")
    return len(read_container(plan)["operations"])


# -- the child -------------------------------------------------------------------------------------------------
def _storage_args(loc):
    return [arg for key, value in loc.options.items() for arg in ("--storage-option", f"{key}={value}")]


def _child(loc, command, log_path):
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_SUBMIT_ARGS='--driver-java-options "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" pyspark-shell',
    )
    options = [arg for key, value in SERVICE_OPTIONS.items() for arg in ("--option", f"{key}={value}")]
    cmd = [sys.executable, "-m", "hoodie_stream", *command, "--path", loc.uri, *options, *_storage_args(loc)]
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            cmd, cwd=ROOT, env=env, start_new_session=True, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )


def _signal_groups(groups, sig):
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)


def _take(look, shown, targets):
    """Whether to kill now, hitting `shown` (the targets the table shows)."""
    if not shown:
        return False
    if all(t in targets for t in PAIRED) and set(shown) & set(PAIRED) and not set(PAIRED) <= set(shown):
        # one of the pair alone: wait for both, unless every operation has its marker (no moment shows both any
        # more); a marker is counted once while its temporary file and its name are both there
        markers = {n[1:].rsplit(".", 2)[0] if is_temp_name(n) else n for n in look.markers()}
        return len(markers) >= look.ops()
    return True


def _run(loc, command, targets, log_path):
    """Run the child `command`, killing its session when the table shows some of `targets`. Returns the targets hit
    (the table is frozen as the kill left it), [] when the child completed."""
    storage, plans = loc.storage, {}
    proc = _child(loc, command, log_path)
    groups, next_scan = {proc.pid}, 0.0
    # on local disk a temporary file is in flight for milliseconds: no pause between looks while the cleaner runs,
    # or the compaction (and the clean after it)
    busy = loc.kind == "local" and command == CLEAN
    deadline = time.monotonic() + TIMEOUT
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if now >= next_scan:  # the PySpark daemon and its workers are process groups of their own
                groups |= {g for _pid, g in session_members(proc.pid)}
                next_scan = now + (0.5 if busy else 0.05)  # a scan of /proc takes milliseconds
            look = Look(storage, plans)
            if _take(look, [t for t in targets if look.reached(t)], targets):
                _signal_groups(groups, signal.SIGSTOP)  # the table stands still while it is looked at again
                look = Look(storage, plans)
                shown = [t for t in targets if look.reached(t)]
                if _take(look, shown, targets):
                    kill_session(proc, groups)
                    return shown
                _signal_groups(groups, signal.SIGCONT)
            assert now < deadline, f"the table services child ran over {TIMEOUT}s"
            busy = busy or (loc.kind == "local" and look.step == 1)
            time.sleep(0 if busy else POLL[loc.kind])
        assert proc.returncode == 0, log_path.read_text(errors="replace")[-3000:]
        return []
    finally:
        if proc.poll() is None:
            kill_session(proc, groups)


# -- checks ----------------------------------------------------------------------------------------------------
def _both_readers(loc, model, context, view="snapshot"):
    assert table_rows(loc.table().read(view)) == model.rows(), f"HoodieTable {view} {context}"
    assert table_rows(loc.rs_read(view)) == model.rows(), f"hudi-rs {view} {context}"


def _validate(loc, in_process=True):
    """`python -m hoodie_stream validate --json` on the table: (exit code, report)."""
    args = ["validate", "--json", "--no-progress", "--path", loc.uri, *_storage_args(loc)]
    if in_process:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = cli_main(args)
        return code, json.loads(out.getvalue())
    proc = subprocess.run(
        [sys.executable, "-m", "hoodie_stream", *args], cwd=ROOT, capture_output=True, timeout=TIMEOUT, check=False
    )
    return proc.returncode, json.loads(proc.stdout or b"{}")


def _assert_valid(loc, context, in_process=True):
    code, report = _validate(loc, in_process)
    assert code == 0 and report.get("valid"), f"validate {context}: {report}"


def _temp_files(loc):
    """The storage layer's temporary files in the table."""
    return [i.path for i in loc.storage.list("", recursive=True, temp=True) if is_temp_name(i.name)]


def _assert_no_temp_names_listed(loc, context):
    """The storage layer's listing of the whole table (timeline, marker directories, partitions) shows no temporary
    name."""
    listed = [i.path for i in loc.storage.list("", recursive=True) if is_temp_name(i.name)]
    assert not listed, f"{context}: temporary files listed: {listed}"


def _add_batches(spark, loc, model, batches, first_id):
    """Delta commits of `batches` (batch ids from `first_id`), written by a sink that schedules no compaction."""
    sink = loc.sink(OPTIONS)
    for n, events in enumerate(batches):
        sink(events_df(spark, events), first_id + n)
        model.apply_batch(events)
    sink.close()


@pytest.fixture(scope="module", params=[6, 9])
def service_table(spark, tmp_path_factory, request):
    """The table the kills go through, on local disk (each test works on a copy): delta commits, a compaction,
    delta commits; at table version 6 and at 9 (Hudi 1.x's timeline layout 2 and log files named by their delta
    commit). (location, model, batches left for later)."""
    loc = Location(str(tmp_path_factory.mktemp("services") / "t"))
    n = SETUP["n"]
    model, _ = _setup(spark, loc.uri, **SETUP, options={"hoodie.write.table.version": str(request.param)})
    report = list(compact_table(loc.uri, options=SERVICE_OPTIONS, spark=spark))
    assert any(line.startswith("completed compaction") for line in report), report
    batches = generate_batches(n + 1 + AFTER_COMPACTION + EXTRA_BATCHES, seed=SETUP["seed"], monotonic=True)
    _add_batches(spark, loc, model, batches[n : n + AFTER_COMPACTION], n)
    return loc, model, batches[n + AFTER_COMPACTION :]


def test_sigkill_inside_each_table_service_then_restart(spark, tmp_path, location, service_table):
    template, model, extra = service_table
    loc = template.copy_to(location)
    model, extra = copy.deepcopy(model), list(extra)
    batch_id = SETUP["n"] + AFTER_COMPACTION
    left = list(TARGETS[loc.kind])
    runs, cleaner_alone = [], True
    while left:
        assert len(runs) < MAX_RUNS, f"targets {left} not hit in {MAX_RUNS} runs: {runs}"
        command = CLEAN if left[0] in CLEAN_TARGETS and cleaner_alone else COMPACT
        started = time.monotonic()
        hits = _run(loc, command, left, tmp_path / f"run-{len(runs) + 1:02d}.log")
        seconds = round(time.monotonic() - started, 1)
        if not hits:  # the run completed: what it left is checked; a target it missed goes last
            runs.append(("completed", seconds))
            context = f"after run {len(runs)} completed"
            _assert_no_temp_names_listed(loc, context)
            assert not _temp_files(loc), f"{context}: temporary files left"
            if command == COMPACT:  # no plan left: new data for the next run's plan
                _add_batches(spark, loc, model, [extra.pop(0)], batch_id)
                batch_id += 1
            cleaner_alone = False
            left.append(left.pop(0))
            continue
        look = Look(loc.storage, {})
        phase = look.classify()
        runs.append((hits, phase, seconds))
        context = f"after a SIGKILL at {hits} (run {len(runs)}, {phase})"
        assert [t for t in hits if look.reached(t)] == hits, f"{context}: the frozen table no longer shows them"
        assert {PHASE[t] for t in hits} == {phase}, context
        if TEMP_TARGETS.intersection(hits):
            assert _temp_files(loc), f"{context}: no temporary file in flight"
        _assert_no_temp_names_listed(loc, context)
        _assert_valid(loc, context)
        _both_readers(loc, model, context)
        left = [t for t in left if t not in hits]
    print(f"{loc.kind}: runs {runs}")

    # the next run of the services (in this process) completes what the last kill interrupted, leaving nothing
    report = list(
        compact_table(
            loc.uri, clean_after=True, options=SERVICE_OPTIONS, spark=spark, storage_options=loc.storage_options
        )
    )
    timeline = Timeline(loc.storage)
    assert not timeline.pending(), (report, [i.file_name for i in timeline.pending()])
    last = compaction_commits(loc.storage)[-1]
    stats = timeline.read_commit_metadata(last).all_write_stats()
    assert len(stats) == _plan_ops(loc.storage, last)
    listed = loc.storage.list("", recursive=True)
    files = sorted(i.path for i in listed if (p := parse_base_file_name(i.name)) and p.instant == last)
    assert files == sorted(s.path for s in stats), "one base file per operation of the last compaction"
    assert check_files(loc) == [], "files that are neither data files of completed commits nor partition metadata"
    assert not _temp_files(loc), "temporary files left after the last run"
    assert not loc.storage.list(".hoodie/.temp", recursive=True, temp=True), "marker directories left"
    _assert_no_temp_names_listed(loc, "after the last run")
    _assert_valid(loc, "after the last run", in_process=False)
    _both_readers(loc, model, "after the last run")
    _both_readers(loc, model, "after the last run", "read_optimized")


# -- cancellation ----------------------------------------------------------------------------------------------
CANCEL_OPTIONS = {
    **OPTIONS,
    "compaction.schedule.enabled": "true",
    "compaction.delta_commits": "2",  # a plan after the second delta commit (the first one bulk inserts)
    "compaction.timeout.seconds": "1",  # the query's end waits 1 s for the compaction, then cancels it
    "compaction.tasks": "1",
}
# bytes: a slice is merged in as many key ranges as it has keys, each reading the slice's files again: an operation
# runs for seconds, so Spark stops the cancelled task while it writes (spark.python.task.killTimeout, 2 s)
SLOW_MERGE = {"hoodie.memory.compaction.max.size": "64"}


def _running_tasks(spark, group):
    tracker = spark.sparkContext.statusTracker()
    running = 0
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info else ():
            stage_info = tracker.getStageInfo(stage)
            running += stage_info.numActiveTasks if stage_info else 0
    return running


def _wait_for(condition, what, timeout=300):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout}s"
        time.sleep(0.02)


def test_query_stopped_during_its_async_compaction_cancels_it_then_the_next_query_completes_the_plan(
    spark, tmp_path, caplog
):
    loc = Location(str(tmp_path / "t"))
    storage = loc.storage
    source, chk = str(tmp_path / "in"), str(tmp_path / "chk")
    batches = generate_batches(3, seed=44, keys_per_batch=3000, key_space=6000, monotonic=True)
    model = TableModel()
    for i, events in enumerate(batches[:2]):
        write_batch_file(source, i, events)
        model.apply_batch(events)
    stream = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(source)
    caplog.set_level(logging.INFO, logger="hoodie_stream")
    sink = loc.sink({**CANCEL_OPTIONS, **SLOW_MERGE})
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", chk).start()
    try:
        query.processAllAvailable()  # the second delta commit schedules a plan; the async compaction runs it
        services = sink.services
        (instant,) = pending_plans(Timeline(storage))

        def writing():  # a marker, and a base file of the compaction being written
            names = [i.name for i in storage.list("", recursive=True, temp=True)]
            return any(n.endswith(".marker.CREATE") for n in names) and any(
                is_temp_name(n) and f"_{instant}.parquet." in n for n in names
            )

        _wait_for(writing, "the compaction writes a base file")
    finally:
        query.stop()
    # the query's end closes the sink (a query listener): after compaction.timeout.seconds it cancels the compaction,
    # then gives the lease back
    _wait_for(lambda: sink._listener is None, "the sink closed after its query ended")
    assert sink._services is None
    assert not services._thread.is_alive()
    _wait_for(lambda: not _running_tasks(spark, services._group), "the cancelled compaction task ended")
    messages = [r.getMessage() for r in caplog.records]
    assert any("did not complete within compaction.timeout.seconds" in m for m in messages), messages
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], messages
    assert services.errors == []
    assert Timeline(storage).get(instant).is_requested, "cancelled: the plan is requested again"
    left = [i.path for i in storage.list("", recursive=True, temp=True) if f"_{instant}.parquet" in i.name]
    assert not left, f"files of the cancelled compaction: {left}"
    assert not storage.list(f".hoodie/.temp/{instant}", recursive=True, temp=True), "markers left"
    assert not _temp_files(loc), "temporary files left"
    _assert_valid(loc, "after the cancelled compaction")
    _both_readers(loc, model, "after the cancelled compaction")

    # the next query's writer runs the plan first
    write_batch_file(source, 2, batches[2])
    model.apply_batch(batches[2])
    sink = loc.sink({**CANCEL_OPTIONS, "compaction.schedule.enabled": "false"})
    services = sink.services
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", chk).start()
    try:
        query.processAllAvailable()
        assert services.wait_idle(120)
    finally:
        query.stop()
    _wait_for(lambda: sink._listener is None, "the sink closed after its query ended")
    assert instant in compaction_commits(storage)
    assert services.errors == []
    assert not _temp_files(loc)
    _assert_valid(loc, "after the next query")
    _both_readers(loc, model, "after the next query")
