"""The live view of a streaming query writing through a HoodieStreamSink: `watch(query, sink)`.

In a notebook (IPython with a kernel) it shows one display, updated in place after each micro-batch, with the
latest batch's figures (`sink.metrics()` and the query's progress: rows in, inserts / updates / deletes, bytes
and files written, seconds per stage, flushes, pending compactions, the source's lag) and a small chart of the
records written by the recent batches. Elsewhere it prints one line per micro-batch. The updates come from a
StreamingQueryListener: the listener only hands the progress to a thread of its own, which renders; the query
never waits for the view.
"""

from __future__ import annotations

import html
import importlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from ..format.views.table_html import human_bytes
from ..streaming_sink.batch_metrics import FLUSH_CAUSES, STAGES, offsets_behind
from ..streaming_sink.stage_times import CHAIN_STAGES

log = logging.getLogger("hoodie_stream.notebook")
CHART_BATCHES = 30


def ipython_display() -> Any:
    """IPython.display (its `display` and `HTML`)."""
    return importlib.import_module("IPython.display")


def in_notebook() -> bool:
    """Whether this runs in an IPython kernel (Jupyter, VS Code...), where rich displays show."""
    try:
        ipython = importlib.import_module("IPython").get_ipython()
    except ImportError:
        return False
    return ipython is not None and getattr(ipython, "kernel", None) is not None


def _progress_figures(progress: Any) -> dict[str, Any]:
    if progress is None:
        return {}
    return {
        "batch_id": getattr(progress, "batchId", None),
        "rows_in": getattr(progress, "numInputRows", None),
        "input_rows_per_second": getattr(progress, "inputRowsPerSecond", None),
        "processed_rows_per_second": getattr(progress, "processedRowsPerSecond", None),
        "source_offsets_behind": offsets_behind(progress),
    }


class Watch:
    """The view of one query; `stop()` ends it (it also ends with the query)."""

    def __init__(self, query: Any, sink: Any, out: Callable[[str], None] | None = None, notebook: bool | None = None):
        self.query = query
        self.sink = sink
        self.notebook = in_notebook() if notebook is None else notebook
        self.out = out or print
        self.progress: Any = None  # the StreamingQueryProgress shown
        self.updates = 0  # renders done
        self.ended = False
        self._handle: Any = None
        self._pending: queue.Queue = queue.Queue()  # (progress or None, ended) from the listener
        self._thread = threading.Thread(target=self._render_loop, name="hoodie-stream-watch", daemon=True)
        self._listener: Any = None
        self._streams: Any = None

    # -- what is shown --------------------------------------------------------------------------------------
    def latest(self) -> dict[str, Any]:
        """The figures of the latest micro-batch: the sink's row for it, completed by the query's progress."""
        row: dict[str, Any] = {}
        if self.sink is not None:
            rows = per_batch(self.sink.metrics().to_pylist())
            wanted = getattr(self.progress, "batchId", None)
            matching = [r for r in rows if wanted is None or r["batch_id"] == wanted]
            row = dict((matching or rows or [{}])[-1])
        for key, value in _progress_figures(self.progress).items():
            if value is not None and (key != "batch_id" or row.get(key) is None):
                row[key] = value  # the progress of this batch (the sink's row may not have it yet)
        return row

    def text(self) -> str:
        """One line of the latest micro-batch."""
        r = self.latest()
        if not r:
            return "hoodie-stream: no micro-batch yet"
        parts = [f"batch {r.get('batch_id')}"]
        if r.get("instant"):
            parts.append(f"instant {r['instant']}")
        if r.get("rows_in") is not None:
            parts.append(f"{r['rows_in']} rows in")
        if r.get("records_written") is not None:
            parts.append(
                f"{r['records_inserted']} inserts, {r['records_updated']} updates, {r['records_deleted']} deletes, "
                f"{r['files_written']} files, {human_bytes(r['bytes_written'] or 0)}"
            )
        if r.get("batch_seconds") is not None:
            stages = ", ".join(f"{s} {r[f'{s}_seconds']:.2f}" for s in STAGES if r.get(f"{s}_seconds") is not None)
            parts.append(f"{r['batch_seconds']:.2f} s ({stages})")
        if r.get("pending_compactions") is not None:
            parts.append(f"{r['pending_compactions']} pending compactions")
        if r.get("source_offsets_behind") is not None:
            parts.append(f"lag {r['source_offsets_behind']} offsets")
        return "hoodie-stream: " + ", ".join(parts)

    def html(self) -> str:
        """The display: the latest figures and a chart of the recent batches."""
        r = self.latest()
        title = f"hoodie-stream: {html.escape(str(getattr(self.sink, 'path', '')))}"
        if self.ended:
            title += " (query ended)"
        if not r:
            return f"<div class='hoodie-watch'><b>{title}</b><p>no micro-batch yet</p></div>"
        rows = [
            ("batch", r.get("batch_id")),
            ("instant", r.get("instant") or ("skipped: committed before" if r.get("skipped") else "nothing written")),
            ("rows in", r.get("rows_in")),
            ("inserts / updates / deletes", _slash(r, ("records_inserted", "records_updated", "records_deleted"))),
            ("files / bytes written", f"{r.get('files_written')} / {human_bytes(r.get('bytes_written') or 0)}"),
            ("flushes " + " / ".join(FLUSH_CAUSES), _slash(r, tuple(f"flushes_{c}" for c in FLUSH_CAUSES))),
            ("seconds " + " / ".join(STAGES), _slash(r, tuple(f"{s}_seconds" for s in STAGES), "{:.2f}")),
            ("seconds " + " / ".join(CHAIN_STAGES), _slash(r, tuple(f"{s}_seconds" for s in CHAIN_STAGES), "{:.2f}")),
            ("batch seconds", _fmt(r.get("batch_seconds"), "{:.2f}")),
            ("pending compactions", r.get("pending_compactions")),
            ("source lag (offsets behind)", r.get("source_offsets_behind")),
            (
                "input / processed rows per second",
                _slash(r, ("input_rows_per_second", "processed_rows_per_second"), "{:.1f}"),
            ),
        ]
        body = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>"
            f"{html.escape('-' if v is None else str(v))}</td></tr>"
            for k, v in rows
        )
        chart = records_chart(per_batch(self.sink.metrics().to_pylist())[-CHART_BATCHES:]) if self.sink else ""
        return f"<div class='hoodie-watch'><b>{title}</b><table>{body}</table>{chart}</div>"

    def _repr_html_(self) -> str:
        return self.html()

    # -- updates --------------------------------------------------------------------------------------------
    def start(self) -> Watch:
        if self.notebook:
            display = ipython_display()
            self._handle = display.display(display.HTML(self.html()), display_id=True)
        else:
            self.out(self.text())
        self._thread.start()
        self._listen()
        return self

    def update(self, progress: Any = None, ended: bool = False) -> None:
        """Ask for a render (never blocks: the listener only queues the progress for the view's thread)."""
        self._pending.put((progress, ended))

    def _next(self) -> list[tuple[Any, bool]]:
        """The renders to do: each progress in print mode; in a notebook only the newest (one display)."""
        items = [self._pending.get()]
        if not self.notebook:
            return items
        while True:
            try:
                items.append(self._pending.get_nowait())
            except queue.Empty:
                break
        newest = next((p for p, _ in reversed(items) if p is not None), None)
        return [(newest, any(ended for _, ended in items))]

    def _render_loop(self) -> None:
        while True:
            for progress, ended in self._next():
                if progress is not None:
                    self.progress = progress
                self.ended = self.ended or ended
                try:
                    self.render()
                except Exception:
                    log.warning("the live view of %s failed to render", self.sink, exc_info=True)
                if self.ended:
                    return

    def render(self) -> None:
        if self._handle is not None:
            display = ipython_display()
            self._handle.update(display.HTML(self.html()))
        else:
            self.out(self.text() + (" (query ended)" if self.ended else ""))
        self.updates += 1

    def _listen(self) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        view = self
        query_id = str(self.query.id)

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryProgress(self, event):
                if str(event.progress.id) == query_id:
                    view.update(event.progress)

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                if str(event.id) == query_id:
                    view.update(ended=True)
                    threading.Thread(target=view.stop, name="hoodie-stream-watch-stop", daemon=True).start()

        self._listener = _Listener()
        self._streams = streams_of(self.query)
        self._streams.addListener(self._listener)

    def stop(self) -> None:
        """Stop following the query (the display stays as last rendered)."""
        listener, self._listener = self._listener, None
        if listener is not None and self._streams is not None:
            try:
                self._streams.removeListener(listener)
            except Exception:  # the session stopped meanwhile
                log.debug("removing the live view's listener failed", exc_info=True)
        if not self.ended:
            self.update(ended=True)


def streams_of(query: Any) -> Any:
    """The StreamingQueryManager of the session that runs `query` (the one whose listeners hear of it)."""
    try:
        from pyspark.sql.streaming.query import StreamingQueryManager

        return StreamingQueryManager(query._jsq.sparkSession().streams())
    except Exception:  # Spark Connect: the active session's manager
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise
        return spark.streams


def watch(
    query: Any, sink: Any = None, out: Callable[[str], None] | None = None, notebook: bool | None = None
) -> Watch:
    """Show the live view of `query` (a StreamingQuery writing through `sink`, a HoodieStreamSink): an HTML display
    refreshed after each micro-batch in a notebook, one printed line per micro-batch elsewhere (through `out`,
    default print). `notebook`: force one or the other (default: a notebook when IPython runs a kernel). Returns the
    Watch; `stop()` ends it, and it ends with the query."""
    return Watch(query, sink, out, notebook).start()


def records_chart(rows: list[dict[str, Any]], width: int = 360, height: int = 90) -> str:
    """An SVG bar chart of the records each micro-batch wrote (inserts, updates, deletes stacked)."""
    if not rows:
        return ""
    parts = ("records_inserted", "records_updated", "records_deleted")
    colors = ("#4c72b0", "#55a868", "#c44e52")
    totals = [sum(r.get(p) or 0 for p in parts) for r in rows]
    top = max(max(totals), 1)
    bar = width / max(len(rows), 1)
    shapes = []
    for i, r in enumerate(rows):
        y = float(height)
        for p, color in zip(parts, colors):
            h = (r.get(p) or 0) / top * (height - 12)
            if h > 0:
                y -= h
                shapes.append(
                    f"<rect x='{i * bar + 1:.1f}' y='{y:.1f}' width='{max(bar - 2, 1):.1f}' height='{h:.1f}' "
                    f"fill='{color}'><title>batch {r.get('batch_id')}: {r.get(p)} {p[8:]}</title></rect>"
                )
    label = f"<text x='2' y='10' font-size='10'>records per batch (max {top})</text>"
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' class='hoodie-watch-chart'>"
        f"{label}{''.join(shapes)}</svg>"
    )


def _fmt(value: Any, pattern: str = "{}") -> str | None:
    return None if value is None else pattern.format(value)


def _slash(row: dict[str, Any], keys: tuple[str, ...], pattern: str = "{}") -> str:
    return " / ".join("-" if row.get(k) is None else pattern.format(row[k]) for k in keys)


def per_batch(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sink's metrics rows as one row per micro-batch: a DebeziumSink has a row per table a micro-batch wrote
    (they are written one after the other): counts, bytes and seconds add up, the instants are listed, the source's
    lag is the query's (the same in each row)."""
    out: dict[Any, dict[str, Any]] = {}
    for row in rows:
        merged = out.get(row.get("batch_id"))
        if merged is None:
            out[row.get("batch_id")] = {k: v for k, v in row.items() if k != "table"}
            continue
        for key, value in row.items():
            if key in ("table", "batch_id") or value is None:
                continue
            old = merged.get(key)
            if old is None:
                merged[key] = value
            elif key == "instant":
                merged[key] = f"{old}, {value}"
            elif key in ("source_offsets_behind", "finished_at"):
                merged[key] = max(old, value)
            elif isinstance(value, bool):
                merged[key] = old or value
            elif isinstance(value, (int, float)):
                merged[key] = old + value
    return list(out.values())
