"""Marker files under `.hoodie/.temp/<instant>/` (DIRECT markers, as Hudi 0.14/0.15 write them).

One empty file per data file: `<partition>/<dataFileName>.marker.<IOType>` with IOType CREATE (new base file),
MERGE (rewritten base file) or APPEND (log file; named after the log file). Timeline-server markers
(`MARKERS.type` + `MARKERS0..N`, newline-separated marker names) are read too.
"""

import os
import shutil

from ..errors import HoodieFormatError

IO_TYPES = ("CREATE", "MERGE", "APPEND")
MARKER_EXTN = ".marker"
MARKERS_TYPE_FILE = "MARKERS.type"


def marker_dir(base, instant):
    return os.path.join(str(base), ".hoodie", ".temp", instant)


def marker_name(data_file, io_type):
    """`<dataFile>.marker.<IOType>`."""
    if io_type not in IO_TYPES:
        raise ValueError(f"unknown marker IO type {io_type!r}; expected one of {IO_TYPES}")
    return f"{data_file}{MARKER_EXTN}.{io_type}"


def parse_marker_name(rel):
    """(relative data file path, IO type) of a marker path relative to the marker dir, else None."""
    head, sep, io_type = rel.rpartition(MARKER_EXTN + ".")
    if not sep or io_type not in IO_TYPES or not head:
        return None
    return head, io_type


def create_marker(base, instant, data_file, io_type):
    """Create the marker of `data_file` (path relative to base, '/'-separated); returns the marker path."""
    path = os.path.join(marker_dir(base, instant), *marker_name(data_file, io_type).split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "ab"):
        pass
    return path


def list_markers(base, instant):
    """Sorted (relative data file path, IO type) of every marker of `instant`; [] if there is none."""
    root = marker_dir(base, instant)
    if not os.path.isdir(root):
        return []
    found = set()
    if os.path.exists(os.path.join(root, MARKERS_TYPE_FILE)):
        for name in os.listdir(root):
            if name.startswith("MARKERS") and name != MARKERS_TYPE_FILE:
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    for line in f.read().splitlines():
                        if line.strip():
                            found.add(_parse_or_fail(line.strip(), os.path.join(root, name)))
        return sorted(found)
    for directory, _dirs, files in os.walk(root):
        for name in files:
            rel = os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/")
            found.add(_parse_or_fail(rel, os.path.join(directory, name)))
    return sorted(found)


def _parse_or_fail(rel, where):
    parsed = parse_marker_name(rel)
    if parsed is None:
        raise HoodieFormatError(f"{where}: not a marker name: {rel!r}")
    return parsed


def delete_markers(base, instant):
    """Remove the marker directory of `instant` (no error if absent)."""
    shutil.rmtree(marker_dir(base, instant), ignore_errors=True)
