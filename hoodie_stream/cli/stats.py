"""`stats`: hudi-cli's `stats wa` (write amplification) and `stats filesizes`, plus the byte amplification.

- records: per completed commit, delta commit and replace commit, records written (numWrites) over records
  updated (numUpdateWrites), as hudi-cli's `stats wa` ("0" when nothing was updated), and the total;
- bytes: bytes written by every completed instant of the active timeline (totalWriteBytes) over the bytes of the
  table's latest file slices (what a reader reads): how many times the table's current data was written;
- file sizes: per instant (the instant in each data file's name, as hudi-cli groups them) and for all data files
  of the table: min, 10th percentile, median, mean, 95th percentile, max, number of files, standard deviation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..format.file_group.file_names import parse_base_file_name, parse_log_file_name
from ..format.file_group.fs_view import list_partitions
from ..format.hoodie_table import HoodieTable
from ..format.views.table_info import file_slices
from .output import text_table
from .show import completed_commits

SIZE_COLUMNS = ["instant", "min", "p10", "p50", "avg", "p95", "max", "files", "std_dev"]


def _ratio(num: int, den: int) -> float:
    return round(num / den, 2) if den > 0 else 0.0


def write_amplification(table: HoodieTable) -> dict[str, Any]:
    info = completed_commits(table)
    written = pc.fill_null(info["records_written"], 0).to_pylist()
    updated = pc.fill_null(info["records_updated"], 0).to_pylist()
    rows = [
        {
            "instant": ts,
            "action": action,
            "records_updated": u,
            "records_written": w,
            "write_amplification": _ratio(w, u),
        }
        for ts, action, u, w in zip(info["instant"].to_pylist(), info["action"].to_pylist(), updated, written)
    ]
    total = {
        "instant": "Total",
        "action": "",
        "records_updated": sum(updated),
        "records_written": sum(written),
        "write_amplification": _ratio(sum(written), sum(updated)),
    }
    bytes_written = int(pc.sum(pc.fill_null(info["bytes_written"], 0)).as_py() or 0)
    table_bytes = int(pc.sum(file_slices(table)["total_size"]).as_py() or 0)
    return {
        "commits": rows,
        "total": total,
        "bytes_written": bytes_written,
        "table_bytes": table_bytes,
        "bytes_write_amplification": _ratio(bytes_written, table_bytes),
    }


def data_file_sizes(table: HoodieTable) -> pa.Table:
    """(partition, name, instant, kind, size) of every base and log file under the table (outside .hoodie); kind is
    base, log or cdc (a log file of logged changes)."""
    rows: dict[str, list[Any]] = {"partition": [], "name": [], "instant": [], "kind": [], "size": []}
    for partition in list_partitions(table.storage):
        for info in table.storage.list(partition):
            base = parse_base_file_name(info.name)
            log = None if base else parse_log_file_name(info.name)
            if base is None and log is None:
                continue
            rows["partition"].append(partition)
            rows["name"].append(info.name)
            rows["instant"].append(base.instant if base else log.base_instant if log else None)
            rows["kind"].append("base" if base else "cdc" if log is not None and log.is_cdc else "log")
            rows["size"].append(int(info.size))
    return pa.table(rows, schema=pa.schema([(k, pa.int64() if k == "size" else pa.string()) for k in rows]))


def _histogram(instant: str, sizes: np.ndarray) -> dict[str, Any]:
    p10, p50, p95 = (float(v) for v in np.percentile(sizes, [10, 50, 95]))
    return {
        "instant": instant,
        "min": int(sizes.min()),
        "p10": round(p10, 1),
        "p50": round(p50, 1),
        "avg": round(float(sizes.mean()), 1),
        "p95": round(p95, 1),
        "max": int(sizes.max()),
        "files": len(sizes),
        "std_dev": round(float(sizes.std()), 1),
    }


def file_size_stats(files: pa.Table) -> list[dict[str, Any]]:
    """hudi-cli's `stats filesizes`: one row per instant, then ALL (no row when the table holds no data file)."""
    if files.num_rows == 0:
        return []
    sizes = files["size"].to_numpy()
    instants = np.asarray(files["instant"].to_pylist(), dtype=object)
    rows = [_histogram(ts, sizes[instants == ts]) for ts in sorted(set(instants))]
    return rows + [_histogram("ALL", sizes)]


def table_stats(table: HoodieTable) -> dict[str, Any]:
    files = data_file_sizes(table)
    return {
        "table": table.path,
        "write_amplification": write_amplification(table),
        "file_sizes": file_size_stats(files),
        "data_files": files.num_rows,
        "data_bytes": int(pc.sum(files["size"]).as_py() or 0),
    }


def stats_text(stats: dict[str, Any]) -> str:
    wa = stats["write_amplification"]
    return "\n".join(
        [
            "write amplification (records written / records updated, per commit, as hudi-cli's `stats wa`):",
            text_table(wa["commits"] + [wa["total"]]),
            "",
            f"bytes written by the active timeline: {wa['bytes_written']}; bytes of the latest file slices: "
            f"{wa['table_bytes']}; bytes write amplification: {wa['bytes_write_amplification']:.2f}",
            "",
            f"file sizes in bytes ({stats['data_files']} data files, {stats['data_bytes']} bytes):",
            text_table(stats["file_sizes"], SIZE_COLUMNS),
        ]
    )
