import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from cdc_pipeline import ENV_SCRIPT as CDC_ENV_SCRIPT
from cdc_pipeline import CdcEnv, spark_kafka_jars, unique
from hoodie_stream.format.file_group import fs_view
from hoodie_stream.format.timeline import active_timeline as timeline
from hoodie_stream.local_spark import local_session_builder
from locations import Location
from s3_server import s3_server, s3_table  # noqa: F401  (fixtures: an S3-compatible server on loopback, moto)
from timed_table import timed_table  # noqa: F401  (fixture: three commits at known instant times)

SHARED = Path(__file__).resolve().parents[2] / "shared"
FIXTURES = SHARED / "fixtures"
TABLE_ZIPS = FIXTURES / "hudi-tables"
LOG_FILES = FIXTURES / "log-files"


def v6_table_zips():
    return sorted(p for p in TABLE_ZIPS.glob("*.zip") if "-v6_" in p.name)


def v8_table_zips():
    """The fixture tables Hudi 1.0 wrote (table version 8: timeline layout 2)."""
    return sorted(p for p in TABLE_ZIPS.glob("*.zip") if "-v8_" in p.name)


def readable_table_zips():
    """Every fixture table hoodie-stream reads: versions 6 and 8."""
    return v6_table_zips() + v8_table_zips()


def unzip_table(zip_path, dest):
    """Unzip a fixture table into dest and return the table base path (the dir holding .hoodie)."""
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            name = info.filename
            if name.startswith("__MACOSX/") or name.endswith(".DS_Store"):
                continue
            zf.extract(info, dest)
    hoodies = [p.parent for p in Path(dest).rglob(".hoodie") if p.is_dir() and p.parent.name != "metadata"]
    assert len(hoodies) == 1, f"{zip_path}: expected one table, found {hoodies}"
    return hoodies[0]


@pytest.fixture
def fixture_table(tmp_path):
    """Factory: fixture_table('trips-mor-avro-v6_trips_8i3d') -> Path of a fresh copy of that table."""

    def make(name):
        zip_path = TABLE_ZIPS / (name if name.endswith(".zip") else name + ".zip")
        return unzip_table(zip_path, tmp_path / Path(name).stem)

    return make


@pytest.fixture
def shared(monkeypatch):
    """The process-wide caches on for local tables too (they are on for object stores only by default)."""
    monkeypatch.setattr(timeline, "SHARED", True)
    monkeypatch.setattr(fs_view, "SHARED", True)
    yield
    timeline.invalidate()
    fs_view.invalidate()


@pytest.fixture(params=["local", "s3"])
def location(request, tmp_path):
    """A fresh table location (tests/locations.py): on local disk, then on the session's S3 test server."""
    if request.param == "local":
        return Location(str(tmp_path / "t"))
    server = request.getfixturevalue("s3_server")
    return Location(server.new_table_uri("t"), server.options(), "s3")


# Spark settings of every test session, on top of local_session_builder's (UI off, UTC, shuffle partitions = cores)
TEST_SPARK_CONF = {
    "spark.driver.memory": "1g",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
}
if spark_kafka_jars():  # Spark's Kafka source, for the cdc_real tests (scripts/cdc-env.sh install copies them)
    TEST_SPARK_CONF["spark.jars"] = ",".join(spark_kafka_jars())


def spark_builder(master="local[2]", app="hoodie-stream-tests", conf=None):
    """A SparkSession builder whose Python workers run this interpreter (the project's virtualenv): the shared
    local builder with the tests' settings; also used by the test child processes (crash child, cluster driver)."""
    return local_session_builder(master, app, {**TEST_SPARK_CONF, **(conf or {})})


@pytest.fixture(scope="session")
def java_hudi():
    """Factory: java_hudi("0.15.0" | "1.2.0") -> that Hudi version's oracle (tests/java_hudi.py), one JVM per version,
    started on first use and stopped after the last `java_hudi` test of the run (pytest_runtest_teardown below).
    Fails with the setup command when the oracle is not set up."""
    import java_hudi as jh

    missing = jh.oracle_missing()
    if missing:
        pytest.fail(missing)
    yield jh.oracle
    jh.close_oracles()


JAVA_HUDI_MODULE_PREFIX = "test_java_hudi_"  # the java_hudi tests live in these modules (checked at collection)
CDC_REAL_MODULE_PREFIX = "test_cdc_real_"  # the real CDC pipeline's tests (marked cdc_real), beside them
SERVICE_MODULE_PREFIXES = (JAVA_HUDI_MODULE_PREFIX, CDC_REAL_MODULE_PREFIX)
CDC_ENV_DIR = Path(__file__).resolve().parent.parent / ".cdc-env" / "tests"


@pytest.fixture(scope="session")
def cdc_env():
    """The CDC environment (tests/cdc_pipeline.py: PostgreSQL, Kafka, Kafka Connect with Debezium) under
    .cdc-env/tests, started fresh on first use and stopped after the last `cdc_real` test (pytest_runtest_teardown
    below). Fails naming the set-up command when the jars are not there."""
    global _cdc_env
    if not spark_kafka_jars():
        pytest.fail("the CDC environment's jars are missing: run `bash scripts/cdc-env.sh install`")
    if _cdc_env is None:
        subprocess.run(["bash", str(CDC_ENV_SCRIPT), "stop", str(CDC_ENV_DIR)], capture_output=True, timeout=180)
        shutil.rmtree(CDC_ENV_DIR, ignore_errors=True)
        try:
            _cdc_env = CdcEnv(CDC_ENV_DIR)
        except RuntimeError as err:
            pytest.fail(str(err))
    yield _cdc_env
    _stop_cdc_env()


_cdc_env = None


@pytest.fixture
def pg_schema(cdc_env):
    """A fresh schema in the CDC environment's database (dropped after the test)."""
    name = unique("s")
    with cdc_env.sql() as db:
        db.execute(f"CREATE SCHEMA {name}")
    yield name
    with cdc_env.sql() as db:
        db.execute(f"DROP SCHEMA {name} CASCADE")


def _stop_cdc_env():
    global _cdc_env
    if _cdc_env is not None:
        _cdc_env.stop()
        _cdc_env = None
        shutil.rmtree(CDC_ENV_DIR, ignore_errors=True)


def pytest_xdist_make_scheduler(config, log):
    """With pytest-xdist's `--dist loadfile` (scripts/run-tests.sh): whole modules per worker, as loadfile does, and
    every `test_java_hudi_*` and `test_cdc_real_*` module in one unit, so one worker starts the Hudi oracles' JVMs and
    the CDC environment, once, and the CDC tests can check with Java Hudi too. (xdist's own
    `loadgroup` does not group under pytest 9: it renames an attribute pytest no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class JavaHudiTogether(LoadFileScheduling):
        def _split_scope(self, nodeid):
            scope = super()._split_scope(nodeid)
            return "java_hudi" if scope.rpartition("/")[2].startswith(SERVICE_MODULE_PREFIXES) else scope

    return JavaHudiTogether(config, log)


@pytest.hookimpl(trylast=True)  # after the test's fixtures are torn down (they may still use the services)
def pytest_runtest_teardown(item, nextitem):
    """The Hudi oracles' JVMs (1-1.5 GB each) stop once no `java_hudi` test follows (they run together, by module);
    the CDC environment once no `cdc_real` test follows."""
    if item.get_closest_marker("java_hudi") and (nextitem is None or not nextitem.get_closest_marker("java_hudi")):
        import java_hudi as jh

        jh.close_oracles()
    if item.get_closest_marker("cdc_real") and (nextitem is None or not nextitem.get_closest_marker("cdc_real")):
        _stop_cdc_env()


@pytest.fixture(scope="session")
def spark():
    """The one shared local SparkSession of the test session."""
    session = spark_builder().getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# -- markers -------------------------------------------------------------------------------------------------------
# `spark`: the test needs the shared SparkSession (added below to every test that uses the `spark` fixture, directly or
# through other fixtures) or starts Spark in processes of its own (listed here by module). `slow`: over ~20 s on
# a 2-core machine (measured with --durations); whole modules or single tests by name. A module may also mark itself
# (`pytestmark`, as test_stream_crash does).
SPARK_PROCESS_MODULES = {
    "test_demo",  # runs `python -m hoodie_stream demo`
    "test_stream_cluster",  # a standalone master, two workers and a driver process
    "test_compaction_crash",
}
SLOW_MODULES = {"test_demo", "test_stream_cluster", "test_compaction_crash"}
SLOW_TESTS = {  # "module::test name" (without parameters)
    "test_partition_paths::test_property_sink_partitions_land_inside_or_refuse_the_batch",
    "test_compaction::test_streaming_query_with_async_compaction_every_3_commits",
    "test_compaction::test_stop_without_waiting_cancels_the_running_compaction",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        if item.get_closest_marker("java_hudi") and not module.startswith(SERVICE_MODULE_PREFIXES):
            raise pytest.UsageError(
                f"{item.nodeid}: a java_hudi test belongs in a {JAVA_HUDI_MODULE_PREFIX}* or {CDC_REAL_MODULE_PREFIX}* "
                "module (one worker runs them)"
            )
        if module.startswith(CDC_REAL_MODULE_PREFIX):
            item.add_marker(pytest.mark.cdc_real)
        if "spark" in getattr(item, "fixturenames", ()) or module in SPARK_PROCESS_MODULES:
            item.add_marker(pytest.mark.spark)
        name = getattr(item, "originalname", item.name)
        if module in SLOW_MODULES or f"{module}::{name}" in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
