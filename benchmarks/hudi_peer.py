"""Apache Hudi's own Spark writer as a benchmark peer, in a process of its own: Hudi 0.15.0's Spark bundle on the
oracle's pyspark 3.5 (.venv-hudi, scripts/setup-hudi-oracle.sh), one JVM for the life of the process. The
benchmarks start it with `HudiPeer` and send it requests; it answers each with its own wall times.

    .venv-hudi/bin/python benchmarks/hudi_peer.py DRIVER_MEMORY JAR [JAR...]

Requests are JSON lines on stdin; each answer is one line on stdout starting with ANSWER (the JVM may print others):

  {"op": "bulk_insert", "input": DIR, "path": P, "options": {...}}
      the Parquet files of DIR written as a new table with Hudi's bulk_insert -> {"seconds": s}
  {"op": "start_stream", "path": P, "watch": W, "checkpoint": C, "schema_from": DIR, "options": {...}}
      a streaming query reading the Parquet batch directories moved into W (`W/*`, rows of DIR's schema) into
      Hudi's Structured Streaming sink (`writeStream.format("hudi")`, its default trigger) -> {}
  {"op": "batch", "input": DIR}
      DIR (one micro-batch's Parquet files, left where it is) linked beside W and moved into it in one rename,
      then processAllAvailable(): the wall time from the rename to the batch committed, and the query's own
      figures for it -> {"seconds": s, "progress": {...}}
  {"op": "stop_stream"}
      the query stopped -> {}
  {"op": "compactions", "path": P}
      the table's completed and pending compactions (its timeline) -> {"completed": n, "pending": n}

Hudi's sink calls System.exit after a micro-batch failed its retries: that ends this process, and the benchmark
reports the peer's failure instead of hanging.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from pathlib import Path

ANSWER = "@@hudi-peer@@ "
ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-hudi"
SETUP = "bash scripts/setup-hudi-oracle.sh"


class HudiPeer:
    """The peer process seen from the benchmark: `request(op, ...)` answers as above (an error raises)."""

    def __init__(self, driver_memory="4g", version="0.15.0"):
        python, jars = VENV / "bin" / "python", sorted((VENV / "jars" / f"hudi-{version}").glob("*.jar"))
        if not python.exists() or not jars:
            raise SystemExit(f"Apache Hudi {version} for the benchmark is not set up ({VENV}): run `{SETUP}`")
        self.version = version
        self.workdir = Path(tempfile.mkdtemp(prefix="hudi-peer-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_", "PYTHONPATH"))}
        env["PYSPARK_PYTHON"] = str(python)
        self._proc = subprocess.Popen(
            [str(python), __file__, driver_memory, *map(str, jars)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.workdir,
            env=env,
        )
        self._stderr = deque(maxlen=300)
        threading.Thread(target=self._drain, daemon=True).start()
        self._answer()  # ready

    def _drain(self):
        for line in self._proc.stderr:
            self._stderr.append(line)

    def _answer(self):
        for line in self._proc.stdout:
            if line.startswith(ANSWER):
                return json.loads(line[len(ANSWER) :])
        tail = "".join(self._stderr)[-4000:]
        raise RuntimeError(f"Apache Hudi {self.version}'s peer process exited ({self._proc.poll()}):\n{tail}")

    def request(self, op, **fields):
        self._proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self._proc.stdin.flush()
        answer = self._answer()
        if "error" in answer:
            raise RuntimeError(f"Apache Hudi {self.version} ({op}): {answer['error']}")
        return answer

    def close(self):
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(120)
            except subprocess.TimeoutExpired:
                self._proc.kill()


def session(driver_memory, jars):
    """The oracle's Hudi session (tests/hudi_oracle/driver.py), with the benchmark's heap."""
    sys.path.insert(0, str(ROOT / "tests" / "hudi_oracle"))
    from driver import _session

    return _session(jars, driver_memory, "hudi-peer")


class Peer:
    def __init__(self, spark):
        self.spark = spark
        self.query = None
        self.watch = None
        self.batches = 0

    def bulk_insert(self, req):
        df = self.spark.read.parquet(req["input"])
        options = {**req.get("options", {}), "hoodie.datasource.write.operation": "bulk_insert"}
        start = time.perf_counter()
        df.write.format("hudi").options(**options).mode("overwrite").save(req["path"])
        return {"seconds": time.perf_counter() - start}

    def start_stream(self, req):
        self.watch, self.batches = req["watch"], 0
        os.makedirs(self.watch, exist_ok=True)
        os.makedirs(self.watch + ".staging", exist_ok=True)
        schema = self.spark.read.parquet(req["schema_from"]).schema
        stream = self.spark.readStream.schema(schema).parquet(os.path.join(self.watch, "*"))
        self.query = (
            stream.writeStream.format("hudi")
            .options(**req.get("options", {}))
            .option("checkpointLocation", req["checkpoint"])
            .outputMode("append")
            .start(req["path"])
        )
        return {}

    def batch(self, req):
        self.batches += 1
        staged = os.path.join(self.watch + ".staging", str(self.batches))
        shutil.copytree(req["input"], staged, copy_function=os.link)
        before = (self.query.lastProgress or {}).get("batchId", -1)
        start = time.perf_counter()
        os.rename(staged, os.path.join(self.watch, str(self.batches)))
        while True:  # a trigger that listed the files before the rename may end processAllAvailable() at once
            self.query.processAllAvailable()
            progress = self.query.lastProgress or {}
            if progress.get("batchId", -1) > before and progress.get("numInputRows"):
                break
            time.sleep(0.01)
        seconds = time.perf_counter() - start
        return {
            "seconds": seconds,
            "progress": {
                "batchId": progress.get("batchId"),
                "numInputRows": progress.get("numInputRows"),
                "durationMs": progress.get("durationMs"),
            },
        }

    def stop_stream(self, _req):
        if self.query is not None:
            self.query.stop()
            self.query = None
        return {}

    def compactions(self, req):
        timeline = os.path.join(req["path"], ".hoodie")
        names = os.listdir(timeline)
        completed = [n for n in names if n.endswith(".commit")]
        pending = [n for n in names if n.endswith(".compaction.requested") or n.endswith(".compaction.inflight")]
        done = {n.split(".")[0] for n in completed}
        return {"completed": len(completed), "pending": len({n.split(".")[0] for n in pending} - done)}


def main(driver_memory, *jars):
    peer = Peer(session(driver_memory, list(jars)))
    print(ANSWER + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            answer = getattr(peer, req["op"])(req)
        except Exception as err:  # the benchmark shows it and stops
            answer = {"error": "".join(traceback.format_exception_only(type(err), err))[-4000:]}
        print(ANSWER + json.dumps(answer), flush=True)
    peer.stop_stream({})


if __name__ == "__main__":
    main(*sys.argv[1:])
