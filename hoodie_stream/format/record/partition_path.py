"""Partition paths that stay inside the table: the check a record's partition path passes before anything is written.

A partition path is the key generator's output (`2026/11/23`, `city=sf`, `__HIVE_DEFAULT_PARTITION__`): relative,
'/'-separated, '' for a non-partitioned table. It becomes directories under the table's root, so it is refused when
it could leave the root or is no directory name:

- absolute (`/abs`), or with an empty segment (`a//b`, `a/`), a `.` or a `..` segment (`./a`, `a/../b`);
- with a NUL, a control character (U+0000-U+001F, U+007F) or a backslash;
- with a segment longer than 255 bytes of UTF-8 (the longest directory name of local file systems and HDFS);
- inside the table's metadata directory (`.hoodie`, `.hoodie/...`).

`/` inside a value stays a nested partition, as Hudi's key generators use it; a hive-style segment `p=..` is one
harmless name, while `p=../x` has a `..` segment. With `hoodie.datasource.write.partitionpath.urlencode` the key
generator escapes `/`, `\\` and the control characters (Hudi's PartitionPathEncodeUtils), but not `.`: `..` is refused
either way, as Hudi's own `PartitionPathEncodeUtils.validateNoPathTraversal` does.

The refusal is a HoodiePathError, the error the storage layer raises for a path that would leave its root: the same
condition, caught earlier and named by record and field. The vectorized check (`first_refused`) and the one-value
check (`check_partition_path`) apply one rule.
"""

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import HoodiePathError

MAX_SEGMENT_BYTES = 255
METADATA_DIR = ".hoodie"

# one regular expression for Arrow (RE2) and Python's re: a match is a refused partition path
_REFUSED = (
    r"^/|/$|//|(?:^|/)\.\.?(?:/|$)"  # absolute, empty segment, '.' or '..' segment
    r"|[\x00-\x1f\x7f\\]"  # NUL, control characters, backslash
    r"|^\.hoodie(?:/|$)"  # the table's metadata directory
)
_LONG_SEGMENT = r"[^/]{%d,}" % (MAX_SEGMENT_BYTES + 1)  # matched over UTF-8 bytes
_REFUSED_RE = re.compile(_REFUSED)
_BAD_CHAR_RE = re.compile(r"[\x00-\x1f\x7f\\]")


def problem(path):
    """Why `path` cannot be a partition path, or None when it can."""
    if path is None:
        return "the key generator gave no partition path (null)"
    if not isinstance(path, str):
        return f"partition path {path!r} is not a string"
    if path == "":
        return None  # the table's root: a non-partitioned table
    if path.startswith("/"):
        return "it is absolute (starts with '/'); a partition path is relative to the table's root"
    segments = path.split("/")
    for segment in segments:
        if segment == "":
            return "it has an empty segment ('//', or a '/' at its end)"
        if segment in (".", ".."):
            return f"it has a {segment!r} segment, which would leave the partition's directory"
        bad = _BAD_CHAR_RE.search(segment)
        if bad:
            return f"it contains the character {bad.group()!r}, which cannot be in a path segment"
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            return f"its segment {segment[:40]!r}... is longer than {MAX_SEGMENT_BYTES} bytes"
    if segments[0] == METADATA_DIR:
        return f"it lies in the table's metadata directory {METADATA_DIR!r}"
    return None


def is_refused(path):
    """True when `path` cannot be a partition path (the scalar form of `refused_mask`)."""
    if not isinstance(path, str):
        return True
    if _REFUSED_RE.search(path):
        return True
    return any(len(s.encode("utf-8")) > MAX_SEGMENT_BYTES for s in path.split("/"))


def check_partition_path(path, what="partition path"):
    """`path` if it is a partition path inside the table, else HoodiePathError naming it and why."""
    reason = problem(path)
    if reason is not None:
        raise HoodiePathError(f"{what} {path!r} is refused: {reason}")
    return path


def refused_mask(paths):
    """Boolean array: True where the partition path (Arrow strings) is refused; nulls are refused."""
    paths = _strings(paths)
    if not _suspicious(paths):
        return pa.array(np.zeros(len(paths), np.bool_))
    bad = pc.match_substring_regex(paths, _REFUSED)
    long = pc.match_substring_regex(paths.cast(pa.binary()), _LONG_SEGMENT)
    return pc.fill_null(pc.or_(bad, long), True)


def first_refused(paths):
    """Index of the first refused partition path in `paths` (Arrow strings), None when all are accepted."""
    paths = _strings(paths)
    if len(paths) == 0 or not _suspicious(paths):
        return None
    mask = refused_mask(paths)
    if not pc.any(mask).as_py():
        return None
    return pc.index(mask, True).as_py()


def _strings(paths):
    if isinstance(paths, pa.ChunkedArray):
        paths = paths.combine_chunks()
    return paths if pa.types.is_string(paths.type) else paths.cast(pa.string())


_SLASH, _DOT, _BACKSLASH = ord("/"), ord("."), ord("\\")


def _suspicious(paths):
    """False when no path can be refused, from the UTF-8 bytes of all paths at once (a few ms per million short
    paths, where the regular expressions take ~0.4 s): no null, no path starting with '/' or '.' or ending with '/',
    no control character or backslash, no '//' or '/.', none longer than a segment may be. True sends the paths
    through the exact check."""
    if paths.null_count:
        return True
    _, offsets, data = paths.buffers()
    offsets = np.frombuffer(offsets, np.int32)[paths.offset : paths.offset + len(paths) + 1]
    starts, ends = offsets[:-1], offsets[1:]
    if len(offsets) == 0 or int(offsets[-1]) == int(offsets[0]):
        return False
    data = np.frombuffer(data, np.uint8)
    lengths = ends - starts
    if (lengths > MAX_SEGMENT_BYTES).any():
        return True
    nonempty = lengths > 0
    first, last = data[starts[nonempty]], data[ends[nonempty] - 1]
    if (first == _SLASH).any() or (first == _DOT).any() or (last == _SLASH).any():
        return True
    body = data[offsets[0] : offsets[-1]]
    if ((body < 0x20) | (body == 0x7F) | (body == _BACKSLASH)).any():
        return True
    after_slash = body[1:][body[:-1] == _SLASH]
    return bool(((after_slash == _SLASH) | (after_slash == _DOT)).any())
