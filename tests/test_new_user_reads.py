"""What a new user met reading tables: Hudi's quick-start begin instant `000`, a table path that does not exist, a
plain-http S3 endpoint without `aws_allow_http`, time travel to before the first commit, `repr(HoodieTable)`, and the
example notebook's work directory. Each is accepted as Hudi accepts it, or said in words naming the path or option."""

import json
import logging
import pathlib

import pytest

from hoodie_stream import HoodieTable
from hoodie_stream.errors import HoodieConfigError, HoodieTableError
from hoodie_stream.format.timeline.instant import parse_instant_time
from hoodie_stream.format.write.writer import HoodieWriter
from hoodie_stream.storage import storage_for
from timed_table import INSTANTS, SCHEMA, values

SECRET = "s3cr3t-Value-Never-Shown"
NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "examples" / "cdc_notebook.ipynb"


# -- begin instants as Hudi takes them ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    ["000", "0", "00000000000000", "00000000000001", "20261123", "20261123204819", "20261123204819500001"],
)
def test_digit_instants_are_kept_as_hudi_compares_them(text):
    assert parse_instant_time(text, "hoodie.datasource.read.begin.instanttime", as_text=True) == text
    if len(text) not in (14, 17):  # time travel takes Hudi's date-time forms only (formatQueryInstant)
        with pytest.raises(HoodieConfigError, match="as_of="):
            parse_instant_time(text, "as_of")


def test_a_malformed_instant_is_still_refused_by_name():
    for text in ["abc", "", "2026-13-01", "20261323204819"]:
        with pytest.raises(HoodieConfigError, match="begin.instanttime="):
            parse_instant_time(text, "hoodie.datasource.read.begin.instanttime", as_text=True)


def test_incremental_from_hudis_quick_start_begin_instant(timed_table):
    table = HoodieTable(timed_table)
    everything = values(table.read("incremental", start=None))
    assert everything == ["a2", "b1", "c1"]
    for start in ["000", "0", "20261123"]:  # all before the first commit, compared as text
        assert values(table.read("incremental", start=start)) == everything, start
    assert values(table.read("incremental", start="000", end=INSTANTS[0])) == ["a1"]
    assert values(table.read("incremental", start=INSTANTS[0] + "1")) == ["a2", "b1", "c1"]  # after it, as text


# -- locations and storage options ----------------------------------------------------------------------------------
def test_a_table_path_that_does_not_exist_is_said_so(tmp_path):
    missing = tmp_path / "no" / "such" / "table"
    with pytest.raises(HoodieTableError) as err:
        HoodieTable(str(missing))
    assert str(err.value) == f"{missing}: the table path does not exist"
    (tmp_path / "empty").mkdir()  # a directory that is there but holds no table keeps its own message
    with pytest.raises(HoodieTableError, match="hoodie.properties file is missing"):
        HoodieTable(str(tmp_path / "empty"))


def test_a_plain_http_endpoint_without_allow_http_names_the_option(monkeypatch):
    monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)
    options = {
        "aws_endpoint_url": "http://user:pw@127.0.0.1:9",
        "aws_access_key_id": "AKIDEXAMPLE",
        "aws_secret_access_key": SECRET,
        "aws_region": "us-east-1",
    }
    storage = storage_for("s3://bucket/orders", options)
    with pytest.raises(HoodieConfigError) as err:
        storage.read(".hoodie/hoodie.properties")
    text = str(err.value)
    assert "s3://bucket/orders" in text and "'aws_allow_http'" in text and "http://127.0.0.1:9" in text, text
    assert SECRET not in text and "pw" not in text and "builder error" not in text
    # with the option (or the client key, or the environment) the endpoint is accepted
    for extra in ({"aws_allow_http": "true"}, {"allow_http": "true"}):
        storage_for("s3://bucket/orders", {**options, **extra}).store  # noqa: B018  (builds the client)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    storage_for("s3://bucket/orders", options).store  # noqa: B018
    storage_for("s3://bucket/orders", {**options, "aws_endpoint_url": "https://127.0.0.1:9"}).store  # noqa: B018


# -- time travel before the first commit ---------------------------------------------------------------------------
def test_time_travel_before_the_first_commit_warns(timed_table, caplog):
    table = HoodieTable(timed_table)
    with caplog.at_level(logging.WARNING, logger="hoodie_stream"):
        assert table.read(as_of="20261123204819499").num_rows == 0
    (record,) = caplog.records
    assert "20261123204819499" in record.getMessage() and INSTANTS[0] in record.getMessage()
    assert "before" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hoodie_stream"):
        assert values(table.read(as_of=INSTANTS[0])) == ["a1"]
    assert not caplog.records


# -- repr -----------------------------------------------------------------------------------------------------------
def test_repr_names_the_table_without_storage_options(timed_table, tmp_path):
    table = HoodieTable(timed_table)
    assert repr(table) == (
        f"HoodieTable({timed_table!r}, name='timed', type=MERGE_ON_READ, latest_commit='{INSTANTS[-1]}')"
    )
    empty = HoodieWriter.create(str(tmp_path / "empty"), table_name="e", record_key_fields=["id"], schema=SCHEMA)
    assert repr(HoodieTable(empty.storage)).endswith("name='e', type=MERGE_ON_READ, latest_commit=None)")


# -- the example notebook --------------------------------------------------------------------------------------------
def _code_cells():
    return ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]


def test_the_notebook_makes_its_work_directory(tmp_path, monkeypatch):
    """The setup cell's `work` lines (the rest starts Spark) run with HOODIE_NOTEBOOK_DIR naming a directory that
    does not exist yet: the directory is there afterwards, so the cells that write files into it work."""
    wanted = tmp_path / "not" / "made" / "yet"
    monkeypatch.setenv("HOODIE_NOTEBOOK_DIR", str(wanted))
    setup = _code_cells()[0]
    lines = [line for line in setup.splitlines() if line.startswith("work")]
    namespace: dict = {}
    exec("import os, pathlib, tempfile\n" + "\n".join(lines), namespace)  # noqa: S102
    assert namespace["work"] == wanted and wanted.is_dir()


def test_the_notebooks_silver_table_keeps_only_paid_orders():
    """The text says the silver table keeps paid orders; its stream marks every other status as a delete."""
    (silver,) = [c for c in _code_cells() if "silver_sink = HoodieStreamSink(" in c]
    assert 'withColumn("_hoodie_is_deleted", F.coalesce(F.col("status") != "PAID", F.lit(True)))' in silver
    assert "paid.writeStream.foreachBatch(silver_sink)" in silver
