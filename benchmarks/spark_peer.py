"""Another system's Spark writer as a benchmark peer, in a process of its own (one JVM for its life), so that its
Spark, jars and catalog stay apart from this project's. The benchmarks start it with `SparkPeer(system)` and send it
requests; it answers each with its own wall times. Systems:

- `hudi`: Apache Hudi 0.15.0's Spark bundle on the oracle's pyspark 3.5 (.venv-hudi, scripts/setup-hudi-oracle.sh):
  its Structured Streaming sink (`writeStream.format("hudi")`), its `bulk_insert` for a first load;
- `hudi12`: the same with Apache Hudi 1.2.0's Spark bundle (the oracle's other Hudi, same venv): it writes the table
  version its options ask (`hoodie.write.table.version`: 6, 8 or 9; 9 by default);
- `delta`: delta-spark on this project's pyspark: `MERGE` in `foreachBatch` (matched and deleted -> delete, matched
  -> update all, not matched and not deleted -> insert all), a plain Delta write for a first load. Its jars are
  in .bench-peers/ (scripts/setup-bench-peers.sh).

    python benchmarks/spark_peer.py SYSTEM DRIVER_MEMORY JAR [JAR...]

Requests are JSON lines on stdin; each answer is one line on stdout starting with ANSWER (the JVM may print others):

  {"op": "load", "input": DIR, "path": P, "options": {...}, "codec": C, "partition_by": [COLUMN...]}
      the Parquet files of DIR written as a new table (Hudi: bulk_insert, its codec and partitioning are options;
      Delta: codec C, partitioned by the columns of `partition_by`, none if absent) -> {"seconds": s}
  {"op": "start_stream", "path": P, "watch": W, "checkpoint": C, "schema_from": DIR, "options": {...}}
      a streaming query reading the Parquet batch directories moved into W (`W/*`, rows of DIR's schema) into the
      system's sink, with the default trigger -> {}
  {"op": "batch", "input": DIR}
      DIR (one micro-batch's Parquet files, left where it is) linked beside W and moved into it in one rename,
      then processAllAvailable(): the wall time from the rename to the batch committed, and the query's own
      figures for it -> {"seconds": s, "progress": {...}}
  {"op": "stop_stream"}
      the query stopped -> {}
  {"op": "count", "path": P}
      the table's rows through the system's own reader (not timed) -> {"rows": n}
  {"op": "compactions", "path": P}
      Hudi: the table's completed and pending compactions (its timeline; for the stream's table, the completed
      ones seen after any batch count too: Hudi archives old instants as it goes) -> {"completed": n, "pending": n}

Hudi's sink calls System.exit after a micro-batch failed its retries: that ends this process, and the benchmark
reports the peer's failure instead of hanging.
"""

import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

ANSWER = "@@spark-peer@@ "
REQUEST_TIMEOUT = 3600  # seconds a request may take before the benchmark gives the peer up
BATCH_TIMEOUT = 1800  # seconds a batch may take to show up as committed in the query's progress
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from json_child import JsonChild  # noqa: E402  (the Java Hudi oracle's child-process client)

VENV = ROOT / ".venv-hudi"
HUDI_VERSIONS = {"hudi": "0.15.0", "hudi12": "1.2.0"}  # peer system -> the Hudi bundle it runs
SETUP = "bash scripts/setup-hudi-oracle.sh"


class SparkPeer:
    """The peer process seen from the benchmark: `request(op, ...)` answers as above (an error raises)."""

    def __init__(self, system, driver_memory="4g"):
        if system in HUDI_VERSIONS:
            version = HUDI_VERSIONS[system]
            python, jars = VENV / "bin" / "python", sorted((VENV / "jars" / f"hudi-{version}").glob("*.jar"))
            self.name = f"Apache Hudi {version}"
            if not python.exists() or not jars:
                raise SystemExit(f"{self.name} for the benchmark is not set up ({VENV}): run `{SETUP}`")
        elif system == "delta":
            python, jars = Path(sys.executable), sorted((ROOT / ".bench-peers" / "delta-4.4.0").glob("*.jar"))
            self.name = "delta-spark 4.4.0"
            if not jars:
                raise SystemExit(
                    f"{self.name} for the benchmark is not set up: run `bash scripts/setup-bench-peers.sh`"
                )
        else:
            raise ValueError(f"no peer system {system!r}")
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{system}-peer-"))
        argv = [__file__, system, driver_memory, *jars]
        self._child = JsonChild(f"{self.name}'s peer process", python, argv, ANSWER, self.workdir, REQUEST_TIMEOUT)

    def request(self, op, **fields):
        answer = self._child.request({"op": op, **fields})
        if "error" in answer:
            raise RuntimeError(f"{self.name} ({op}): {answer['error']}")
        return answer

    def close(self):
        self._child.close(120)
        shutil.rmtree(self.workdir, ignore_errors=True)


def session(system, driver_memory, jars):
    """The oracle's Hudi session (tests/hudi_oracle/driver.py) with the benchmark's heap, or its local builder with
    Delta's catalog."""
    sys.path.insert(0, str(ROOT / "tests" / "hudi_oracle"))
    from driver import _session, local_builder

    if system in HUDI_VERSIONS:
        return _session(jars, driver_memory, f"{system}-peer")
    return (
        local_builder(jars, driver_memory, f"{system}-peer")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .getOrCreate()
    )


def delta_merge(spark, path):
    """foreachBatch's function: the micro-batch merged into the Delta table at `path` by `id` (keys are unique in
    a micro-batch)."""

    def merge(batch, _batch_id):
        from delta.tables import DeltaTable

        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(batch.alias("s"), "t.id = s.id")
            .whenMatchedDelete(condition="s._hoodie_is_deleted")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll(condition="NOT s._hoodie_is_deleted")
            .execute()
        )

    return merge


def _as_dict(progress):
    """A StreamingQueryProgress as a dict (pyspark 3.5 gives dicts, pyspark 4 objects)."""
    return progress if isinstance(progress, dict) else json.loads(progress.json)


def _read_batch(progress, n):
    """Whether the progress is of the micro-batch that read the n-th directory moved into the watched one."""
    source = progress["sources"][0]
    start, end = (json.loads(o) if isinstance(o, str) else o for o in (source["startOffset"], source["endOffset"]))
    return start != end and (end or {}).get("logOffset") == n - 1


class Peer:
    def __init__(self, system, spark):
        self.system = system
        self.hudi = system in HUDI_VERSIONS
        self.spark = spark
        self.query = None
        self.watch = None
        self.path = None  # the stream's table
        self.batches = 0
        self.compacted: set[str] = set()  # compaction instants seen completed in the stream's table

    def load(self, req):
        if "codec" in req:  # Delta writes Spark's Parquet codec
            self.spark.conf.set("spark.sql.parquet.compression.codec", req["codec"])
        df = self.spark.read.parquet(req["input"])
        start = time.perf_counter()
        if self.hudi:
            options = {**req.get("options", {}), "hoodie.datasource.write.operation": "bulk_insert"}
            df.write.format("hudi").options(**options).mode("overwrite").save(req["path"])
        else:
            partition_by = req.get("partition_by", [])
            writer = df.write.format("delta").options(**req.get("options", {})).partitionBy(*partition_by)
            writer.mode("overwrite").save(req["path"])
        return {"seconds": time.perf_counter() - start}

    def start_stream(self, req):
        self.watch, self.path, self.batches, self.compacted = req["watch"], req["path"], 0, set()
        os.makedirs(self.watch, exist_ok=True)
        os.makedirs(self.watch + ".staging", exist_ok=True)
        schema = self.spark.read.parquet(req["schema_from"]).schema
        stream = self.spark.readStream.schema(schema).parquet(os.path.join(self.watch, "*"))
        if self.hudi:
            writer = stream.writeStream.format("hudi").options(**req.get("options", {})).outputMode("append")
            self.query = writer.option("checkpointLocation", req["checkpoint"]).start(req["path"])
            return {}
        if "codec" in req:  # Delta writes Spark's Parquet codec
            self.spark.conf.set("spark.sql.parquet.compression.codec", req["codec"])
        if not os.path.exists(os.path.join(req["path"], "_delta_log")):  # an empty table to merge into
            self.spark.createDataFrame([], schema).write.format("delta").save(req["path"])
        writer = stream.writeStream.foreachBatch(delta_merge(self.spark, req["path"]))
        self.query = writer.option("checkpointLocation", req["checkpoint"]).start()
        return {}

    def batch(self, req):
        self.batches += 1
        staged = os.path.join(self.watch + ".staging", str(self.batches))
        shutil.copytree(req["input"], staged, copy_function=os.link)
        start = time.perf_counter()
        os.rename(staged, os.path.join(self.watch, str(self.batches)))
        # A trigger that listed the files before the rename may end processAllAvailable() at once, and an idle
        # query reports progress too: wait for the micro-batch whose source offset is this batch's directory (the
        # file source's log offset counts the batches of new files; numInputRows is 0 for Hudi's sink at times).
        deadline = start + BATCH_TIMEOUT
        while True:
            if time.perf_counter() > deadline:
                raise RuntimeError(
                    f"no micro-batch read batch directory {self.batches} in {BATCH_TIMEOUT}s; the query's last "
                    f"progress: {json.dumps(_as_dict(self.query.lastProgress)) if self.query.lastProgress else None}"
                )
            self.query.processAllAvailable()
            progress = next((p for p in map(_as_dict, self.query.recentProgress) if _read_batch(p, self.batches)), None)
            if progress is not None:
                break
            time.sleep(0.01)
        seconds = time.perf_counter() - start
        if self.hudi:
            self.compacted |= compaction_instants(self.path)[0]
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

    def count(self, req):
        """The rows of the table at `path` as the system's own reader sees them (not timed) -> {"rows": n}."""
        fmt = "hudi" if self.hudi else self.system
        return {"rows": self.spark.read.format(fmt).load(req["path"]).count()}

    def compactions(self, req):
        completed, pending = compaction_instants(req["path"])
        if req["path"] == self.path:
            completed |= self.compacted
        return {"completed": len(completed), "pending": len(pending)}


def compaction_instants(path):
    """The instant times of the completed and of the pending compactions in the active timeline of the Hudi table
    at `path` (on a MERGE_ON_READ table a `commit` is a compaction's). Timeline layout 1 (table version 6) keeps the
    instants in `.hoodie/`; layout 2 (versions 8, 9) in `.hoodie/timeline/`, a completed one named
    `<instant>_<completion time>.commit`."""
    layout2 = os.path.join(path, ".hoodie", "timeline")
    names = os.listdir(layout2 if os.path.isdir(layout2) else os.path.join(path, ".hoodie"))
    completed = {n.split(".")[0].split("_")[0] for n in names if n.endswith(".commit")}
    pending = {n.split(".")[0] for n in names if n.endswith((".compaction.requested", ".compaction.inflight"))}
    return completed, pending - completed


def main(system, driver_memory, *jars):
    peer = Peer(system, session(system, driver_memory, list(jars)))
    print(ANSWER + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            answer = getattr(peer, req["op"])(req)
        except Exception as err:  # the benchmark shows it and stops
            text = "".join(traceback.format_exception_only(type(err), err))  # a Java error: its message, its end
            answer = {"error": text if len(text) <= 4000 else f"{text[:1500]}\n...\n{text[-2500:]}"}
        print(ANSWER + json.dumps(answer), flush=True)
    peer.stop_stream({})


if __name__ == "__main__":
    main(*sys.argv[1:])
