"""The example notebook (examples/cdc_notebook.ipynb) run headless by a real Jupyter kernel (nbclient): every cell
runs without an error, the table's HTML view and the live view of the query show the table's own figures (read
here with HoodieTable), Spark, HoodieTable and the notebook's model count the same rows, and the plots are images."""

import base64
import pathlib
import re

import pytest

from hoodie_stream import HoodieTable

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "examples" / "cdc_notebook.ipynb"


def _outputs(cell):
    return cell.get("outputs", []) if cell.cell_type == "code" else []


def _cell(nb, source):
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.strip() == source]
    return cell


def _html(cell):
    return [o["data"]["text/html"] for o in _outputs(cell) if "text/html" in o.get("data", {})]


def _text(cell):
    return "".join(o.get("text", "") for o in _outputs(cell) if o.output_type == "stream")


def test_the_example_notebook_runs_headless_and_shows_the_tables_figures(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    monkeypatch.setenv("HOODIE_NOTEBOOK_DIR", str(tmp_path))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells for o in _outputs(c) if o.output_type == "error"]
    assert not errors, errors

    table = HoodieTable(str(tmp_path / "lake" / "shop_public_orders"))
    commits = table.commits()
    completed = [r for r in commits.to_pylist() if r["state"] == "completed"]
    assert len(completed) >= 2
    last = completed[-1]["instant"]
    slices = table.file_slices()

    (view,) = _html(_cell(nb, 'path = str(lake / "shop_public_orders")\ntable = HoodieTable(path)\ntable'))
    assert "MERGE_ON_READ" in view and last in view
    assert str(slices.num_rows) in view  # file groups

    live = [h for c in nb.cells if "watch(bronze, bronze_sink)" in c.source for h in _html(c)]
    assert live, "the live view showed nothing"
    assert "shop_public_orders" in live[-1] or "lake" in live[-1]

    counts = re.findall(r"rows in [^:]+: (\d+)", _text(_cell(nb, _spark_read_source(nb))))
    assert len(counts) == 3 and len(set(counts)) == 1 and int(counts[0]) == table.read().num_rows > 0, counts

    images = [
        base64.b64decode(o["data"]["image/png"])
        for c in nb.cells
        for o in _outputs(c)
        if "image/png" in o.get("data", {})
    ]
    assert len(images) >= 4 and all(i.startswith(b"\x89PNG") for i in images)
    silver = re.search(r"silver rows: (\d+) \| statuses: (.*)", "".join(_text(c) for c in nb.cells))
    assert silver and silver.group(2) in ("['PAID']", "[]"), "the silver table keeps only paid orders"
    text = "".join(_text(c) for c in nb.cells)
    deleted = re.search(r"orders deleted upstream: (\d+)", text)
    assert deleted and int(deleted.group(1)) > 0, "the changelog shows deletes"
    replica = re.search(
        r"replica rows: (\d+) \| bronze rows: (\d+) \| same keys: (\w+) \| deleted orders in the replica: (\d+)", text
    )
    assert replica and replica.group(1) == replica.group(2) == str(table.read().num_rows), replica
    assert replica.group(3) == "True" and replica.group(4) == "0", "the replica drops the orders deleted upstream"


def _spark_read_source(nb):
    (source,) = [
        c.source.strip() for c in nb.cells if c.cell_type == "code" and "orders = spark.read.format" in c.source
    ]
    return source
