"""Timeline instants: (timestamp, action, state), their file names, and new instant times."""

import datetime
import re
import threading
from typing import NamedTuple, Optional

REQUESTED = "requested"
INFLIGHT = "inflight"
COMPLETED = "completed"
STATE_ORDER = {REQUESTED: 0, INFLIGHT: 1, COMPLETED: 2}

COMMIT = "commit"
DELTA_COMMIT = "deltacommit"
COMPACTION = "compaction"
REPLACE_COMMIT = "replacecommit"
CLEAN = "clean"
ROLLBACK = "rollback"
SAVEPOINT = "savepoint"
RESTORE = "restore"
LOG_COMPACTION = "logcompaction"
INDEXING = "indexing"
ACTIONS = (COMMIT, DELTA_COMMIT, COMPACTION, REPLACE_COMMIT, CLEAN, ROLLBACK, SAVEPOINT, RESTORE,
           LOG_COMPACTION, INDEXING)
COMMIT_ACTIONS = (COMMIT, DELTA_COMMIT, REPLACE_COMMIT)
# Actions whose completed file carries another action's name (Java groups them with that action).
COMPLETED_AS = {COMPACTION: COMMIT, LOG_COMPACTION: DELTA_COMMIT}

_NAME = re.compile(r"^(\d{14,17})\.([a-z]+)(?:\.(requested|inflight))?$")
FORMAT = "%Y%m%d%H%M%S"


class Instant(NamedTuple):
    """One timeline entry. A completed compaction is reported as action "commit" (its file is T.commit)."""

    timestamp: str
    action: str
    state: str

    REQUESTED = REQUESTED
    INFLIGHT = INFLIGHT
    COMPLETED = COMPLETED

    @property
    def is_completed(self):
        return self.state == COMPLETED

    @property
    def is_requested(self):
        return self.state == REQUESTED

    @property
    def is_inflight(self):
        return self.state == INFLIGHT

    @property
    def comparable_action(self):
        """The action Java groups this instant under (compaction -> commit, logcompaction -> deltacommit)."""
        return COMPLETED_AS.get(self.action, self.action)

    @property
    def file_name(self):
        t, a = self.timestamp, self.action
        if self.state == COMPLETED:
            return f"{t}.{COMPLETED_AS.get(a, a)}"
        if self.state == INFLIGHT:
            return f"{t}.inflight" if a == COMMIT else f"{t}.{a}.inflight"
        if self.state == REQUESTED:
            return f"{t}.{a}.requested"
        raise ValueError(f"unknown instant state {self.state!r}")

    @property
    def sort_key(self):
        return (self.timestamp, STATE_ORDER[self.state], self.action)

    @classmethod
    def from_file_name(cls, name) -> Optional["Instant"]:
        """Parse a timeline file name; None for anything else (temp files, hoodie.properties, dirs)."""
        if name.endswith(".inflight") and name.count(".") == 1:
            ts = name[:-len(".inflight")]
            return cls(ts, COMMIT, INFLIGHT) if ts.isdigit() and 14 <= len(ts) <= 17 else None
        m = _NAME.match(name)
        if not m or m.group(2) not in ACTIONS:
            return None
        ts, action, state = m.group(1), m.group(2), m.group(3) or COMPLETED
        if state == COMPLETED and action in COMPLETED_AS:
            return None
        return cls(ts, action, state)


def instant_to_datetime(ts):
    """UTC datetime of a 17-digit (or legacy 14-digit, millis 999) instant time."""
    if len(ts) == 14:
        ts += "999"
    return datetime.datetime.strptime(ts, FORMAT + "%f").replace(tzinfo=datetime.timezone.utc) if len(ts) == 17 \
        else None


def format_instant(dt):
    """17-digit yyyyMMddHHmmssSSS of a datetime (converted to UTC)."""
    dt = dt.astimezone(datetime.timezone.utc)
    return dt.strftime(FORMAT) + f"{dt.microsecond // 1000:03d}"


_lock = threading.Lock()
_last = [None]
_ONE_MS = datetime.timedelta(milliseconds=1)


def new_instant_time(after=None):
    """A new UTC instant time, strictly greater than `after` and every time this process handed out."""
    with _lock:
        now = datetime.datetime.now(datetime.timezone.utc)
        candidate = now.replace(microsecond=now.microsecond // 1000 * 1000)
        for floor in (_last[0], after):
            if not floor:
                continue
            try:
                floor_dt = instant_to_datetime(floor)
            except ValueError:
                floor_dt = None
            if floor_dt is not None:
                candidate = max(candidate, floor_dt + _ONE_MS)
        ts = format_instant(candidate)
        if after and ts <= after:
            raise ValueError(f"cannot make an instant time greater than {after!r}")
        _last[0] = ts
        return ts
