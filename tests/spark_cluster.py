"""A Spark standalone cluster on loopback, for tests: one master and N workers, each launched with pyspark's own
`bin/spark-class` (SPARK_HOME = the installed pyspark package) as a subprocess in its own process group, and torn
down with killpg (which also takes the executors and Python workers a worker started: they share its group).

    with StandaloneCluster(tmp_path / "cluster", workers=2) as cluster:
        ... SparkSession.builder.master(cluster.master_url) ...  (in another process)
"""

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


class ClusterError(RuntimeError):
    pass


def spark_home():
    """The pyspark package directory: pip's pyspark ships bin/spark-class and jars/ there."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ClusterError("pyspark is not installed in this interpreter")
    return os.path.dirname(spec.origin)


def spark_class():
    path = os.path.join(spark_home(), "bin", "spark-class")
    if not os.path.isfile(path):
        raise ClusterError(f"pyspark ships no {path}")
    return path


def java_executable():
    """The java that spark-class will run (JAVA_HOME first, then PATH), or None."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = os.path.join(java_home, "bin", "java")
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(proc, grace=10.0):
    """SIGTERM the process group of `proc` (started with start_new_session), SIGKILL whatever is left."""
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:  # children (executors, Python daemons) may outlive the leader: the group goes entirely
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass


def tail(path, n=40):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as exc:
        return f"<{exc}>"


class StandaloneCluster:
    """Master + `workers` workers on 127.0.0.1; `start()` returns once every worker is ALIVE at the master."""

    def __init__(self, root, workers=2, cores=1, memory="1g", python=sys.executable, start_timeout=240.0):
        self.root = str(root)
        self.n_workers = workers
        self.cores = cores
        self.memory = memory
        self.python = python
        self.start_timeout = start_timeout
        self.master = None
        self.workers = []
        self.master_url = None
        self.master_ui = None
        self.log_dir = os.path.join(self.root, "logs")

    # -- lifecycle -----------------------------------------------------------------------------------------
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def client_env(self):
        """Environment for a driver process of this cluster (same Spark, loopback, Python workers = `python`)."""
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": spark_home(),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
                "PYSPARK_PYTHON": self.python,
                "PYSPARK_DRIVER_PYTHON": self.python,
            }
        )
        return env

    def local_dir(self, worker):
        """Worker `worker`'s own local directories (Spark's local dirs of its executors; TMPDIR of its processes)."""
        return os.path.join(self.root, f"worker-{worker}-local")

    def temp_dir(self, worker):
        return os.path.join(self.root, f"worker-{worker}-tmp")

    def env(self, work_dir, worker=None):
        """Environment of the master and worker daemons: a worker (and the executors and Python workers it starts)
        gets local and temporary directories of its own, shared with no other process."""
        env = dict(os.environ)
        if worker is not None:
            for d in (self.local_dir(worker), self.temp_dir(worker)):
                os.makedirs(d, exist_ok=True)
            env.update({"SPARK_LOCAL_DIRS": self.local_dir(worker), "TMPDIR": self.temp_dir(worker)})
        conf_dir = os.path.join(self.root, "conf")  # empty: no spark-env.sh, defaults only
        os.makedirs(conf_dir, exist_ok=True)
        env.update(
            {
                "SPARK_HOME": spark_home(),
                "SPARK_CONF_DIR": conf_dir,
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
                "SPARK_LOG_DIR": self.log_dir,
                "SPARK_WORKER_DIR": work_dir,
                "SPARK_DAEMON_MEMORY": "512m",
                # master and workers only (not the executors): a JVM tuned for start-up
                "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                "PYSPARK_PYTHON": self.python,
                "PYSPARK_DRIVER_PYTHON": self.python,
            }
        )
        return env

    def _launch(self, name, args, work_dir, worker=None):
        os.makedirs(self.log_dir, exist_ok=True)
        os.makedirs(work_dir, exist_ok=True)
        log = os.path.join(self.log_dir, name + ".out")
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["bash", spark_class(), *args],
                env=self.env(work_dir, worker),
                cwd=work_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc.log = log
        return proc

    def start(self):
        if java_executable() is None:
            raise ClusterError(
                "no Java: spark-class needs `java` on PATH or JAVA_HOME (Java 17+) to start a Spark standalone cluster"
            )
        deadline = time.monotonic() + self.start_timeout
        port, ui = free_port(), free_port()
        self.master = self._launch(
            "master",
            [MASTER, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
            os.path.join(self.root, "master"),
        )
        # Spark moves to the next port when one is taken: the log says where the master really listens
        self.master_url = self._wait_log(self.master, r"Starting Spark master at (spark://\S+)", deadline)
        self.master_ui = self._wait_log(self.master, r"(?:MasterWebUI|started at) .*?(http://\S+)", deadline)
        for i in range(self.n_workers):
            work_dir = os.path.join(self.root, f"worker-{i}")
            self.workers.append(
                self._launch(
                    f"worker-{i}",
                    [
                        WORKER,
                        self.master_url,
                        "--cores",
                        str(self.cores),
                        "--memory",
                        self.memory,
                        "--host",
                        "127.0.0.1",
                        "--webui-port",
                        str(free_port()),
                        "--work-dir",
                        work_dir,
                    ],
                    work_dir,
                    worker=i,
                )
            )
        while True:
            state = self.state()
            alive = [w for w in (state or {}).get("workers", []) if w.get("state") == "ALIVE"]
            if len(alive) >= self.n_workers:
                return self
            self._check_running(deadline, f"{len(alive)} of {self.n_workers} workers registered")
            time.sleep(0.5)

    def stop(self):
        for proc in self.workers:
            kill_group(proc)
        kill_group(self.master)

    # -- inspection ----------------------------------------------------------------------------------------
    def state(self):
        """The master's JSON status (workers, applications), or None while its UI is not up."""
        if not self.master_ui:
            return None
        try:
            with urllib.request.urlopen(self.master_ui.rstrip("/") + "/json", timeout=5) as resp:
                return json.load(resp)
        except (OSError, ValueError):
            return None

    def logs(self, n=40):
        procs = [p for p in [self.master, *self.workers] if p is not None]
        return "\n".join(f"--- {os.path.basename(p.log)} (exit {p.poll()}) ---\n{tail(p.log, n)}" for p in procs)

    def executor_logs(self, n=40):
        """The stderr of every executor the workers ran (work dir app-*/<executor id>/stderr)."""
        out = []
        for i in range(self.n_workers):
            work_dir = os.path.join(self.root, f"worker-{i}")
            for dirpath, _dirs, files in os.walk(work_dir):
                if "stderr" in files:
                    path = os.path.join(dirpath, "stderr")
                    out.append(f"--- {os.path.relpath(path, self.root)} ---\n{tail(path, n)}")
        return "\n".join(out)

    def _check_running(self, deadline, waiting_for):
        for p in [self.master, *self.workers]:
            if p.poll() is not None:
                raise ClusterError(
                    f"{os.path.basename(p.log)} exited with {p.returncode} while waiting for "
                    f"{waiting_for}\n{self.logs()}"
                )
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {self.start_timeout}s waiting for {waiting_for}\n{self.logs()}")

    def _wait_log(self, proc, pattern, deadline):
        regex = re.compile(pattern)
        while True:
            with open(proc.log, encoding="utf-8", errors="replace") as f:
                found = regex.search(f.read())
            if found:
                return found.group(1).rstrip(".,")
            self._check_running(deadline, f"/{pattern}/ in {os.path.basename(proc.log)}")
            time.sleep(0.2)
