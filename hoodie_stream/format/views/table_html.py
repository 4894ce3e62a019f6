"""The HTML view of a table in a notebook (`HoodieTable._repr_html_`): its configuration, file groups and slices,
log files per slice, last commit and its age, pending table services and the delta commits since the last
compaction, then its newest instants."""

from __future__ import annotations

import datetime
import html
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..file_group.fs_view import FileSystemView
from ..timeline.instant import CLEAN, COMMIT, COMPACTION, COMPLETED, DELTA_COMMIT
from .table_info import commits

if TYPE_CHECKING:
    from ..read.table_reader import TableReader

RECENT_INSTANTS = 10
_RECENT_COLUMNS = (
    "instant",
    "action",
    "state",
    "operation",
    "records_inserted",
    "records_updated",
    "records_deleted",
    "files_written",
    "bytes_written",
    "batch_id",
)


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


def human_age(seconds: float) -> str:
    """75 -> '1 min 15 s ago'."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h ago"
    if hours:
        return f"{hours} h {minutes} min ago"
    if minutes:
        return f"{minutes} min {secs} s ago"
    return f"{secs} s ago"


def table_facts(table: TableReader, now: datetime.datetime | None = None) -> dict[str, Any]:
    """The figures the HTML view shows, by name (also what tests and the live view check)."""
    cfg = table.config
    timeline = table.timeline
    instants = commits(table)
    view = FileSystemView(table.storage, timeline)
    groups = list(view.file_groups()) if timeline.commits_timeline() else []
    slices = [view.slices(g) for g in groups]
    latest = [s[-1] for s in slices if s]
    logs_per_slice = [len(s.log_files) for s in latest]
    completed = instants.filter(pc.equal(instants["state"], COMPLETED))
    commit_like = completed.filter(pc.is_valid(completed["operation"]))
    last = commit_like.slice(commit_like.num_rows - 1).to_pylist()[0] if commit_like.num_rows else None
    compacted = completed.filter(pc.equal(completed["action"], COMMIT))["instant"].to_pylist()
    last_compaction = compacted[-1] if compacted else None
    deltas = completed.filter(pc.equal(completed["action"], DELTA_COMMIT))["instant"].to_pylist()
    now = now or datetime.datetime.now(datetime.timezone.utc)
    age = None
    if last is not None:
        when = last["completed_time"] or last["requested_time"]
        age = (now - when).total_seconds() if when is not None else None
    return {
        "name": cfg.table_name,
        "path": table.path,
        "table_type": cfg.table_type,
        "version": cfg.props.get("hoodie.table.version"),
        "record_key_fields": cfg.record_key_fields,
        "precombine_field": cfg.precombine_field,
        "partition_fields": cfg.partition_fields,
        "partitions": len({g.partition for g in groups}),
        "file_groups": len(groups),
        "file_slices": sum(len(s) for s in slices),
        "total_size": sum(sum(g.sizes.values()) for g in groups),
        "latest_slices_size": sum(s.file_size for s in latest),
        "log_files": sum(logs_per_slice),
        "log_files_per_slice_max": max(logs_per_slice, default=0),
        "log_files_per_slice_mean": (sum(logs_per_slice) / len(logs_per_slice)) if logs_per_slice else 0.0,
        "last_commit": last,
        "last_commit_age_seconds": age,
        "pending_compactions": [i.timestamp for i in timeline.pending([COMPACTION])],
        "pending_cleans": [i.timestamp for i in timeline.pending([CLEAN])],
        "last_compaction": last_compaction,
        "delta_commits_since_compaction": sum(1 for t in deltas if last_compaction is None or t > last_compaction),
        "recent": instants.slice(max(0, instants.num_rows - RECENT_INSTANTS)),
    }


def table_html(table: TableReader, now: datetime.datetime | None = None) -> str:
    """The HTML view of a table."""
    f = table_facts(table, now)
    last = f["last_commit"]
    if last is None:
        last_text = "none"
    else:
        last_text = f"{last['instant']} ({last['action']}, {last['operation']})"
        if f["last_commit_age_seconds"] is not None:
            last_text += f", {human_age(f['last_commit_age_seconds'])}"
    rows = [
        ("table type", f["table_type"]),
        ("table version", f["version"] or "-"),
        ("record key fields", ", ".join(f["record_key_fields"]) or "-"),
        ("precombine field", f["precombine_field"] or "-"),
        ("partition fields", ", ".join(f["partition_fields"]) or "-"),
        ("total size", f"{human_bytes(f['total_size'])} (latest slices {human_bytes(f['latest_slices_size'])})"),
        ("partitions", f["partitions"]),
        ("file groups", f["file_groups"]),
        ("file slices", f["file_slices"]),
        (
            "log files per slice",
            f"{f['log_files_per_slice_mean']:.1f} mean, {f['log_files_per_slice_max']} max "
            f"({f['log_files']} log files in the latest slices)",
        ),
        ("last commit", last_text),
        ("pending compactions", _instants(f["pending_compactions"])),
        ("pending cleans", _instants(f["pending_cleans"])),
        ("last compaction", f["last_compaction"] or "none"),
        ("delta commits since the last compaction", f["delta_commits_since_compaction"]),
    ]
    body = "".join(
        f"<tr><th style='text-align:left'>{html.escape(str(k))}</th><td style='text-align:left'>"
        f"{html.escape(str(v))}</td></tr>"
        for k, v in rows
    )
    title = f"Hudi table <b>{html.escape(f['name'])}</b> at <code>{html.escape(f['path'])}</code>"
    return (
        f"<div class='hoodie-table'><p>{title}</p><table>{body}</table>"
        f"<p>newest instants</p>{arrow_html(f['recent'], _RECENT_COLUMNS)}</div>"
    )


def arrow_html(table: pa.Table, columns: tuple[str, ...] | None = None) -> str:
    """A small Arrow table as an HTML table (nulls empty)."""
    if columns is not None:
        table = table.select([c for c in columns if c in table.column_names])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.column_names)
    body = "".join(
        "<tr>" + "".join(f"<td>{'' if v is None else html.escape(str(v))}</td>" for v in row.values()) + "</tr>"
        for row in table.to_pylist()
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _instants(times: list[str]) -> str:
    return f"{len(times)}" + (f" ({', '.join(times)})" if times else "")
