"""HoodieTable, the public table: the reads of `TableReader` (read/table_reader.py), the changelog (cdc/query.py) and
the views of a table for people (views/): commits, file slices and the notebook's HTML view. It sits above them all, so
the reader, the changelog and the views each import only what is below them."""

import pyarrow as pa

from .cdc.query import read_changes
from .read.table_reader import InstantArg, TableReader
from .read.time_travel import check_incremental_window
from .timeline.instant import parse_instant_time
from .views.table_html import table_html
from .views.table_info import commits, file_slices


class HoodieTable(TableReader):
    """A Hudi table on any storage, read through the project's own file-system view and merger."""

    def read_changes(
        self, start: InstantArg | None = None, end: InstantArg | None = None, flat: bool = False
    ) -> pa.Table:
        """The changelog (Hudi's CDC query) of the data-changing commits in (start, end] of a table created with
        hoodie.table.cdc.enabled=true: one row per inserted, updated or deleted record and commit, with `op`
        (i, u, d), `ts_ms` (the commit's instant time), `before` and `after` (JSON text); with `flat`, `op`, `ts_ms`
        and the row's own columns (the after image, the before image of a delete). `start` None reads from the first
        commit, `end` None to the last completed one; both take Hudi's instant forms (see `read`). See
        `hoodie_stream.format.cdc.query`."""
        zone = self.config.timeline_timezone
        start, end = (
            None if t is None else parse_instant_time(t, name, zone, as_text=True)
            for t, name in ((start, "start"), (end, "end"))
        )
        check_incremental_window(self.timeline, start, end)
        return read_changes(self, start, end, flat)

    # -- notebook views (views/table_info.py, views/table_html.py) ----------------------------------------------
    def commits(self) -> pa.Table:
        """One row per instant of the timeline: action, state, times, records and bytes written, streaming batch
        id (columns: `hoodie_stream.format.views.table_info`)."""
        return commits(self)

    def file_slices(self) -> pa.Table:
        """The latest file slice of every file group: partition, file id, base and log file sizes."""
        return file_slices(self)

    def _repr_html_(self) -> str:
        return table_html(self)
