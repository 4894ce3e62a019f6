"""Table services on the driver: schedule compaction after commits; execute + commit it inline or in a background
thread (its Spark jobs in their own scheduler pool) while micro-batches keep committing; clean after commits.

Asynchronous compaction yields to ingestion: it runs a plan's operations in waves of at most
`compaction.tasks` Spark tasks (half the default parallelism when unset), so it never holds every executor slot;
it submits a wave only when no micro-batch is being written (waiting at most INGEST_WAIT_SECONDS); and its tasks
merge at a lowered CPU priority (`hoodie.stream.compaction.nice`), so a micro-batch sharing the cores comes first.

At most one compaction runs at a time, earliest plan first. When plans pile up past
`hoodie.stream.compaction.max.pending`, the writer waits for the compaction thread (back-pressure) and logs a
warning. On start, an inflight compaction a crash left behind is reverted to requested and run again, and an
interrupted clean is finished.
"""

import contextlib
import logging
import threading
import uuid

from ..format.timeline import Timeline
from ..storage import storage_for
from . import clean
from .commit import revert_to_requested
from .plan import pending_plans, schedule_compaction
from .run import run_compaction

log = logging.getLogger("hoodie_stream.compaction")
POOL = "hoodie_compaction"
INGEST_WAIT_SECONDS = 30


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


def run_pending_compactions(spark, storage, opts, limit=None, wave=None, before_wave=None, nice=0, guard=None):
    """Execute and commit pending compaction plans, earliest first. Returns the instants completed. `guard()`
    raises when the writer must not go on (the writer lease was lost)."""
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
            wave=wave,
            before_wave=before_wave,
            nice=nice,
            guard=guard,
            compression=opts.parquet_codec,
        )
        done.append(instant)
    return done


class TableServices:
    """Compaction and cleaning for one table, driven by the sink after each committed micro-batch."""

    def __init__(self, storage, opts, lease=None):
        self.storage = storage_for(storage)
        self.opts = opts
        self.lease = None
        self.guard = lambda: None
        self.use_lease(lease)
        self._thread = None
        self._lock = threading.Lock()
        self._again = False
        self._stop = False
        self.errors = []
        self.completed = []
        self._spark = None
        self._recovered = False
        self._idle = threading.Event()  # set while no micro-batch is being written
        self._idle.set()
        self._group = f"{POOL}-{uuid.uuid4().hex[:12]}"  # this table's compaction jobs (stop() cancels them)

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

    def after_commit(self, spark):
        opts = self.opts
        with self._holding():
            timeline = Timeline(self.storage)
            if opts.schedule:
                instant = schedule_compaction(self.storage, timeline, opts)
                if instant:
                    log.info("compaction %s scheduled for %s", instant, self.storage.uri)
            if not opts.async_run:
                self.completed += run_pending_compactions(spark, self.storage, opts, guard=self.guard)
                clean.clean(self.storage, Timeline(self.storage), opts)
                return
            if not opts.clean_async:
                clean.clean(self.storage, Timeline(self.storage), opts)
        self._spark = spark
        self._kick()
        pending = len(pending_plans(Timeline(self.storage)))
        if pending > opts.max_pending:
            log.warning(
                "%d compaction plans pending for %s (limit %d): waiting for compaction to catch up",
                pending,
                self.storage,
                opts.max_pending,
            )
            while len(pending_plans(Timeline(self.storage))) > opts.max_pending:
                self._kick()
                self._thread.join(0.5)

    @contextlib.contextmanager
    def ingesting(self):
        """Marks a micro-batch in progress: the async compaction submits no new wave of tasks meanwhile."""
        self._idle.clear()
        try:
            yield
        finally:
            self._idle.set()

    def _before_wave(self):
        """Let a running micro-batch finish before the next compaction tasks take executor slots (bounded wait,
        so compaction still progresses when micro-batches run back to back)."""
        self._idle.wait(INGEST_WAIT_SECONDS)

    def _wave_size(self, spark):
        if self.opts.tasks:
            return self.opts.tasks
        return max(1, spark.sparkContext.defaultParallelism // 2)

    def _kick(self):
        """Start the service thread unless it is running; it works until nothing is pending, then ends."""
        with self._lock:
            if self._stop:
                return
            self._again = True
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name=f"hoodie-compaction-{self.storage.uri}", daemon=True
                )
                self._thread.start()

    def _loop(self):
        sc = self._spark.sparkContext
        sc.setLocalProperty("spark.scheduler.pool", POOL)
        sc.setJobGroup(self._group, f"hoodie-stream compaction of {self.storage.uri}", interruptOnCancel=False)
        while True:
            with self._lock:
                if self._stop or not self._again:
                    self._thread_done()
                    return
                self._again = False
            try:
                with self._holding():
                    done = run_pending_compactions(
                        self._spark,
                        self.storage,
                        self.opts,
                        limit=1,
                        wave=self._wave_size(self._spark),
                        before_wave=self._before_wave,
                        nice=self.opts.nice,
                        guard=self.guard,
                    )
                    if done:
                        self.completed += done
                        self._again = True
                    if self.opts.clean_async:
                        self.guard()
                        clean.clean(self.storage, Timeline(self.storage), self.opts)
            except Exception as exc:  # the plan stays requested; the next micro-batch retries it
                if self._stop:
                    log.info("table services of %s stopped during a compaction; its plan stays requested", self.storage)
                else:
                    log.exception("table service failed for %s", self.storage.uri)
                    self.errors.append(exc)

    def _thread_done(self):
        sc = self._spark.sparkContext
        sc.setLocalProperty("spark.scheduler.pool", None)

    def wait_idle(self, timeout=300):
        """Block until the service thread has nothing left to do (or timeout). Returns True when idle."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                return False
        return not pending_plans(Timeline(self.storage)) or self.opts.async_run is False

    def stop(self, wait=True):
        """Stop the service thread: after its running step (`wait`), or now, cancelling the running compaction's
        Spark job (its plan stays requested and runs again later; nothing of it is visible)."""
        with self._lock:
            self._stop = True
        thread = self._thread
        if thread is None:
            return
        if not wait and thread.is_alive() and self._spark is not None:
            self._spark.sparkContext.cancelJobGroup(self._group)
        if wait:
            thread.join()
