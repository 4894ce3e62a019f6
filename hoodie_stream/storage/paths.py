"""Paths inside a storage root: '/'-separated, relative, and never leaving the root.

Every path handed to a `Storage` is relative to its root (the table's base path, or a cache directory). A path that
is absolute, has an empty, `.` or `..` segment, a NUL, a backslash or a control character is refused with
`HoodiePathError` before anything is read or written, so no record value, plan entry or file name can make the
project touch a file outside the root.
"""

import re

from ..errors import HoodiePathError

_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")


def check_segment(segment, what="path segment"):
    """`segment` if it can be one segment of a path inside a root, else HoodiePathError."""
    if not isinstance(segment, str):
        raise HoodiePathError(f"{what} {segment!r} is not a string")
    if segment in ("", ".", ".."):
        raise HoodiePathError(f"{what} {segment!r} is empty, '.' or '..': it cannot be a directory or file name")
    if "/" in segment:
        raise HoodiePathError(f"{what} {segment!r} contains '/'")
    bad = _BAD_CHARS.search(segment)
    if bad:
        raise HoodiePathError(
            f"{what} {segment!r} contains the character {bad.group()!r}, which cannot be in a path segment"
        )
    return segment


def check_relative(path, what="path"):
    """The normalized form of a relative path inside a root ('' is the root itself); HoodiePathError for a path
    that is absolute or could leave the root."""
    if not isinstance(path, str):
        raise HoodiePathError(f"{what} {path!r} is not a string")
    if path == "":
        return ""
    if path.startswith("/"):
        raise HoodiePathError(f"{what} {path!r} is absolute; paths inside a table are relative to its root")
    for segment in path.split("/"):
        check_segment(segment, f"{what} {path!r}: segment")
    return path


def join(*parts):
    """Join relative paths with '/', skipping empty parts (the root)."""
    return "/".join(p for p in parts if p)


def split(path):
    """(parent, name) of a relative path; the parent of a top-level name is ''."""
    parent, _, name = path.rpartition("/")
    return parent, name
