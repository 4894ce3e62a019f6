"""Names of base files and log files, write tokens, file ids and the order of log files in a slice."""

import re
import uuid
from typing import NamedTuple

from ...errors import HoodieFormatError

BASE_FILE_EXTENSION = ".parquet"
LOG_EXTENSION = "log"
CDC_SUFFIX = ".cdc"
UNKNOWN_WRITE_TOKEN = "1-0-1"

# Java FSUtils.LOG_FILE_PATTERN (archive logs excluded), anchored at both ends.
_LOG_RE = re.compile(r"^\.(.+)_(.*)\.log\.(\d+)(?:_((\d+)-(\d+)-(\d+))(\.cdc)?)?$")
_BASE_RE = re.compile(r"^([^_.]+)_(\d+-\d+-\d+)_([^_.]+)\.parquet$")
_TOKEN_RE = re.compile(r"^\d+-\d+-\d+$")


class BaseFileName(NamedTuple):
    file_id: str
    write_token: str
    instant: str


class LogFileName(NamedTuple):
    file_id: str
    base_instant: str
    version: int
    write_token: str | None
    is_cdc: bool

    @property
    def name(self):
        return log_file_name(self.file_id, self.base_instant, self.version, self.write_token, self.is_cdc)


def new_file_id(index=0):
    """A new file group id: a random UUID plus `-<index>`."""
    return f"{uuid.uuid4()}-{index}"


def write_token(partition_id, stage_id, attempt_id):
    """`<taskPartitionId>-<stageId>-<taskAttemptId>`; all three non-negative integers."""
    parts = (partition_id, stage_id, attempt_id)
    if any(int(p) != p or p < 0 for p in parts):
        raise HoodieFormatError(f"write token parts must be non-negative integers: {parts}")
    return "%d-%d-%d" % parts


def _check_file_id(file_id):
    if not file_id or "_" in file_id or "." in file_id or "/" in file_id:
        raise HoodieFormatError(f"invalid file id {file_id!r}: must be non-empty without '_', '.' or '/'")


def _check_token(token):
    if not _TOKEN_RE.match(token or ""):
        raise HoodieFormatError(f"invalid write token {token!r}: expected '<int>-<int>-<int>'")


def base_file_name(file_id, token, instant):
    """`<fileId>_<writeToken>_<instant>.parquet`."""
    _check_file_id(file_id)
    _check_token(token)
    return f"{file_id}_{token}_{instant}{BASE_FILE_EXTENSION}"


def log_file_name(file_id, base_instant, version, token, cdc=False):
    """`.<fileId>_<baseInstant>.log.<version>_<writeToken>[.cdc]`."""
    _check_file_id(file_id)
    if int(version) < 1:
        raise HoodieFormatError(f"log version must be >= 1, got {version}")
    name = f".{file_id}_{base_instant}.log.{int(version)}"
    if token is None:
        if cdc:
            raise HoodieFormatError("a .cdc log file name needs a write token")
        return name
    _check_token(token)
    return f"{name}_{token}{CDC_SUFFIX if cdc else ''}"


def parse_base_file_name(name):
    """BaseFileName for a parquet base file name, else None."""
    m = _BASE_RE.match(name)
    return BaseFileName(m.group(1), m.group(2), m.group(3)) if m else None


def parse_log_file_name(name):
    """LogFileName for a log file name, else None."""
    m = _LOG_RE.match(name)
    if not m:
        return None
    return LogFileName(m.group(1), m.group(2), int(m.group(3)), m.group(4), m.group(8) is not None)


def is_base_file(name):
    return parse_base_file_name(name) is not None


def is_log_file(name):
    return parse_log_file_name(name) is not None


def log_sort_key(log):
    """Hudi's LogFileComparator: base instant, version, write token (missing first), then suffix."""
    if isinstance(log, str):
        parsed = parse_log_file_name(log)
        if parsed is None:
            raise HoodieFormatError(f"not a log file name: {log!r}")
        log = parsed
    token = log.write_token
    return (log.base_instant, log.version, token is not None, token or "", CDC_SUFFIX if log.is_cdc else "")
