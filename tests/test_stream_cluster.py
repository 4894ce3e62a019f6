"""Cluster: the end-to-end pipeline (file source, the model's micro-batches, HoodieStreamSink with OPTIONS) on a real
Spark standalone cluster started on loopback (a master and two 1-core workers launched with pyspark's own
spark-class), so every task runs in an executor JVM and Python worker of its own. The table is on the S3 test
server: each worker has local and temporary directories of its own, no process shares a disk with another for the
table, and nothing but the table on the store connects the driver, the bucket-assign tasks and the write tasks.
After the run, each worker's local directories hold the index state copies it served (the index cache) and its
temporary directory nothing of ours.

The driver is a child process (`python tests/test_stream_cluster.py ...`, see `driver_main`): this pytest process
keeps at most the one local SparkSession of conftest. The child writes one JSON line per micro-batch (the table as
read by hudi-rs and by HoodieTable right after the batch) and a final line with the tasks of every stage (from the
driver's REST API); the test replays the model, checks each line, reads the table itself, and maps every log file's
write token (partition-stage-attempt) to the executor that ran that task: both executors must have written files.
"""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.checkpoints import index_state
from hoodie_stream.storage import storage_for
from oracle import rs_completed_instants, rs_read
from spark_cluster import StandaloneCluster, java_executable, kill_group, tail
from stream_model import OPTIONS, SCHEMA_DDL, TableModel, generate_batches, table_rows, write_batch_file

N_BATCHES = 12
SEED = 11
CHILD_TIMEOUT = 600  # seconds, a hang guard: a healthy run takes 1.5 minutes here, over 4 on a slow CI machine
LOG_TOKEN = re.compile(r"\.log\.\d+_(\d+)-(\d+)-(\d+)$")
INDEX_FILE = re.compile(r"^\d{17}\.(full|delta)\.arrow")


# -- the driver (child process) ------------------------------------------------------------------------------------
def _get_json(url):
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.load(resp)


def driver_main(master, root, out_path, base):
    from conftest import spark_builder

    with open(os.path.join(root, "batches.json"), encoding="utf-8") as f:
        batches = json.load(f)
    storage_options = json.loads(os.environ["HOODIE_TEST_STORAGE_OPTIONS"])
    source, chk = (os.path.join(root, d) for d in ("in", "chk"))
    spark = (
        spark_builder(master=master, app="hoodie-stream-cluster")
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", "1g")
        .config("spark.cores.max", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "true")  # for its REST API: which executor ran which task
        .config("spark.ui.port", "0")
        .getOrCreate()
    )
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")

    def emit(record):
        with open(out_path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")

    # both executors first, so that the tasks of the first batches can spread
    deadline = time.monotonic() + 90
    while len(sc._jsc.sc().statusTracker().getExecutorInfos()) < 3:  # the driver counts as one
        if time.monotonic() > deadline:
            raise RuntimeError("the two executors did not register with the driver within 90 s")
        time.sleep(0.2)
    api = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"
    emit(
        {
            "started": True,
            "app_id": sc.applicationId,
            "master": sc.master,
            "executors": [
                {"id": e["id"], "hostPort": e["hostPort"], "cores": e["totalCores"]}
                for e in _get_json(api + "/executors")
            ],
        }
    )

    write_batch_file(source, 0, batches[0])
    stream = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(source)
    sink = HoodieStreamSink(base, OPTIONS, storage_options=storage_options)
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", chk).start()
    try:
        for i, events in enumerate(batches):
            if i:
                write_batch_file(source, i, events)
            started = time.monotonic()
            query.processAllAvailable()
            emit(
                {
                    "batch": i,
                    "seconds": round(time.monotonic() - started, 2),
                    "rs": table_rows(rs_read(base, storage_options=storage_options)),
                    "ours": table_rows(HoodieTable(base, storage_options=storage_options).read()),
                }
            )
    finally:
        query.stop()
    stages = []
    for s in _get_json(api + "/stages?details=true"):
        stages.append(
            {
                "stage": s["stageId"],
                "attempt": s["attemptId"],
                "status": s["status"],
                "description": s.get("description") or "",
                "input": s["inputBytes"],
                "shuffle_read": s["shuffleReadBytes"],
                "shuffle_write": s["shuffleWriteBytes"],
                "tasks": [
                    {
                        "partition": t["partitionId"],
                        "attempt": t["attempt"],
                        "executor": t["executorId"],
                        "status": t["status"],
                    }
                    for t in (s.get("tasks") or {}).values()
                ],
            }
        )
    # the workers' own directories while the application runs (a worker deletes its executors' local dirs when
    # the application ends)
    cluster_root = os.environ["HOODIE_TEST_CLUSTER_ROOT"]
    files = [os.path.join(d, n) for d, _dirs, names in os.walk(cluster_root) for n in names]
    emit({"done": True, "query_id": str(query.id), "stages": stages, "cluster_files": files})
    spark.stop()


# -- the test ------------------------------------------------------------------------------------------------------
@pytest.fixture
def cluster(tmp_path):
    if java_executable() is None:
        pytest.fail(
            "Java is missing: the cluster test starts a Spark standalone master and workers with "
            "pyspark's spark-class, which needs `java` (17+) on PATH or JAVA_HOME"
        )
    c = StandaloneCluster(tmp_path / "cluster", workers=2, cores=1, memory="1g", python=sys.executable)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _stage_kind(stage):
    """The role of a stage of the sink's chain: scan+key-by (writes a shuffle), bucket assign (reads and writes
    one), write (reads one, writes none)."""
    if stage["shuffle_read"] and stage["shuffle_write"]:
        return "assign"
    if stage["shuffle_read"]:
        return "write"
    return "scan"


def test_stream_on_standalone_cluster_matches_model(cluster, tmp_path, s3_server):
    root = tmp_path / "run"
    root.mkdir()
    base, storage_options = s3_server.new_table_uri("cluster"), s3_server.options()
    batches = generate_batches(N_BATCHES, seed=SEED)
    (root / "batches.json").write_text(json.dumps(batches, ensure_ascii=False), encoding="utf-8")
    out_path, log_path = root / "driver.jsonl", root / "driver.log"
    env = cluster.client_env()  # SPARK_HOME, SPARK_LOCAL_IP=127.0.0.1, PYSPARK_PYTHON = this interpreter
    env["HOODIE_TEST_STORAGE_OPTIONS"] = json.dumps(storage_options)
    env["HOODIE_TEST_CLUSTER_ROOT"] = cluster.root
    env["TMPDIR"] = str(tmp_path / "driver-tmp")
    os.makedirs(env["TMPDIR"])
    child = None
    try:
        with open(log_path, "wb") as log:
            child = subprocess.Popen(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "driver",
                    cluster.master_url,
                    str(root),
                    str(out_path),
                    base,
                ],
                env=env,
                cwd=str(root),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                rc = child.wait(timeout=CHILD_TIMEOUT)
            except subprocess.TimeoutExpired:
                rc = f"timeout after {CHILD_TIMEOUT}s"
    finally:
        kill_group(child)
    records = (
        [json.loads(line) for line in out_path.read_text(encoding="utf-8").splitlines()] if out_path.exists() else []
    )
    diagnostics = (
        f"\n--- driver log ---\n{tail(log_path, 60)}\n{cluster.logs(20)}\n"
        f"--- executors ---\n{cluster.executor_logs(30)}"
    )
    assert rc == 0 and records and records[-1].get("done"), f"driver exited with {rc}{diagnostics}"

    started = records[0]
    assert started.get("started") and started["master"] == cluster.master_url, started
    executors = sorted(e["id"] for e in started["executors"] if e["id"] != "driver")
    assert executors == ["0", "1"], f"expected two executors, got {started['executors']}"
    assert all(e["cores"] == 1 for e in started["executors"] if e["id"] != "driver"), started["executors"]

    # after every micro-batch: the table as hudi-rs and HoodieTable read it equals the model
    model = TableModel()
    per_batch = [r for r in records if "batch" in r]
    assert [r["batch"] for r in per_batch] == list(range(N_BATCHES))
    for record, events in zip(per_batch, batches):
        model.apply_batch(events)
        expected = model.rows()
        assert record["rs"] == expected, f"hudi-rs after batch {record['batch']}"
        assert record["ours"] == expected, f"HoodieTable after batch {record['batch']}"

    # and read here, after the cluster run
    assert table_rows(rs_read(base, storage_options=storage_options)) == model.rows()
    table = HoodieTable(base, storage_options=storage_options)
    assert table_rows(table.read()) == model.rows()
    done = records[-1]
    instants = table.timeline.commits_timeline()
    assert [i.action for i in instants] == ["deltacommit"] * N_BATCHES
    assert [i.timestamp for i in instants] == rs_completed_instants(base, storage_options)
    batch_ids = []
    for inst in instants:
        extra = table.timeline.read_commit_metadata(inst.timestamp).extra_metadata
        ((identifier, batch_id),) = json.loads(extra["_hudi_streaming_sink_checkpoint"]).items()
        assert identifier == f"default_single_writer-{done['query_id']}"
        batch_ids.append(int(batch_id))
    assert batch_ids == list(range(N_BATCHES))

    # the work was spread: every task ran on one of the two executors, and both ran bucket-assign and write tasks
    ran_on = {}  # (stage, partition, attempt) -> executor
    by_kind = {"scan": set(), "assign": set(), "write": set()}
    for stage in done["stages"]:
        for t in stage["tasks"]:
            assert t["executor"] in executors, f"task {t} of stage {stage['stage']} ran outside the executors"
            ran_on[(stage["stage"], t["partition"], t["attempt"])] = t["executor"]
            if t["status"] == "SUCCESS":
                by_kind[_stage_kind(stage)].add(t["executor"])
    assert by_kind["assign"] == set(executors), f"bucket-assign tasks ran only on {by_kind['assign']}"
    assert by_kind["write"] == set(executors), f"write tasks ran only on {by_kind['write']}"
    # a bucket-assign partition (a fixed set of key groups) changed executor between batches, so an executor
    # found its cached index state behind the table's and had to catch up from the files (the scheduler picks
    # the executor at random for each batch: staying put for all 12 batches has odds ~2^-11)
    homes = {}
    for stage in done["stages"]:
        if _stage_kind(stage) == "assign":
            for t in stage["tasks"]:
                if t["status"] == "SUCCESS":
                    homes.setdefault(t["partition"], set()).add(t["executor"])
    assert any(len(h) > 1 for h in homes.values()), f"assign partitions never changed executor: {homes}"
    # every log file of the table names its writing task (write token): map it to that task's executor
    writers = {}
    for info in storage_for(base, storage_options).list("", recursive=True):
        if info.path.startswith(".hoodie/"):
            continue
        m = LOG_TOKEN.search(info.name)
        if m:
            key = (int(m.group(2)), int(m.group(1)), int(m.group(3)))
            assert key in ran_on, f"{info.name}: no task (stage {key[0]}, partition {key[1]}, attempt {key[2]})"
            writers.setdefault(ran_on[key], []).append(info.name)
    assert sorted(writers) == executors, (
        f"log files written by executors {sorted(writers)} only: { ({k: len(v) for k, v in writers.items()}) }"
    )

    # while the application ran, each worker kept local copies of the index state it served, in the index cache
    # under its own local dirs (copies of files the table holds now among them: older ones may have been pruned
    # since), and wrote nothing of ours anywhere else: its temporary directory holds nothing of the table
    index_names = {info.name for info in storage_for(base, storage_options).list(index_state.INDEX_DIR, recursive=True)}
    for worker in range(2):
        copies = [
            os.path.basename(p).partition("~")[0]
            for p in done["cluster_files"]
            if p.startswith(cluster.local_dir(worker) + os.sep)
            and "hoodie_stream_index_cache" in p
            and INDEX_FILE.match(os.path.basename(p))
        ]
        assert set(copies) & index_names, f"worker {worker} kept no index state copy under {cluster.local_dir(worker)}"
        ours = [
            p
            for p in done["cluster_files"]
            if p.startswith(cluster.temp_dir(worker) + os.sep) and ("hoodie" in p or ".arrow" in p)
        ]
        assert ours == [], f"worker {worker} wrote outside its cache directory: {ours}"


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] != "driver":
        sys.exit("usage: test_stream_cluster.py driver MASTER_URL ROOT_DIR OUT_JSONL TABLE_URI")
    driver_main(*sys.argv[2:])
