"""The Java Hudi oracle: Apache Hudi's Spark bundle on the oracle's own pyspark 3.5 (.venv-hudi), one JVM for the
life of the process, answering requests from the test session.

Run by tests/java_hudi.py as `.venv-hudi/bin/python tests/hudi_oracle/driver.py JAR [JAR...]`. Requests are JSON
lines on stdin; each answer is one line on stdout starting with ANSWER (the JVM may print other lines):

  {"op": "read", "path": P, "options": {...}, "out": DIR}
      spark.read.format("hudi").options(...).load(P), written as Parquet into DIR -> {"rows": n}
  {"op": "write", "path": P, "input": PARQUET, "options": {...}, "mode": "append"|"overwrite"}
      the rows of PARQUET written with df.write.format("hudi") -> {}
  {"op": "stream_write", "path": P, "input": DIR, "checkpoint": C, "options": {...}}
      the Parquet files of DIR, one per micro-batch, written by Hudi's streaming sink (availableNow) -> {}
  {"op": "sql", "sql": S}
      spark.sql(S), its rows as JSON values (str() of anything JSON does not carry) -> {"rows": [...]}
  {"op": "hadoop", "conf": {...}}
      set Hadoop configuration keys (s3a endpoint and keys of the S3 test server) -> {}

Errors answer {"error": "<the exception, first lines>"} and the process goes on.
"""

import json
import sys
import traceback

ANSWER = "@@hudi-oracle@@ "


def local_builder(jars, driver_memory, app):
    """A local[2] session builder with `jars`, the heap, 2 shuffle partitions, UTC and no UI: the oracle's, and
    the benchmarks' Spark peers' (benchmarks/spark_peer.py) before their own catalog."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.jars", ",".join(jars))
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
    )


def _session(jars, driver_memory="1g", app="java-hudi-oracle"):
    """Hudi's Spark session on local[2] (also the benchmarks' Hudi peer's, benchmarks/spark_peer.py)."""
    return (
        local_builder(jars, driver_memory, app)
        .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        .config("spark.kryo.registrator", "org.apache.spark.HoodieSparkKryoRegistrar")
        .config("spark.sql.extensions", "org.apache.spark.sql.hudi.HoodieSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.hudi.catalog.HoodieCatalog")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.sql.warehouse.dir", "oracle-warehouse")
        .getOrCreate()
    )


def _json_value(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if hasattr(value, "asDict"):
        return _json_value(value.asDict())
    return str(value)


def _handle(spark, req):
    op = req["op"]
    if op == "read":
        df = spark.read.format("hudi").options(**req.get("options", {})).load(req["path"])
        df.write.mode("overwrite").parquet(req["out"])
        return {"rows": spark.read.parquet(req["out"]).count()}
    if op == "write":
        df = spark.read.parquet(req["input"])
        df.write.format("hudi").options(**req.get("options", {})).mode(req.get("mode", "append")).save(req["path"])
        return {}
    if op == "stream_write":
        # Hudi's Structured Streaming sink over the Parquet files of a directory, one file a micro-batch, until all
        # are written (availableNow)
        schema = spark.read.parquet(req["input"]).schema
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(req["input"])
        query = (
            stream.writeStream.format("hudi")
            .options(**req.get("options", {}))
            .option("checkpointLocation", req["checkpoint"])
            .trigger(availableNow=True)
            .start(req["path"])
        )
        query.awaitTermination()
        return {}
    if op == "sql":
        rows = spark.sql(req["sql"]).collect()
        return {"rows": [_json_value(r.asDict()) for r in rows]}
    if op == "hadoop":
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        for key, value in req["conf"].items():
            conf.set(key, value)
        return {}
    raise ValueError(f"unknown op {op!r}")


def _describe(error):
    """The error: for a Java exception, its innermost cause first, then the first line of each exception of its cause
    chain, outermost last."""
    java = getattr(error, "java_exception", None)
    if java is None:
        return f"{type(error).__name__}: {error}\n{traceback.format_exc()[-2000:]}"
    chain = []
    while java is not None and len(chain) < 12:
        chain.append(str(java.toString()).splitlines()[0][:400])
        java = java.getCause()
    return " <- ".join(reversed(chain))


def main():
    spark = _session(sys.argv[1:])
    spark.sparkContext.setLogLevel("ERROR")
    print(ANSWER + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = _handle(spark, json.loads(line))
        except Exception as e:  # the request failed; the oracle goes on
            answer = {"error": _describe(e)}
        print(ANSWER + json.dumps(answer), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
