import zipfile
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
FIXTURES = SHARED / "fixtures"
TABLE_ZIPS = FIXTURES / "hudi-tables"
LOG_FILES = FIXTURES / "log-files"


def v6_table_zips():
    return sorted(p for p in TABLE_ZIPS.glob("*.zip") if "-v6_" in p.name)


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


def spark_builder(master="local[2]", app="hoodie-stream-tests"):
    """A SparkSession builder whose Python workers run this interpreter (the project's virtualenv)."""
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master(master).appName(app)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.memory", "1g")
            .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true"))


@pytest.fixture(scope="session")
def spark():
    """The one shared local SparkSession of the test session."""
    session = spark_builder().getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
