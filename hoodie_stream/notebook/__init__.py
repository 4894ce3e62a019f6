"""Notebook helpers: the live view of a streaming query (`watch`) and plots of a table's health (`plots`, needs the
optional extra `pip install "hoodie-stream[notebook]"`: matplotlib, imported only when a plot is made). The HTML
view of a table is `HoodieTable._repr_html_`; its Arrow tables `HoodieTable.commits()` and `file_slices()`."""

from .live_view import Watch, watch
from .plots import plot_commits, plot_compaction_backlog, plot_file_sizes, plot_log_files

__all__ = ["Watch", "plot_commits", "plot_compaction_backlog", "plot_file_sizes", "plot_log_files", "watch"]
