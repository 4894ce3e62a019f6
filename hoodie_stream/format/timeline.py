"""The active timeline in .hoodie/ (layout version 1): listing, filtering, atomic state transitions."""

import re
import threading

from ..errors import HoodieFormatError, HoodieObjectExistsError, HoodieObjectNotFoundError, HoodieTimelineError
from ..storage import storage_for
from .avro_models import read_container
from .commit_metadata import CommitMetadata
from .instant import COMMIT_ACTIONS, COMPLETED, INFLIGHT, REQUESTED, STATE_ORDER, Instant, new_instant_time

HOODIE_DIR = ".hoodie"
PROPERTIES_FILE = "hoodie.properties"
_TIMESTAMP = re.compile(r"^\d{14}(\d{3})?$")


NEW_INSTANT_LOCK = threading.RLock()


class Timeline:
    """Instants of a table, one per (timestamp, action group) in its highest state, as Java's layout-1 reader.

    A completed compaction shows as Instant(T, "commit", "completed"); a pending one as action "compaction".
    """

    def __init__(self, storage):
        self.storage = storage_for(storage)
        self.hoodie_dir = self.storage.uri_of(HOODIE_DIR)
        self.instants = []
        self.reload(must_exist=True)

    def reload(self, must_exist=False):
        """Read the instants again. `must_exist`: an empty listing without a .hoodie directory is an error (a
        timeline whose files were all deleted since is just empty: object stores and local deletes keep no empty
        directory)."""
        names = [f.name for f in self.storage.list(HOODIE_DIR)]
        if must_exist and not names and not self.storage.exists(HOODIE_DIR):
            raise HoodieTimelineError(f"{self.hoodie_dir}: no .hoodie directory") from None
        latest = {}
        for name in names:
            inst = Instant.from_file_name(name)
            if inst is None:
                continue
            key = (inst.timestamp, inst.comparable_action)
            cur = latest.get(key)
            if cur is None or STATE_ORDER[inst.state] > STATE_ORDER[cur.state]:
                latest[key] = inst
        self.instants = sorted(latest.values(), key=lambda i: i.sort_key)
        return self

    def _path(self, name):
        """The URI of a timeline file, for messages."""
        return self.storage.uri_of(f"{HOODIE_DIR}/{name}")

    def completed(self, actions=None):
        return [i for i in self.instants if i.state == COMPLETED and (actions is None or i.action in actions)]

    def pending(self, actions=None):
        return [i for i in self.instants if i.state != COMPLETED and (actions is None or i.action in actions)]

    def commits_timeline(self):
        """Completed commit, deltacommit and replacecommit instants (completed compactions are commits)."""
        return self.completed(COMMIT_ACTIONS)

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
        try:
            return self.storage.read(f"{HOODIE_DIR}/{instant.file_name}")
        except HoodieObjectNotFoundError:
            raise HoodieTimelineError(
                f"{self._path(instant.file_name)}: timeline file of {instant} does not exist"
            ) from None

    def read_commit_metadata(self, ts):
        """CommitMetadata of the completed commit-like instant at ts."""
        for inst in self.commits_timeline():
            if inst.timestamp == ts:
                try:
                    return CommitMetadata.from_json(self.read_bytes(inst))
                except HoodieFormatError as e:
                    raise HoodieFormatError(f"{self._path(inst.file_name)}: {e}") from None
        raise HoodieTimelineError(f"{self.hoodie_dir}: no completed commit at instant {ts}")

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

    def _exists(self, ts, action, state):
        return self.storage.exists(f"{HOODIE_DIR}/{Instant(ts, action, state).file_name}")

    def _write_new(self, instant, content):
        """Create a timeline file if absent (the storage's create-if-absent: never overwrites)."""
        try:
            self.storage.create(f"{HOODIE_DIR}/{instant.file_name}", content or b"")
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

    def create_requested(self, ts, action, content=b""):
        """Add T.<action>.requested; ts must be greater than every instant on the timeline."""
        if not isinstance(ts, str) or not _TIMESTAMP.match(ts):
            raise HoodieTimelineError(f"{self.hoodie_dir}: invalid instant time {ts!r}")
        self.reload()
        last = self.last_instant_time()
        if last is not None and ts <= last:
            raise HoodieTimelineError(
                f"{self.hoodie_dir}: new instant {ts} ({action}) is not greater than existing instant {last}"
            )
        inst = self._write_new(Instant(ts, action, REQUESTED), content)
        self.reload()
        return inst

    def create_new(self, action, content=b""):
        """Add a requested instant with a new instant time, atomically with respect to the other threads of this
        process (a table service thread and the writer never pick clashing times). Returns the instant time."""
        with NEW_INSTANT_LOCK:
            self.reload()
            ts = new_instant_time(self.last_instant_time())
            self.create_requested(ts, action, content)
            return ts

    def transition_to_inflight(self, ts, action, content=b""):
        """requested -> inflight (the requested file stays, as in layout 1)."""
        self._check_not_completed(ts, action)
        if not self._exists(ts, action, REQUESTED):
            raise HoodieTimelineError(
                f"{self._path(Instant(ts, action, REQUESTED).file_name)}: instant {ts} ({action}) is not requested"
            )
        inst = self._write_new(Instant(ts, action, INFLIGHT), content)
        self.reload()
        return inst

    def complete(self, ts, action, content):
        """inflight -> completed, writing the completed file atomically."""
        self._check_not_completed(ts, action)
        if not self._exists(ts, action, INFLIGHT):
            raise HoodieTimelineError(
                f"{self._path(Instant(ts, action, INFLIGHT).file_name)}: instant {ts} ({action}) is not inflight"
            )
        inst = self._write_new(Instant(ts, action, COMPLETED), content)
        self.reload()
        return inst

    def revert_to_requested(self, ts, action):
        """inflight -> requested: delete the inflight file (Hudi's revertInstantFromInflightToRequested)."""
        self.storage.delete(f"{HOODIE_DIR}/{Instant(ts, action, INFLIGHT).file_name}")
        self.reload()

    def delete_instant_files(self, ts, action, only_pending=True):
        """Remove an instant's files, completed first then inflight then requested (used by rollback)."""
        states = [INFLIGHT, REQUESTED]
        if self._exists(ts, action, COMPLETED):
            if only_pending:
                raise HoodieTimelineError(
                    f"{self._path(Instant(ts, action, COMPLETED).file_name)}: instant {ts} is completed; "
                    "refusing to delete it"
                )
            states.insert(0, COMPLETED)
        removed = []
        for state in states:
            name = Instant(ts, action, state).file_name
            if self.storage.delete(f"{HOODIE_DIR}/{name}"):
                removed.append(self._path(name))
        self.reload()
        return removed
