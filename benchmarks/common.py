"""What the benchmarks share: the local SparkSession they run on (faulthandler on; a crashed Python worker fails the
run), writing a batch as Parquet files, and the RSS sampler of the PySpark Python workers. No benchmark imports
another one: what two of them use lives here."""

import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hoodie_stream.local_spark import local_session_builder

MB = 1024 * 1024


# -- a trips table (format and compaction benchmarks) -------------------------------------------------------
def trips_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.int64()),
            ("ts", pa.int64()),
            ("uuid", pa.string()),
            ("name", pa.string()),
            ("fare", pa.float64()),
            ("city", pa.string()),
        ]
    )


def trips_rows(ids, ts, rng, cities=("sf", "nyc", "chennai")):
    """Trips of the given int64 ids (numpy) at ordering value `ts`; fares drawn from `rng`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(ids)
    return pa.table(
        {
            "id": pa.array(ids),
            "ts": pa.array(np.full(n, ts, dtype=np.int64)),
            "uuid": pc.cast(pa.array(ids * 7919 % 1000003), pa.string()),
            "name": pc.binary_join_element_wise("rider-", pc.cast(pa.array(ids % 997), pa.string()), ""),
            "fare": pa.array(rng.random(n) * 100),
            "city": pa.array(np.array(list(cities))[ids % len(cities)]),
        },
        schema=trips_schema(),
    )


# -- spark -------------------------------------------------------------------------------------------------
# every benchmark runs with Python's faulthandler in its workers (a crash says where), and keeps the status of
# enough stages and tasks to find a crashed worker among them at the end
BENCH_CONF = {
    "spark.python.worker.faulthandler.enabled": "true",
    "spark.ui.retainedStages": "20000",  # a run has hundreds; tasks: Spark's default keeps the last 100,000
}
WORKER_CRASH = "Python worker exited unexpectedly"


def spark_session(driver_memory="4g", app="hoodie-stream-bench", conf=None):
    """A local[2] session whose Python workers run this interpreter (hoodie_stream.local_spark, as the tests), with
    the faulthandler on. Its `stop()` fails the benchmark (SystemExit 3, after stopping) when a task of the run
    lost its Python worker to a crash, even a task Spark retried or a table service whose failure was logged."""
    settings = {"spark.driver.memory": driver_memory, **BENCH_CONF, **(conf or {})}
    spark = local_session_builder("local[2]", app, settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    stop = spark.stop

    def checked_stop():
        crashes = worker_crashes(spark)
        stop()
        if crashes:
            print(
                f"\nFAILED: {len(crashes)} task(s) lost their Python worker to a crash during the run:", file=sys.stderr
            )
            for where, message in crashes:
                print(f"--- {where}\n{message}", file=sys.stderr)
            raise SystemExit(3)

    spark.stop = checked_stop
    return spark


def worker_crashes(spark):
    """[(task, error message)] of the run's failed tasks whose Python worker crashed (Spark's status store)."""
    sc = spark.sparkContext
    store, jvm = sc._jsc.sc().statusStore(), sc._jvm
    stages = store.stageList(
        jvm.java.util.ArrayList(), False, False, sc._gateway.new_array(jvm.double, 0), jvm.java.util.ArrayList()
    )
    out = []
    for i in range(stages.size()):
        stage = stages.apply(i)
        if not stage.numFailedTasks():
            continue
        tasks = store.taskList(stage.stageId(), stage.attemptId(), 1 << 30)
        for j in range(tasks.size()):
            error = tasks.apply(j).errorMessage()
            if error.isDefined() and WORKER_CRASH in error.get():
                where = f"stage {stage.stageId()}.{stage.attemptId()} task {tasks.apply(j).taskId()}"
                out.append((where, error.get()[:4000]))
    return out


# -- input -------------------------------------------------------------------------------------------------
def write_batch(table, directory, files=2):
    """The table as `files` Parquet files in `directory` (made if absent), the form the benchmarks' sources read."""
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    step = -(-table.num_rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), os.path.join(directory, f"part-{i}.parquet"))
    return directory


# -- RSS of the Python workers -----------------------------------------------------------------------------
def read_proc(path, mode="rb"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def _ppid(pid):
    stat = read_proc(f"/proc/{pid}/stat")
    if not stat:
        return None
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


def status_bytes(pid, *fields):
    text = read_proc(f"/proc/{pid}/status")
    out = {}
    if text:
        for line in text.splitlines():
            name, _, value = line.partition(b":")
            if name.decode() in fields:
                out[name.decode()] = int(value.split()[0]) * 1024
    return out


class WorkerRss:
    """Background sampler of the RSS of the PySpark Python workers under this process (the JVM's children whose
    command line contains pyspark.daemon or pyspark.worker, and their forks); not those of a benchmark peer's own
    Spark (benchmarks/spark_peer.py, a child process with its JVM and workers)."""

    def __init__(self, interval=0.02, rescan=0.25, root=None):
        self.interval = interval
        self.rescan = rescan
        self.root = root or os.getpid()
        self.peak = {}  # pid -> max VmRSS sampled
        self.hwm = {}  # pid -> VmHWM (kernel's peak RSS of the process)
        self.peak_sum = 0
        self.samples = []  # (epoch s, max VmRSS of one worker, sum of VmRSS)
        self._pids = []
        self._stop = threading.Event()
        self._thread = None

    def _is_ours(self, pid):
        seen = 0
        while pid and pid > 1 and seen < 64:
            if pid == self.root:
                return True
            if b"spark_peer.py" in (read_proc(f"/proc/{pid}/cmdline") or b""):
                return False
            pid = _ppid(pid)
            seen += 1
        return False

    def _scan(self):
        pids = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            cmd = read_proc(f"/proc/{name}/cmdline")
            if cmd and (b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd) and self._is_ours(int(name)):
                pids.append(int(name))
        self._pids = pids

    def sample(self):
        top = total = 0
        for pid in self._pids:
            st = status_bytes(pid, "VmRSS", "VmHWM")
            if "VmRSS" not in st:
                continue
            rss = st["VmRSS"]
            self.peak[pid] = max(self.peak.get(pid, 0), rss)
            self.hwm[pid] = max(self.hwm.get(pid, 0), st.get("VmHWM", 0))
            top, total = max(top, rss), total + rss
        self.peak_sum = max(self.peak_sum, total)
        self.samples.append((time.time(), top, total))

    def _loop(self):
        last_scan = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last_scan >= self.rescan:
                self._scan()
                last_scan = now
            self.sample()
            self._stop.wait(self.interval)

    def start(self):
        self._thread = threading.Thread(target=self._loop, name="worker-rss", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def peak_mb(self):
        return max(self.peak.values(), default=0) / MB

    def hwm_mb(self):
        return max(self.hwm.values(), default=0) / MB

    def peak_total_mb(self):
        return self.peak_sum / MB

    def max_between(self, start, end):
        """Max RSS of one worker among the samples taken in [start, end] (epoch seconds)."""
        return max((s[1] for s in self.samples if start <= s[0] <= end), default=0) / MB
