"""Table services on the driver: schedule compaction after commits; execute + commit it inline or in a background
thread while micro-batches keep committing; clean after commits, then archive the timeline (`archiver.py`).

Asynchronous compaction shares the executors with ingestion. With `spark.scheduler.mode=FAIR` its jobs run in a
scheduler pool of their own (`chain.scheduler_pools`): `hoodie_compaction` (weight 1, against the micro-batches'
`hoodie_write`, weight 2) while it keeps pace, `hoodie_compaction_catch_up` (weight 2) when a plan waits behind one
that is CATCH_UP_INTERVALS trigger intervals old. Each operation is a Spark job of one task, at most
`compaction.tasks` of them at once (half the default parallelism when unset; all of it when catching up), so a
slot a finished operation frees goes to the next operation or to a micro-batch at once, and its merging threads
run at a lowered CPU priority
(`hoodie.stream.compaction.nice`; none when catching up). In FIFO mode (no pools) it submits an operation only
when no micro-batch is being written (waiting at most INGEST_WAIT_SECONDS).

Plans are bounded so that one completes within its interval: unless `compaction.target_io` is set, a plan's IO
budget is the compaction pace measured on the plans run so far (MB of plan IO a second) times the time the
trigger takes to come round again (the measured time between delta commits times `compaction.delta_commits`,
or `compaction.delta_seconds`), with a margin. At most one compaction runs at a time, earliest plan first. A plan
due while `hoodie.stream.compaction.max.pending` plans are pending is written later, when one of them completed;
only when it is overdue for a whole trigger interval does the writer wait for the compaction thread
(back-pressure, the last resort) with a warning. On start, an inflight compaction a crash left behind is
reverted to requested and run again, and an interrupted clean is finished.
"""

import collections
import contextlib
import logging
import threading
import time
import uuid

from ..chain import worker_memory
from ..chain.scheduler_pools import CATCH_UP_POOL, COMPACTION_POOL, fair_scheduling, in_pool
from ..format.timeline.active_timeline import Timeline
from ..storage import storage_for
from . import clean
from .archiver import clean_and_archive
from .commit import revert_to_requested
from .operation import plan_operations
from .pace import CompactionPace
from .plan import pending_plans, plan_io_mb, schedule_compaction, should_schedule
from .run import run_compaction

log = logging.getLogger("hoodie_stream.compaction")
INGEST_WAIT_SECONDS = 30
CATCH_UP_INTERVALS = 2  # a plan this many trigger intervals old, with another waiting behind it, catches up
COMPLETED_KEPT = 100  # the instants of the latest compactions this service completed (`completed`)
ERRORS_KEPT = 20  # the latest failures of its steps (`errors`)


def spark_stopped(spark):
    """Whether the SparkContext of `spark` was stopped (a script that ends with `spark.stop()` and no
    `sink.close()`): PySpark drops its JVM handle, and every later call fails (`'NoneType' object has no attribute
    'setCallSite'`)."""
    if spark is None:
        return False
    try:
        jsc = spark.sparkContext._jsc
        return jsc is None or bool(jsc.sc().isStopped())
    except Exception:  # the JVM is gone too
        return True


def recover(storage):
    """Revert inflight compactions to requested and finish interrupted cleans (no service may be running)."""
    timeline = Timeline(storage)
    reverted = [
        i.timestamp
        for i in timeline.pending(["compaction"])
        if i.is_inflight and revert_to_requested(storage, timeline, i.timestamp)
    ]
    clean.finish_pending_cleans(storage, timeline)
    return reverted


def run_pending_compactions(
    spark,
    storage,
    opts,
    limit=None,
    concurrency=None,
    before_task=None,
    nice=0,
    guard=None,
    job_context=None,
    stopped=None,
    release_memory=True,
):
    """Execute and commit pending compaction plans, earliest first (see `run_compaction` for the arguments).
    Returns the instants completed. `guard()` raises when the writer must not go on (the writer lease was lost)."""
    done = []
    timeline = Timeline(storage)
    for instant in list(pending_plans(timeline)):
        if limit is not None and len(done) >= limit:
            break
        run_compaction(
            spark,
            storage,
            timeline,
            instant,
            opts.max_memory_bytes,
            opts.tasks,
            concurrency=concurrency,
            before_task=before_task,
            nice=nice,
            guard=guard,
            compression=opts.parquet_codec,
            job_context=job_context,
            stopped=stopped,
            release_memory=release_memory,
        )
        done.append(instant)
    return done


class TableServices:
    """Compaction and cleaning for one table, driven by the sink after each committed micro-batch."""

    def __init__(self, storage, opts, lease=None, release_memory=True):
        self.storage = storage_for(storage)
        self.opts = opts
        self.release_memory = release_memory  # hoodie.stream.worker.memory.release: after each round
        self.lease = None
        self.guard = lambda: None
        self.use_lease(lease)
        self._thread = None
        self._lock = threading.Lock()
        self._again = False
        self._stop = False
        self._ending = False  # stop(wait=True): the running step is the last
        self.errors = []  # the latest ERRORS_KEPT failures (logged when they happened), and how many in all
        self.error_count = 0
        # the latest compactions completed (a query that runs for months keeps only these), and how many in all
        self.completed: collections.deque[str] = collections.deque(maxlen=COMPLETED_KEPT)
        self.completed_count = 0
        self._spark = None
        self._recovered = False
        self._idle = threading.Event()  # set while no micro-batch is being written
        self._idle.set()
        self._group = f"{COMPACTION_POOL}-{uuid.uuid4().hex[:12]}"  # this table's compaction jobs (stop() cancels)
        self.pace = CompactionPace(opts)
        self._fifo_warned = False
        self.overdue = 0  # commits since a plan was due that could not be written (max.pending plans pending)
        self.back_pressure_seconds = 0.0  # time the writer waited for compaction (back-pressure)

    def use_lease(self, lease):
        """The writer lease: each background step holds it; its check runs before plans and commits."""
        self.lease = lease
        self.guard = lease.ensure if lease is not None else (lambda: None)

    @property
    def started(self):
        return self._recovered

    def start(self):
        """Recovery before the first micro-batch of this process."""
        if not self._recovered:
            recover(self.storage)
            self._recovered = True

    def _holding(self):
        """The writer lease held (nested in the sink's hold when it runs after a micro-batch)."""
        return self.lease.hold() if self.lease is not None else contextlib.nullcontext()

    def after_commit(self, spark, inline=False):
        """After a committed micro-batch: schedule a plan when due, then run compaction and cleaning, in the
        background (async) or here (inline: `compaction.async.enabled=false`, or `inline` for a query that runs
        once, availableNow or once, whose end would stop a background compaction: Hudi's advice for such jobs)."""
        opts = self.opts
        self.pace.delta_committed()
        self._spark = spark
        with self._holding():
            if opts.schedule:
                self._schedule(spark, Timeline(self.storage))
            if not opts.async_run or inline:
                self.wait_idle(None)  # a background step of an earlier query of this sink ends first
                self._completed(
                    run_pending_compactions(
                        spark, self.storage, opts, guard=self.guard, release_memory=self.release_memory
                    )
                )
                clean_and_archive(self.storage, opts)
                self._release_memory()
                return
            if not opts.clean_async:
                clean_and_archive(self.storage, opts)
                self._release_memory()
        self._kick()
        self._back_pressure()

    def _schedule(self, spark, timeline):
        """Write a plan when the trigger says so. Async: the plan's IO is bounded by the measured pace, and a plan
        due while `hoodie.stream.compaction.max.pending` plans are pending waits (it is written after a later
        commit, when one of them completed)."""
        opts = self.opts
        budget = None
        if opts.async_run:
            due, _n, _s = should_schedule(timeline, opts)
            if not due:
                self.overdue = 0
                return
            if len(pending_plans(timeline)) >= opts.max_pending:
                self.overdue += 1
                return
            self.overdue = 0
            budget = self.pace.plan_budget_mb(self._concurrency(spark, False))
        instant = schedule_compaction(self.storage, timeline, opts, target_io_mb=budget)
        if instant:
            log.info("compaction %s scheduled for %s", instant, self.storage.uri)

    def _back_pressure(self):
        """The last resort: when a due plan could not be written for a whole trigger interval (as many commits as
        `compaction.delta_commits`), the writer waits until a pending plan completed, with a warning; a compaction
        that fails meanwhile ends the wait (it is logged and retried after a later commit)."""
        opts = self.opts
        if self.overdue < max(1, opts.delta_commits):
            return
        pending = len(pending_plans(Timeline(self.storage)))
        if pending < opts.max_pending:
            return
        log.warning(
            "%d compaction plans pending for %s (limit %d) and the next one overdue for %d commits: the writer "
            "waits for compaction to catch up",
            pending,
            self.storage,
            opts.max_pending,
            self.overdue,
        )
        started = time.monotonic()
        failures = self.error_count
        while len(pending_plans(Timeline(self.storage))) >= opts.max_pending and not self._stop:
            if self.error_count > failures:  # the compaction failed (logged): the writer goes on, retried later
                log.warning(
                    "compaction of %s failed while the writer waited for it; the writer goes on and the plan is "
                    "retried",
                    self.storage,
                )
                break
            self._kick()
            thread = self._thread
            if thread is not None:
                thread.join(0.5)
        self.back_pressure_seconds += time.monotonic() - started

    @contextlib.contextmanager
    def ingesting(self):
        """Marks a micro-batch in progress: in FIFO mode the async compaction submits no new task meanwhile."""
        self._idle.clear()
        try:
            yield
        finally:
            self._idle.set()

    def _before_task(self):
        """FIFO mode: let a running micro-batch finish before the next compaction task takes an executor slot
        (bounded wait, so compaction still progresses when micro-batches run back to back)."""
        self._idle.wait(INGEST_WAIT_SECONDS)

    def _concurrency(self, spark, catching_up):
        """Compaction tasks at once: all the default parallelism when catching up, else `compaction.tasks` or half
        of it."""
        slots = spark.sparkContext.defaultParallelism
        if catching_up:
            return max(slots, self.opts.tasks or 1)
        return self.opts.tasks or max(1, slots // 2)

    @contextlib.contextmanager
    def _job_context(self, pool):
        """A compaction thread's Spark jobs: in `pool`, in this table's job group (which stop() cancels)."""
        sc = self._spark.sparkContext
        with in_pool(sc, pool):
            sc.setJobGroup(self._group, f"hoodie-stream compaction of {self.storage.uri}", interruptOnCancel=False)
            try:
                yield
            finally:
                sc.setLocalProperty("spark.jobGroup.id", None)
                sc.setLocalProperty("spark.job.description", None)

    def _kick(self):
        """Start the service thread unless it is running; it works until nothing is pending, then ends."""
        with self._lock:
            if self._stop or self._ending:
                return
            self._again = True
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name=f"hoodie-compaction-{self.storage.uri}", daemon=True
                )
                self._thread.start()

    def _loop(self):
        while True:
            with self._lock:
                if self._stop or self._ending or not self._again:
                    return
                self._again = False
            if spark_stopped(self._spark):
                self._stopped_with_spark()
                return
            try:
                with self._holding():
                    self._run_one()
                    if self.opts.clean_async:
                        self.guard()
                        clean_and_archive(self.storage, self.opts)
            except Exception as exc:  # the plan stays requested; the next micro-batch retries it
                if spark_stopped(self._spark):
                    self._stopped_with_spark()
                    return
                if self._stop:
                    log.info("table services of %s stopped during a compaction; its plan stays requested", self.storage)
                else:
                    log.exception("table service failed for %s", self.storage.uri)
                    self.errors.append(exc)
                    del self.errors[:-ERRORS_KEPT]  # an exception holds its traceback's frames
                    self.error_count += 1
            finally:
                self._release_memory()

    def _release_memory(self):
        """After a round of the services, in whichever driver thread ran it (chain/worker_memory.py)."""
        if self.release_memory:
            worker_memory.after_table_service()

    def _stopped_with_spark(self):
        """The SparkContext stopped under the service thread: it ends quietly, as after `stop()` (a plan it was
        running stays pending, invisible to readers, and runs again after the next writer's recovery)."""
        with self._lock:
            self._stop = True
        log.info("table services of %s stopped: the SparkContext was stopped", self.storage.uri)

    def _age_in_intervals(self, instant):
        """Trigger intervals (compaction.delta_commits delta commits each) completed since plan `instant`."""
        later = [i for i in Timeline(self.storage).completed(["deltacommit"]) if i.timestamp > instant]
        return len(later) / max(1, self.opts.delta_commits)

    def _run_one(self):
        """Run the earliest pending plan with the share its backlog calls for; measure the pace."""
        spark = self._spark
        plans = pending_plans(Timeline(self.storage))
        if not plans:
            return
        instant = next(iter(plans))
        catching_up = len(plans) > 1 and self._age_in_intervals(instant) >= CATCH_UP_INTERVALS
        fair = fair_scheduling(spark.sparkContext)
        if not fair and not self._fifo_warned:
            self._fifo_warned = True
            log.warning(
                "spark.scheduler.mode is FIFO: async compaction of %s runs between micro-batches; set "
                "spark.scheduler.mode=FAIR to let it share the executors with them",
                self.storage,
            )
        plan = plans[instant]
        tasks = self._concurrency(spark, catching_up)
        started = time.monotonic()
        done = run_pending_compactions(
            spark,
            self.storage,
            self.opts,
            limit=1,
            concurrency=tasks,
            before_task=None if fair else self._before_task,
            nice=0 if catching_up else self.opts.nice,
            guard=self.guard,
            job_context=lambda: self._job_context(CATCH_UP_POOL if catching_up else COMPACTION_POOL),
            stopped=lambda: self._stop or spark_stopped(spark),
            release_memory=self.release_memory,
        )
        if done:
            self.pace.compacted(plan_io_mb(plan), time.monotonic() - started, min(tasks, len(plan_operations(plan))))
            self._completed(done)
            self._again = True

    def _completed(self, instants):
        self.completed.extend(instants)
        self.completed_count += len(instants)

    def wait_idle(self, timeout=300):
        """Block until the service thread has nothing left to do (or timeout). Returns True when idle."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                return False
        return not pending_plans(Timeline(self.storage)) or self.opts.async_run is False

    def stop(self, wait=True):
        """Stop the service thread. `wait`: its running step finishes (a compaction it started completes), for at
        most `compaction.timeout.seconds`; then, or at once without `wait`, the running compaction's Spark jobs
        are cancelled and its plan goes back to requested (it runs again later; nothing of it is visible)."""
        with self._lock:
            self._ending = True  # no further step: the running one is the last
            thread = self._thread
            if thread is None:
                self._stop = True
                return
        if wait:
            thread.join(self.opts.timeout_seconds)
            if thread.is_alive():
                log.warning(
                    "the compaction of %s did not complete within compaction.timeout.seconds (%d s) after its "
                    "query ended; it is cancelled and its plan stays requested (the next writer runs it first)",
                    self.storage,
                    self.opts.timeout_seconds,
                )
        with self._lock:
            self._stop = True
        if thread.is_alive() and self._spark is not None and not spark_stopped(self._spark):
            self._spark.sparkContext.cancelJobGroup(self._group)
        thread.join()
