"""The README's main job: `python -m hoodie_stream demo` runs a streaming query on local Spark, prints the table's
commits and row count, and leaves a table that hudi-rs reads exactly as a plain-Python model of the generated
CDC events says (event-time ordering, deletes, keys moving city under the global index)."""

import json
import os
import re
import subprocess
import sys

from hoodie_stream.demo import _generate
from oracle import rs_read


def _model(source):
    """id -> (city, ts, fare) after applying the demo's JSON batches in order."""
    rows = {}
    for name in sorted(os.listdir(source)):
        batch = {}
        with open(os.path.join(source, name)) as f:
            for line in f:  # within a batch the greatest ts wins, ties to the later event
                e = json.loads(line)
                if e["id"] not in batch or e["ts"] >= batch[e["id"]]["ts"]:
                    batch[e["id"]] = e
        for key, e in batch.items():
            if key in rows and rows[key][1] > e["ts"]:
                continue
            if e["_hoodie_is_deleted"]:
                rows.pop(key, None)
            else:
                rows[key] = (e["city"], e["ts"], e["fare"])
    return rows


def test_demo_runs_and_its_table_reads_as_the_model(tmp_path):
    base = tmp_path / "orders"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, "-m", "hoodie_stream", "demo", "--path", str(base)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]
    # one per micro-batch: the first into the new table is bulk inserted, the others upserted through the chain
    assert len(re.findall(r"deltacommit\s+BULK_INSERT", done.stdout)) == 1
    assert len(re.findall(r"deltacommit\s+UPSERT", done.stdout)) == 4
    printed = int(re.search(r"^rows: (\d+)", done.stdout, re.M).group(1))

    _generate(str(tmp_path / "source"), 5, 2000)  # the demo's source, same seed
    model = _model(str(tmp_path / "source"))
    got = rs_read(str(base)).to_pylist()
    assert printed == len(got) == len(model)
    assert {r["id"]: (r["city"], r["ts"], r["fare"]) for r in got} == model
