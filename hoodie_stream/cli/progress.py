"""Progress bars for the long commands (compact, clean, validate): tqdm when stdout is a terminal and tqdm is
installed, else nothing (the work runs the same)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def _tqdm() -> Any:
    try:
        return importlib.import_module("tqdm").tqdm
    except ImportError:
        return None


def shown(enabled: bool | None = None) -> bool:
    """Whether a bar is drawn: `enabled` (None: when stdout is a terminal) and tqdm importable."""
    if enabled is None:
        enabled = sys.stdout.isatty()
    return bool(enabled) and _tqdm() is not None


def progress(items: Iterable[T], desc: str, total: int | None = None, enabled: bool | None = None) -> Iterator[T]:
    """`items`, with a bar on stderr while they are consumed when `shown(enabled)`."""
    if not shown(enabled):
        yield from items
        return
    bar = _tqdm()(items, desc=desc, total=total, unit="", leave=False, file=sys.stderr, dynamic_ncols=True)
    try:
        yield from bar
    finally:
        bar.close()
