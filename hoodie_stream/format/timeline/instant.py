"""Timeline instants: (timestamp, action, state), their file names, and new instant times."""

import datetime
import re
import threading
from typing import NamedTuple, Optional

from ...errors import HoodieConfigError, HoodieTimelineError

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
CLUSTERING = "clustering"  # table version 8 and later: a pending clustering, completed as a replacecommit
ACTIONS = (
    COMMIT,
    DELTA_COMMIT,
    COMPACTION,
    REPLACE_COMMIT,
    CLEAN,
    ROLLBACK,
    SAVEPOINT,
    RESTORE,
    LOG_COMPACTION,
    INDEXING,
    CLUSTERING,
)
COMMIT_ACTIONS = (COMMIT, DELTA_COMMIT, REPLACE_COMMIT)
# Actions whose completed file carries another action's name (Java groups them with that action).
COMPLETED_AS = {COMPACTION: COMMIT, LOG_COMPACTION: DELTA_COMMIT, CLUSTERING: REPLACE_COMMIT}

_NAME = re.compile(r"^(\d{14,17})\.([a-z]+)(?:\.(requested|inflight))?$")
FORMAT = "%Y%m%d%H%M%S"


class Instant(NamedTuple):
    """One timeline entry. A completed compaction is reported as action "commit" (its file is T.commit).
    `completion_time`: when a completed instant completed, on timelines that record it (layout 2: table version 8
    and later, `T_C.<action>`); None on layout 1 and for pending instants."""

    timestamp: str
    action: str
    state: str
    completion_time: str | None = None

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
        """The instant's file name in its timeline (layout 2: `T_C.<action>` once completed)."""
        t, a = self.timestamp, self.action
        if self.state == COMPLETED:
            done = t if self.completion_time is None else f"{t}_{self.completion_time}"
            return f"{done}.{COMPLETED_AS.get(a, a)}"
        if self.state == INFLIGHT:
            return f"{t}.inflight" if a == COMMIT else f"{t}.{a}.inflight"
        if self.state == REQUESTED:
            return f"{t}.{a}.requested"
        raise HoodieTimelineError(f"unknown instant state {self.state!r}")

    @property
    def sort_key(self):
        return (self.timestamp, STATE_ORDER[self.state], self.action)

    @classmethod
    def from_file_name(cls, name, completion_times=False) -> Optional["Instant"]:
        """Parse a timeline file name; None for anything else (temp files, hoodie.properties, dirs). With
        `completion_times` (layout 2) a completed instant's file is `T_C.<action>`; one without `_C` (Hudi reads it
        as a legacy file, completed at its modification time) is read with no completion time."""
        if name.endswith(".inflight") and name.count(".") == 1:
            ts = name[: -len(".inflight")]
            return cls(ts, COMMIT, INFLIGHT) if ts.isdigit() and 14 <= len(ts) <= 17 else None
        completion = None
        if completion_times:
            head, sep, rest = name.partition("_")
            if sep:
                done, dot, action = rest.partition(".")
                if not (dot and done.isdigit() and 14 <= len(done) <= 17):
                    return None
                name, completion = f"{head}.{action}", done
        m = _NAME.match(name)
        if not m or m.group(2) not in ACTIONS:
            return None
        ts, action, state = m.group(1), m.group(2), m.group(3) or COMPLETED
        if state == COMPLETED and action in COMPLETED_AS:
            return None
        if completion is not None and state != COMPLETED:
            return None
        return cls(ts, action, state, completion)


def instant_to_datetime(ts):
    """UTC datetime of a 17-digit (or legacy 14-digit, millis 999) instant time."""
    if len(ts) == 14:
        ts += "999"
    return (
        datetime.datetime.strptime(ts, FORMAT + "%f").replace(tzinfo=datetime.timezone.utc) if len(ts) == 17 else None
    )


def format_instant(dt):
    """17-digit yyyyMMddHHmmssSSS of a datetime (converted to UTC)."""
    dt = dt.astimezone(datetime.timezone.utc)
    return dt.strftime(FORMAT) + f"{dt.microsecond // 1000:03d}"


_DATE = r"(\d{4})-(\d{2})-(\d{2})"
_QUERY_FORMS = (
    re.compile(r"(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\d{3})?"),
    re.compile(_DATE + r"(?:[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})?)?"),
)
QUERY_INSTANT_FORMS = (
    "yyyyMMddHHmmssSSS",
    "yyyyMMddHHmmss",
    "yyyy-MM-dd HH:mm:ss[.SSS]",
    "yyyy-MM-dd",
    "yyyy-MM-ddTHH:mm:ss[.fff][Z|+hh:mm|-hh:mm]",
)


def parse_instant_time(value, what="instant", timezone="UTC", as_text=False):
    """The instant time a query argument (`as_of`, `start`, `end`) names, as Hudi reads it; compared as text with
    the timeline's instant times, as Hudi compares them.

    Accepted, as Hudi's time travel (HoodieSqlCommonUtils.formatQueryInstant) takes them: an instant time
    `yyyyMMddHHmmssSSS`; `yyyyMMddHHmmss`, kept as it is (as in Hudi and hudi-rs it then sorts before the
    17-digit instants of that second); `yyyy-MM-dd HH:mm:ss` (millis 999: the whole second, as Hudi completes it)
    and `yyyy-MM-dd HH:mm:ss.SSS`; `yyyy-MM-dd` (midnight). As hudi-rs takes them: ISO `yyyy-MM-ddTHH:mm:ss[.fff]`
    with an optional `Z` or `+hh:mm` offset (the exact time: millis 000 when none are given). Also a `datetime` or
    `date`. Times without an offset are wall-clock times of the table's timeline timezone
    (`hoodie.table.timeline.timezone`: "UTC", else the local one); times with an offset are converted to it.
    With `as_text` (the begin and end of an incremental read), any other string of digits is an instant time as it
    is, as Hudi's incremental query takes its begin and end instants (compared as text, HoodieTimeline.compareTimestamps): "000" and "0" (Hudi's quick start: from the first
    commit), the all-zero and bootstrap instants (00000000000000, 00000000000001, ...), `yyyyMMdd`, the longer
    instant times of a metadata table. Anything else raises HoodieConfigError naming `what` and the accepted forms.
    """
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    dt = None
    if isinstance(value, datetime.datetime):
        dt = value.replace(microsecond=value.microsecond // 1000 * 1000)
    elif isinstance(value, datetime.date):
        dt = datetime.datetime(value.year, value.month, value.day)
    elif text is not None:
        dt = _parse_query_text(text)
        if (dt is not None and len(text) == 14) or (dt is None and as_text and _is_instant_digits(text)):
            return text
    if dt is None:
        _refuse(value, what)
    if dt.tzinfo is not None:
        zone = datetime.timezone.utc if str(timezone).upper() == "UTC" else None
        dt = dt.astimezone(zone).replace(tzinfo=None)
    return dt.strftime(FORMAT) + f"{dt.microsecond // 1000:03d}"


def _is_instant_digits(text):
    """Digits Hudi compares as an instant time: any length but 14 and 17 (a date-time, checked as one), or zeros
    and Hudi's bootstrap instants of those lengths (no valid date-time)."""
    return text.isascii() and text.isdigit() and (len(text) not in (14, 17) or int(text) < 1_000_000)


def _refuse(value, what):
    raise HoodieConfigError(
        f"{what}={value!r} is not an instant time; accepted forms: {', '.join(QUERY_INSTANT_FORMS)}, or digits "
        "compared as an instant time (e.g. 000: before the first commit) "
        "(times in the table's timeline timezone unless an offset is given)"
    )


def _parse_query_text(text):
    """A datetime (aware when the text has an offset) of a query instant text; None when it has no accepted form."""
    digits, iso = _QUERY_FORMS
    try:
        m = digits.fullmatch(text)
        if m:
            *parts, millis = m.groups()
            return datetime.datetime(*map(int, parts), (999 if millis is None else int(millis)) * 1000)
        m = iso.fullmatch(text)
        if not m:
            return None
        *parts, fraction, offset = m.groups()
        if parts[3] is None:
            return datetime.datetime(*map(int, parts[:3]))
        if fraction is not None:
            millis = int((fraction + "00")[:3])
        else:  # Hudi's `yyyy-MM-dd HH:mm:ss` is the whole second; an ISO time is exact (hudi-rs)
            millis = 999 if text[10] == " " else 0
        dt = datetime.datetime(*map(int, parts), millis * 1000)
    except ValueError:  # a month 13, a day 31 of a 30-day month, an hour 24 ...
        return None
    if offset:
        if offset == "Z":
            zone = datetime.timezone.utc
        else:
            hours, minutes = int(offset[1:3]), int(offset[4:6])
            if hours > 23 or minutes > 59:
                return None
            sign = -1 if offset[0] == "-" else 1
            zone = datetime.timezone(sign * datetime.timedelta(hours=hours, minutes=minutes))
        dt = dt.replace(tzinfo=zone)
    return dt


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
            raise HoodieTimelineError(f"cannot make an instant time greater than {after!r}")
        _last[0] = ts
        return ts
