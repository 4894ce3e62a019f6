"""Marker files under `.hoodie/.temp/<instant>/` (DIRECT markers, as Hudi 0.14/0.15 write them).

One empty file per data file: `<partition>/<dataFileName>.marker.<IOType>` with IOType CREATE (new base file),
MERGE (rewritten base file) or APPEND (log file; named after the log file). Timeline-server markers
(`MARKERS.type` + `MARKERS0..N`, newline-separated marker names) are read too.
"""

from ...errors import HoodieFormatError, HoodieObjectExistsError
from ...storage import join, storage_for

IO_TYPES = ("CREATE", "MERGE", "APPEND")
MARKER_EXTN = ".marker"
MARKERS_TYPE_FILE = "MARKERS.type"
MARKERS_ROOT = ".hoodie/.temp"  # the marker directories of all instants


def marker_dir(instant):
    """The marker directory of an instant, relative to the table root."""
    return f"{MARKERS_ROOT}/{instant}"


def marker_name(data_file, io_type):
    """`<dataFile>.marker.<IOType>`."""
    if io_type not in IO_TYPES:
        raise HoodieFormatError(f"unknown marker IO type {io_type!r}; expected one of {IO_TYPES}")
    return f"{data_file}{MARKER_EXTN}.{io_type}"


def parse_marker_name(rel):
    """(relative data file path, IO type) of a marker path relative to the marker dir, else None."""
    head, sep, io_type = rel.rpartition(MARKER_EXTN + ".")
    if not sep or io_type not in IO_TYPES or not head:
        return None
    return head, io_type


def create_marker(storage, instant, data_file, io_type):
    """Create the marker of `data_file` (path relative to the table root, '/'-separated); returns the marker's path
    relative to the root. Created if absent, never overwritten: a marker that exists already (a retried task)
    is the same empty marker."""
    path = join(marker_dir(instant), marker_name(data_file, io_type))
    try:
        storage_for(storage).create(path, b"")
    except HoodieObjectExistsError:
        pass
    return path


def _entries(storage, instant):
    """(marker name relative to the marker dir, where) of every entry of `instant`'s marker directory: the lines of
    timeline-server MARKERS files when there is a MARKERS.type, else the files (the storage layer's own temporary
    files are not listed)."""
    root = marker_dir(instant)
    files = storage.list(root, recursive=True)
    if any(f.name == MARKERS_TYPE_FILE for f in files):
        return [
            (line.strip(), storage.uri_of(f.path))
            for f in files
            if f.name.startswith("MARKERS") and f.name != MARKERS_TYPE_FILE
            for line in storage.read(f.path).decode("utf-8").splitlines()
            if line.strip()
        ]
    return [(f.path[len(root) + 1 :], storage.uri_of(f.path)) for f in files]


def list_markers(storage, instant):
    """Sorted (relative data file path, IO type) of every marker of `instant`; [] if there is none. An entry that
    is not a marker name is an error naming it."""
    storage = storage_for(storage)
    return sorted({_parse_or_fail(rel, where) for rel, where in _entries(storage, instant)})


def invalid_markers(storage, instant):
    """Sorted entries of `instant`'s marker directory that are not marker names (what `list_markers` fails on),
    relative to the marker directory."""
    return sorted({rel for rel, _where in _entries(storage_for(storage), instant) if parse_marker_name(rel) is None})


def _parse_or_fail(rel, where):
    parsed = parse_marker_name(rel)
    if parsed is None:
        raise HoodieFormatError(f"{where}: not a marker name: {rel!r}")
    return parsed


def delete_markers(storage, instant):
    """Remove the marker directory of `instant` (no error if absent)."""
    storage_for(storage).delete_tree(marker_dir(instant))
