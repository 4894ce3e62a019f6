"""The active timeline: listing, filtering, atomic state transitions. Layout version 1 (table version 6) keeps its
instants in `.hoodie/` as `T.<action>[.<state>]`, commit metadata in JSON; layout 2 (table versions 8 and 9, Hudi
1.x) keeps them in `.hoodie/timeline/` with the completion time in a completed instant's name (`T_C.<action>`) and
commit metadata in Avro. The layout is the one seam between the two (`timeline_props`, `Instant.from_file_name`,
`_commit_metadata`, `encode`, `_file_of`); both are read and written.

On an object store the timeline is cached per table in the process (`_Snapshot`, shared by every `Timeline` of the
table) and read again incrementally: only the files from the earliest pending instant on (or from the newest
instant when nothing is pending) are listed (`Storage.list(start_after=...)`: one page whatever the history), and
the completed instants before that window, which never change, are kept. A file of the window that disappeared
(a rollback or an aborted instant removed it), or a new rollback or restore instant (which may remove completed
instants), makes the next read a full listing. The timeline files of completed instants are cached too (by name
and size: they are written once). Local tables are listed in full each time, as before (`SHARED`).
"""

import collections
import re
import threading

from ...errors import HoodieFormatError, HoodieObjectExistsError, HoodieObjectNotFoundError, HoodieTimelineError
from ...storage import storage_for
from ..avro.models import read_container
from ..table.config import timeline_props
from .commit_metadata import CommitMetadata
from .instant import COMMIT_ACTIONS, COMPLETED, INFLIGHT, REQUESTED, STATE_ORDER, Instant, new_instant_time

HOODIE_DIR = ".hoodie"
PROPERTIES_FILE = "hoodie.properties"
_TIMESTAMP = re.compile(r"^\d{14}(\d{3})?$")


NEW_INSTANT_LOCK = threading.RLock()

# the process-wide timeline cache: None = for object stores only (local listings are cheap), True/False = always/never
SHARED: bool | None = None
# actions whose completion may remove completed instants of the cached part: the next read is a full listing
_INVALIDATING = ("rollback", "restore")
_CONTENT_CACHE_ENTRIES = 512


class _Snapshot:
    """The timeline files of one table as last listed (name -> size), shared by the process's Timelines."""

    def __init__(self):
        self.lock = threading.RLock()
        self.files: dict[str, int] = {}
        self.listed = False  # a full listing was made since the last invalidation
        self.layout: tuple[int, str] | None = None  # (timeline layout version, timeline directory), read once

    def window_start(self):
        """The timestamp from which the timeline may still change: the earliest pending instant, else the newest
        instant (None when there is none)."""
        states: dict[tuple[str, str], str] = {}
        completion_times = self.layout is not None and self.layout[0] >= 2
        for name in self.files:
            inst = Instant.from_file_name(name, completion_times)
            if inst is None:
                continue
            key = (inst.timestamp, inst.comparable_action)
            if key not in states or STATE_ORDER[inst.state] > STATE_ORDER[states[key]]:
                states[key] = inst.state
        pending = [ts for (ts, _action), state in states.items() if state != COMPLETED]
        if pending:
            return min(pending)
        return max((ts for ts, _action in states), default=None)


_SNAPSHOTS: dict[str, _Snapshot] = {}
_SNAPSHOTS_LOCK = threading.Lock()
_CONTENTS: collections.OrderedDict = collections.OrderedDict()  # (uri, name, size) -> bytes of completed instants
_CONTENTS_LOCK = threading.Lock()


def _remember(uri, name, data):
    """Keep the content of a completed instant's file (written once, never changed), by name and size."""
    with _CONTENTS_LOCK:
        _CONTENTS[(uri, name, len(data))] = data
        _CONTENTS.move_to_end((uri, name, len(data)))
        while len(_CONTENTS) > _CONTENT_CACHE_ENTRIES:
            _CONTENTS.popitem(last=False)


def _shared_for(storage):
    if SHARED is False:
        return None
    if SHARED is None:
        from ...storage import LocalStorage

        if isinstance(storage, LocalStorage):
            return None
    with _SNAPSHOTS_LOCK:
        snap = _SNAPSHOTS.get(storage.uri)
        if snap is None:
            snap = _SNAPSHOTS[storage.uri] = _Snapshot()
        return snap


def invalidate(uri=None):
    """Forget what this process cached of a table's timeline (every table's when `uri` is None): the next read is
    a full listing. For a table changed by another process (another writer, once the lease was given back)."""
    with _SNAPSHOTS_LOCK:
        for key in [k for k in _SNAPSHOTS if uri is None or k == uri.rstrip("/")]:
            _SNAPSHOTS[key].listed = False
            _SNAPSHOTS[key].layout = None  # read again: an upgrade moves the timeline
    with _CONTENTS_LOCK:
        for key in [k for k in _CONTENTS if uri is None or k[0] == uri.rstrip("/")]:
            del _CONTENTS[key]


_WRITE_GROUPS = frozenset(COMMIT_ACTIONS)  # a compaction compares as commit, a log compaction as deltacommit


class CommittedInstants(frozenset):
    """The committed instant times a reader counts: the completed commit-like instants (up to `upto` when given),
    and every instant before `start`, where the active timeline begins (`Timeline.timeline_start`).
    Instants before it were archived: their base files and log blocks count as committed, as Hudi's
    `containsOrBeforeTimelineStarts` counts them (a file-system view, the log scanner). Iterating gives the
    completed instants only."""

    start: str | None
    upto: str | None

    def __new__(cls, timestamps=(), start=None, upto=None):
        self = super().__new__(cls, timestamps)
        self.start = start
        self.upto = upto
        return self

    def __contains__(self, ts):
        if frozenset.__contains__(self, ts):
            return True
        return (
            self.start is not None
            and isinstance(ts, str)
            and ts < self.start
            and (self.upto is None or ts <= self.upto)
        )

    def __reduce__(self):
        return (type(self), (frozenset(self), self.start, self.upto))

    def __repr__(self):
        return f"CommittedInstants({sorted(self)!r}, start={self.start!r}, upto={self.upto!r})"

    @classmethod
    def of(cls, committed):
        """`committed` as CommittedInstants: unchanged when it is one (from `Timeline.committed_instants`), else
        exactly the instant times given (no archived instant counts)."""
        if isinstance(committed, CommittedInstants) or committed is None:
            return committed
        return cls(committed)


class Timeline:
    """Instants of a table, one per (timestamp, action group) in its highest state, as Java's layout-1 reader.

    A completed compaction shows as Instant(T, "commit", "completed"); a pending one as action "compaction".
    """

    def __init__(self, storage, layout=None):
        """`layout`: (timeline layout version, timeline directory) when the caller has read hoodie.properties
        (`table.config.timeline_layout`); else read from it here."""
        self.storage = storage_for(storage)
        self.hoodie_dir = self.storage.uri_of(HOODIE_DIR)
        self.instants = []
        self._snapshot = _shared_for(self.storage)
        if self._snapshot is None:
            self.layout, self.dir = layout or timeline_props(self.storage)
        else:  # the shared snapshot parses its file names by the layout too (`window_start`)
            with self._snapshot.lock:
                if layout is not None:
                    self._snapshot.layout = tuple(layout)
                elif self._snapshot.layout is None:
                    self._snapshot.layout = timeline_props(self.storage)
                self.layout, self.dir = self._snapshot.layout
        self.reload(must_exist=True)

    def _parse(self, name):
        return Instant.from_file_name(name, self.layout >= 2)

    def _file(self, name):
        """The path of a timeline file relative to the table root."""
        return f"{self.dir}/{name}"

    def reload(self, must_exist=False):
        """Read the instants again. `must_exist`: an empty listing without a .hoodie directory is an error (a
        timeline whose files were all deleted since is just empty: object stores and local deletes keep no empty
        directory)."""
        snap = self._snapshot
        if snap is None:
            names = [f.name for f in self.storage.list(self.dir)]
        else:
            with snap.lock:
                self._refresh(snap)
                names = list(snap.files)
        if must_exist and not names and not self._exists_at_all():
            raise HoodieTimelineError(f"{self.hoodie_dir}: no .hoodie directory") from None
        self._set_instants(names)
        return self

    def _exists_at_all(self):
        """Whether the table's timeline directory exists: on layout 2 an object store has no `.hoodie/timeline/` before
        the first instant (no directories), so hoodie.properties stands for it."""
        return self.storage.exists(self.dir) or (
            self.dir != HOODIE_DIR and self.storage.exists(f"{HOODIE_DIR}/{PROPERTIES_FILE}")
        )

    def _refresh(self, snap):
        """Bring the shared snapshot up to date: the window from its earliest pending instant on, or everything."""
        start = snap.window_start() if snap.listed else None
        if start is not None:
            listed = {
                f.name: f.size
                for f in self.storage.list(self.dir, start_after=f"{self.dir}/{start}")
                if "/" not in f.path[len(self.dir) + 1 :]
            }
            window = {n for n in snap.files if n > start and self._parse(n) is not None}
            new = [self._parse(n) for n in listed.keys() - snap.files.keys()]
            if window <= listed.keys() and not any(i is not None and i.action in _INVALIDATING for i in new):
                for name in [n for n in snap.files if n > start]:
                    if name not in listed:
                        del snap.files[name]
                snap.files.update(listed)
                return
        snap.files = {f.name: f.size for f in self.storage.list(self.dir)}
        snap.listed = True

    def _added(self, instant, content):
        """Record a timeline file this process just created with `content` (with the lease nothing else writes the
        timeline): its size, and the content of a completed instant, are known without a request. (A completed
        instant's file is not listed again once the listing window has moved past it: without its size, each read
        of it would be a GET.)"""
        snap = self._snapshot
        if snap is None:
            self.reload()
            return
        with snap.lock:
            snap.files[instant.file_name] = len(content)
            names = list(snap.files)
        if instant.state == COMPLETED:
            _remember(self.storage.uri, instant.file_name, content)
        self._set_instants(names)

    def _removed(self, names):
        """Forget timeline files this process just deleted, then read the timeline again."""
        snap = self._snapshot
        if snap is not None:
            with snap.lock:
                for name in names:
                    snap.files.pop(name, None)
        self.reload()

    def _set_instants(self, names):
        latest = {}
        for name in names:
            inst = self._parse(name)
            if inst is None:
                continue
            key = (inst.timestamp, inst.comparable_action)
            cur = latest.get(key)
            if cur is None or STATE_ORDER[inst.state] > STATE_ORDER[cur.state]:
                latest[key] = inst
        self.instants = sorted(latest.values(), key=lambda i: i.sort_key)

    def _path(self, name):
        """The URI of a timeline file, for messages."""
        return self.storage.uri_of(self._file(name))

    def completed(self, actions=None):
        return [i for i in self.instants if i.state == COMPLETED and (actions is None or i.action in actions)]

    def pending(self, actions=None):
        return [i for i in self.instants if i.state != COMPLETED and (actions is None or i.action in actions)]

    def commits_timeline(self):
        """Completed commit, deltacommit and replacecommit instants (completed compactions are commits)."""
        return self.completed(COMMIT_ACTIONS)

    def committed_instants(self, as_of=None):
        """CommittedInstants: the completed commit-like instants (at or before `as_of` when given), and every instant
        older than the active timeline's first write instant of any state (`timeline_start`): archived, committed."""
        return CommittedInstants(
            (i.timestamp for i in self.commits_timeline() if as_of is None or i.timestamp <= as_of),
            self.timeline_start(),
            as_of,
        )

    def timeline_start(self):
        """The time of the first write instant (commit, delta commit, replace commit, compaction, log compaction) in
        any state, None when there is none. Archiving never passes a pending write instant, so an instant older than
        it was archived; a pending one counts as a start, so that its files never read as committed."""
        return min((i.timestamp for i in self.instants if i.comparable_action in _WRITE_GROUPS), default=None)

    def last_instant_time(self):
        """The greatest timestamp on the timeline (any action, any state), or None."""
        return max((i.timestamp for i in self.instants), default=None)

    def get(self, ts):
        """The instant at ts in its highest state (None when absent)."""
        found = [i for i in self.instants if i.timestamp == ts]
        return max(found, key=lambda i: STATE_ORDER[i.state]) if found else None

    def is_completed(self, ts):
        return any(i.timestamp == ts and i.state == COMPLETED for i in self.instants)

    def read_bytes(self, instant):
        key = None
        snap = self._snapshot
        if snap is not None and instant.state == COMPLETED:
            size = snap.files.get(instant.file_name)
            if size is not None and size >= 0:
                key = (self.storage.uri, instant.file_name, size)
                with _CONTENTS_LOCK:
                    data = _CONTENTS.get(key)
                    if data is not None:
                        _CONTENTS.move_to_end(key)
                        return data
        try:
            data = self.storage.read(self._file(instant.file_name))
        except HoodieObjectNotFoundError:
            raise HoodieTimelineError(
                f"{self._path(instant.file_name)}: timeline file of {instant} does not exist"
            ) from None
        if key is not None and len(data) == key[2]:
            _remember(*key[:2], data)
        return data

    def read_commit_metadata(self, ts):
        """CommitMetadata of the completed commit-like instant at ts."""
        for inst in self.commits_timeline():
            if inst.timestamp == ts:
                try:
                    return self._commit_metadata(self.read_bytes(inst))
                except HoodieFormatError as e:
                    raise HoodieFormatError(f"{self._path(inst.file_name)}: {e}") from None
        raise HoodieTimelineError(f"{self.hoodie_dir}: no completed commit at instant {ts}")

    def _commit_metadata(self, data):
        """Commit metadata from a completed instant's bytes: JSON on layout 1, an Avro container on layout 2 (an
        empty file is empty metadata on both)."""
        if self.layout < 2 or not data:
            return CommitMetadata.from_json(data)
        return CommitMetadata.from_avro(read_container(data))

    def completion_times(self):
        """{instant time: completion time} of the completed instants (layout 2; empty on layout 1)."""
        return {i.timestamp: i.completion_time for i in self.instants if i.completion_time is not None}

    def latest_schema(self, as_of=None):
        """The writer's Avro schema (JSON text) recorded by the newest completed commit (at or before `as_of`) that
        records one, or None."""
        for inst in reversed(self.commits_timeline()):
            if as_of is not None and inst.timestamp > as_of:
                continue
            schema = self.read_commit_metadata(inst.timestamp).schema
            if schema:
                return schema
        return None

    def read_avro(self, instant):
        data = self.read_bytes(instant)
        try:
            return read_container(data)
        except HoodieFormatError as e:
            raise HoodieFormatError(f"{self._path(instant.file_name)}: {e}") from None

    # ------------------------------------------------------------------ transitions

    def _file_of(self, ts, action, state):
        """The name of the instant's file in that state, None when absent. A completed instant's name on layout 2
        holds its completion time, so it is found among the listed names by (time, action group)."""
        if self._snapshot is not None:  # refreshed by the caller (`_fresh`)
            names = self._snapshot.files
        elif self.layout >= 2 and state == COMPLETED:
            names = {f.name: f.size for f in self.storage.list(self.dir)}
        else:
            name = Instant(ts, action, state).file_name
            return name if self.storage.exists(self._file(name)) else None
        if self.layout < 2 or state != COMPLETED:
            name = Instant(ts, action, state).file_name
            return name if name in names else None
        group = Instant(ts, action, state).comparable_action
        for name in names:
            if name.startswith(ts):
                inst = self._parse(name)
                if inst is not None and (inst.timestamp, inst.state, inst.comparable_action) == (ts, COMPLETED, group):
                    return name
        return None

    def _exists(self, ts, action, state):
        return self._file_of(ts, action, state) is not None

    def _fresh(self):
        """Before a transition: the shared snapshot read again (one listing of the window), so that `_exists`
        answers from it."""
        if self._snapshot is not None:
            self.reload()

    def _writable(self):
        if self.layout not in (1, 2):
            raise HoodieTimelineError(f"{self.hoodie_dir}: timeline layout {self.layout} is read, not written")

    def encode(self, content):
        """The bytes of a timeline file's content: commit metadata (`CommitMetadata`) in the layout's encoding (JSON
        on layout 1, Avro on layout 2), anything else as it is."""
        if isinstance(content, CommitMetadata):
            return content.to_json() if self.layout < 2 else content.to_avro()
        return bytes(content or b"")

    def _latest_time(self):
        """The greatest instant or completion time on the timeline: a new instant or completion time comes after."""
        return max(
            [i.timestamp for i in self.instants] + [i.completion_time for i in self.instants if i.completion_time],
            default=None,
        )

    def _write_new(self, instant, content):
        """Create a timeline file if absent (the storage's create-if-absent: never overwrites). On layout 2 a
        completed instant's name takes its completion time, now (after every time on the timeline)."""
        self._writable()
        if self.layout >= 2 and instant.state == COMPLETED:
            with NEW_INSTANT_LOCK:
                instant = instant._replace(completion_time=new_instant_time(self._latest_time()))
        try:
            self.storage.create(self._file(instant.file_name), content)
        except HoodieObjectExistsError:
            raise HoodieTimelineError(
                f"{self._path(instant.file_name)}: already exists; refusing to overwrite it"
            ) from None
        return instant

    def _check_not_completed(self, ts, action):
        if self._exists(ts, action, COMPLETED):
            raise HoodieTimelineError(
                f"{self._path(Instant(ts, action, COMPLETED).file_name)}: instant {ts} is already completed"
            )

    def create_requested(self, ts, action, content=b"", _reloaded=False):
        """Add T.<action>.requested; ts must be greater than every instant on the timeline."""
        if not isinstance(ts, str) or not _TIMESTAMP.match(ts):
            raise HoodieTimelineError(f"{self.hoodie_dir}: invalid instant time {ts!r}")
        if not _reloaded:
            self.reload()
        last = self.last_instant_time()
        if last is not None and ts <= last:
            raise HoodieTimelineError(
                f"{self.hoodie_dir}: new instant {ts} ({action}) is not greater than existing instant {last}"
            )
        content = self.encode(content)
        inst = self._write_new(Instant(ts, action, REQUESTED), content)
        self._added(inst, content)
        return inst

    def create_new(self, action, content=b""):
        """Add a requested instant with a new instant time, atomically with respect to the other threads of this
        process (a table service thread and the writer never pick clashing times). Returns the instant time."""
        with NEW_INSTANT_LOCK:
            self.reload()
            ts = new_instant_time(self._latest_time())
            self.create_requested(ts, action, content, _reloaded=True)
            return ts

    def transition_to_inflight(self, ts, action, content=b""):
        """requested -> inflight (the requested file stays, as in layout 1)."""
        self._fresh()
        self._check_not_completed(ts, action)
        if not self._exists(ts, action, REQUESTED):
            raise HoodieTimelineError(
                f"{self._path(Instant(ts, action, REQUESTED).file_name)}: instant {ts} ({action}) is not requested"
            )
        content = self.encode(content)
        inst = self._write_new(Instant(ts, action, INFLIGHT), content)
        self._added(inst, content)
        return inst

    def complete(self, ts, action, content):
        """inflight -> completed, writing the completed file atomically."""
        self._fresh()
        self._check_not_completed(ts, action)
        if not self._exists(ts, action, INFLIGHT):
            raise HoodieTimelineError(
                f"{self._path(Instant(ts, action, INFLIGHT).file_name)}: instant {ts} ({action}) is not inflight"
            )
        content = self.encode(content)
        inst = self._write_new(Instant(ts, action, COMPLETED), content)
        self._added(inst, content)
        return inst

    def revert_to_requested(self, ts, action):
        """inflight -> requested: delete the inflight file (Hudi's revertInstantFromInflightToRequested)."""
        self._writable()
        name = Instant(ts, action, INFLIGHT).file_name
        self.storage.delete(self._file(name))
        self._removed([name])

    def delete_files(self, names):
        """Delete timeline files (names in .hoodie/) one by one in the order given, those already gone included,
        then read the timeline again (the archiver's deletes)."""
        self._writable()
        try:
            for name in names:
                self.storage.delete(self._file(name))
        finally:
            self._removed(list(names))

    def delete_instant_files(self, ts, action, only_pending=True):
        """Remove an instant's files, completed first then inflight then requested (used by rollback)."""
        self._writable()
        self._fresh()
        names = [Instant(ts, action, state).file_name for state in (INFLIGHT, REQUESTED)]
        completed = self._file_of(ts, action, COMPLETED)
        if completed is not None:
            if only_pending:
                raise HoodieTimelineError(f"{self._path(completed)}: instant {ts} is completed; refusing to delete it")
            names.insert(0, completed)
        removed = []
        for name in names:
            if self.storage.delete(self._file(name)):
                removed.append(self._path(name))
        self._removed(names)
        return removed
