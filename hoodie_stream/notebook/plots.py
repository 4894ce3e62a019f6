"""Plots of a table's health, each a matplotlib Figure (shown by Jupyter, or `fig.savefig(...)`).

    plot_commits(table)            records per commit (inserts / updates / deletes) and commits per minute over time
    plot_file_sizes(table)         base file sizes against the target file size (hoodie.parquet.max.file.size)
    plot_log_files(table)          log files per file slice
    plot_compaction_backlog(table) delta commits since the last compaction, compactions done and pending

`table` is a HoodieTable or a table path. matplotlib is the optional extra `pip install "hoodie-stream[notebook]"`;
it is imported when a plot is made (the Agg renderer: no display needed), never by `import hoodie_stream`.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..format.hoodie_table import HoodieTable
from ..format.timeline.instant import COMMIT, COMPACTION, COMPLETED, DELTA_COMMIT
from ..format.views.table_html import human_bytes

DEFAULT_TARGET_FILE_SIZE = 120 * 1024 * 1024  # hoodie.parquet.max.file.size's default
MB = 1024 * 1024
_INSERTS, _UPDATES, _DELETES = "#4c72b0", "#55a868", "#c44e52"


def figure_class() -> Any:
    """matplotlib's Figure class, or ImportError saying which extra to install."""
    try:
        return importlib.import_module("matplotlib.figure").Figure
    except ImportError as e:
        raise ImportError(
            f'the plots need matplotlib ({e}); install the notebook extra: pip install "hoodie-stream[notebook]"'
        ) from e


def _table(table: HoodieTable | str) -> HoodieTable:
    return table if isinstance(table, HoodieTable) else HoodieTable(table)


def _completed_commits(commits: pa.Table) -> pa.Table:
    """Completed commit-like instants (those with figures) of `HoodieTable.commits()`, with a `time` column: the
    completion time, else the requested time; in the order they completed (an async compaction completes after
    delta commits requested later)."""
    done = commits.filter(pc.and_(pc.equal(commits["state"], COMPLETED), pc.is_valid(commits["operation"])))
    done = done.append_column("time", pc.coalesce(done["completed_time"], done["requested_time"]))
    return done.sort_by([("time", "ascending")])


def _empty(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what}", ha="center", va="center", transform=ax.transAxes)


_UNITS = (("second", 1), ("minute", 60), ("hour", 3600), ("day", 86400))


def rate_unit(times: list[Any]) -> str:
    """The unit of the commit rate: the shortest whose buckets number at most 120 over the commits' time span."""
    span = (max(times) - min(times)).total_seconds() if times else 0
    return next((unit for unit, seconds in _UNITS if span / seconds <= 120), "day")


def plot_commits(table: HoodieTable | str, per: str | None = None) -> Any:
    """Records per commit (stacked inserts, updates, deletes) and commits per `per` ("second", "minute", "hour",
    "day"; by default the one that suits the time span) over time."""
    table = _table(table)
    fig = figure_class()(figsize=(9, 5.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    done = _completed_commits(table.commits())
    fig.suptitle(f"commits of {table.config.table_name}")
    if done.num_rows == 0:
        _empty(top, "completed commit")
        return fig
    times = done["time"].to_pylist()
    inserts, updates, deletes = (done[c].to_numpy(zero_copy_only=False) for c in _RECORD_COLUMNS)
    width = _bar_width(times)
    top.bar(times, inserts, width, color=_INSERTS, label="inserted")
    top.bar(times, updates, width, bottom=inserts, color=_UPDATES, label="updated")
    top.bar(times, deletes, width, bottom=inserts + updates, color=_DELETES, label="deleted")
    top.set_ylabel("records per commit")
    top.legend(loc="upper left", fontsize="small")
    per = per or rate_unit(times)
    buckets = pc.floor_temporal(done["time"], unit=per)
    counts = pa.table({"t": buckets}).group_by("t").aggregate([("t", "count")]).sort_by("t")
    seconds = dict(_UNITS)[per]
    bottom.bar(counts["t"].to_pylist(), counts["t_count"].to_pylist(), seconds / 86400 * 0.9, align="edge")
    bottom.set_ylabel(f"commits per {per}")
    bottom.set_xlabel("time (UTC)")
    bottom.set_ylim(bottom=0)
    return fig


_RECORD_COLUMNS = ("records_inserted", "records_updated", "records_deleted")


def _bar_width(times: list[Any]) -> float:
    """A bar width in days (matplotlib's date unit): most of the shortest gap between commits."""
    if len(times) < 2:
        return 1 / 86400
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:]) if b > a]
    return max(min(gaps, default=1.0) * 0.8, 0.001) / 86400


def plot_file_sizes(table: HoodieTable | str, target_size: int | None = None, bins: int = 30) -> Any:
    """Histogram of the latest slices' base file sizes (MiB) against the target size (`target_size` bytes: the
    writer's hoodie.parquet.max.file.size, 120 MiB unless given) and the slices' total sizes with their logs."""
    table = _table(table)
    target = target_size or DEFAULT_TARGET_FILE_SIZE
    fig = figure_class()(figsize=(8, 4), layout="constrained")
    ax = fig.subplots()
    slices = table.file_slices()
    base = slices.filter(pc.is_valid(slices["base_file"]))
    ax.set_title(f"file sizes of {table.config.table_name} ({slices.num_rows} file groups)")
    if slices.num_rows == 0:
        _empty(ax, "file slice")
        return fig
    sizes = pc.divide(pc.cast(base["base_file_size"], pa.float64()), MB).to_numpy(zero_copy_only=False)
    totals = pc.divide(pc.cast(slices["total_size"], pa.float64()), MB).to_numpy(zero_copy_only=False)
    top = max(float(totals.max()), target / MB) * 1.05
    edges = [top * i / bins for i in range(bins + 1)]
    ax.hist(totals, bins=edges, color="#dd8452", alpha=0.5, label="slice with its log files")
    ax.hist(sizes, bins=edges, color="#4c72b0", alpha=0.8, label="base file")
    ax.axvline(target / MB, color="#c44e52", linestyle="--", label=f"target {human_bytes(target)}")
    ax.set_xlabel("MiB")
    ax.set_ylabel("file slices")
    ax.legend(fontsize="small")
    return fig


def plot_log_files(table: HoodieTable | str) -> Any:
    """How many latest file slices have 0, 1, 2 ... log files (what a snapshot read merges)."""
    table = _table(table)
    fig = figure_class()(figsize=(7, 3.5), layout="constrained")
    ax = fig.subplots()
    slices = table.file_slices()
    ax.set_title(f"log files per file slice of {table.config.table_name}")
    if slices.num_rows == 0:
        _empty(ax, "file slice")
        return fig
    counts = pa.table({"n": slices["log_files"]}).group_by("n").aggregate([("n", "count")]).sort_by("n")
    ax.bar(counts["n"].to_pylist(), counts["n_count"].to_pylist(), color="#4c72b0")
    ax.set_xlabel("log files in the slice")
    ax.set_ylabel("file slices")
    return fig


def delta_commits_since_compaction(actions: pa.ChunkedArray | pa.Array) -> list[int]:
    """After each completed instant (actions in timeline order), the delta commits since the last compaction (a
    completed `commit` on a merge-on-read table)."""
    deltas = np.cumsum(pc.equal(actions, DELTA_COMMIT).to_numpy(zero_copy_only=False))
    at_compaction = np.where(pc.equal(actions, COMMIT).to_numpy(zero_copy_only=False), deltas, 0)
    return (deltas - np.maximum.accumulate(at_compaction)).tolist() if len(deltas) else []


def plot_compaction_backlog(table: HoodieTable | str) -> Any:
    """Delta commits since the last compaction after each commit, with the compactions completed (green) and the
    plans still pending (red) marked at their instant times."""
    table = _table(table)
    fig = figure_class()(figsize=(8, 3.5), layout="constrained")
    ax = fig.subplots()
    ax.set_title(f"compaction backlog of {table.config.table_name}")
    commits = table.commits()
    done = _completed_commits(commits)
    pending = commits.filter(
        pc.and_(pc.equal(commits["action"], COMPACTION), pc.not_equal(commits["state"], COMPLETED))
    )
    if done.num_rows == 0:
        _empty(ax, "completed commit")
        return fig
    actions = done["action"].to_pylist()
    times = done["time"].to_pylist()
    since = delta_commits_since_compaction(done["action"])
    ax.step(times, since, where="post", color="#333333", label="delta commits since the last compaction")
    for t, a in zip(times, actions):
        if a == COMMIT:
            ax.axvline(t, color="#55a868", alpha=0.7)
    for t in pending["requested_time"].to_pylist():
        if t is not None:
            ax.axvline(t, color="#c44e52", linestyle="--", alpha=0.8)
    ax.plot([], [], color="#55a868", label="compaction completed")
    ax.plot([], [], color="#c44e52", linestyle="--", label=f"compaction pending ({pending.num_rows})")
    ax.set_ylabel("delta commits")
    ax.set_xlabel("time (UTC)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small", loc="upper left")
    return fig
