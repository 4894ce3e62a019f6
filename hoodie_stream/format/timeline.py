"""The active timeline in .hoodie/ (layout version 1): listing, filtering, atomic state transitions."""

import os
import threading
import re
import uuid

from .avro_models import read_container
from .commit_metadata import CommitMetadata
from ..errors import HoodieFormatError, HoodieTimelineError
from .instant import COMMIT_ACTIONS, COMPLETED, INFLIGHT, REQUESTED, STATE_ORDER, Instant, new_instant_time

_TIMESTAMP = re.compile(r"^\d{14}(\d{3})?$")


NEW_INSTANT_LOCK = threading.RLock()


class Timeline:
    """Instants of a table, one per (timestamp, action group) in its highest state, as Java's layout-1 reader.

    A completed compaction shows as Instant(T, "commit", "completed"); a pending one as action "compaction".
    """

    def __init__(self, base):
        self.base = str(base)
        self.hoodie_dir = os.path.join(self.base, ".hoodie")
        self.instants = []
        self.reload()

    def reload(self):
        try:
            names = os.listdir(self.hoodie_dir)
        except FileNotFoundError:
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
        return os.path.join(self.hoodie_dir, name)

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
        path = self._path(instant.file_name)
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise HoodieTimelineError(f"{path}: timeline file of {instant} does not exist") from None

    def read_commit_metadata(self, ts):
        """CommitMetadata of the completed commit-like instant at ts."""
        for inst in self.commits_timeline():
            if inst.timestamp == ts:
                try:
                    return CommitMetadata.from_json(self.read_bytes(inst))
                except HoodieFormatError as e:
                    raise HoodieFormatError(f"{self._path(inst.file_name)}: {e}") from None
        raise HoodieTimelineError(f"{self.hoodie_dir}: no completed commit at instant {ts}")

    def read_avro(self, instant):
        data = self.read_bytes(instant)
        try:
            return read_container(data)
        except HoodieFormatError as e:
            raise HoodieFormatError(f"{self._path(instant.file_name)}: {e}") from None

    # ------------------------------------------------------------------ transitions

    def _exists(self, ts, action, state):
        return os.path.exists(self._path(Instant(ts, action, state).file_name))

    def _write_new(self, instant, content):
        """Create a timeline file atomically (temp file, fsync, hard link / rename); never overwrites."""
        path = self._path(instant.file_name)
        tmp = self._path(f".{instant.file_name}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as f:
            f.write(content or b"")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise HoodieTimelineError(f"{path}: already exists; refusing to overwrite it") from None
        except OSError:
            if os.path.exists(path):
                raise HoodieTimelineError(f"{path}: already exists; refusing to overwrite it") from None
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return instant

    def _check_not_completed(self, ts, action):
        if self._exists(ts, action, COMPLETED):
            raise HoodieTimelineError(
                f"{self._path(Instant(ts, action, COMPLETED).file_name)}: instant {ts} is already completed")

    def create_requested(self, ts, action, content=b""):
        """Add T.<action>.requested; ts must be greater than every instant on the timeline."""
        if not isinstance(ts, str) or not _TIMESTAMP.match(ts):
            raise HoodieTimelineError(f"{self.hoodie_dir}: invalid instant time {ts!r}")
        self.reload()
        last = self.last_instant_time()
        if last is not None and ts <= last:
            raise HoodieTimelineError(
                f"{self.hoodie_dir}: new instant {ts} ({action}) is not greater than existing instant {last}")
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
                f"{self._path(Instant(ts, action, REQUESTED).file_name)}: instant {ts} ({action}) is not requested")
        inst = self._write_new(Instant(ts, action, INFLIGHT), content)
        self.reload()
        return inst

    def complete(self, ts, action, content):
        """inflight -> completed, writing the completed file atomically."""
        self._check_not_completed(ts, action)
        if not self._exists(ts, action, INFLIGHT):
            raise HoodieTimelineError(
                f"{self._path(Instant(ts, action, INFLIGHT).file_name)}: instant {ts} ({action}) is not inflight")
        inst = self._write_new(Instant(ts, action, COMPLETED), content)
        self.reload()
        return inst

    def delete_instant_files(self, ts, action, only_pending=True):
        """Remove an instant's files, completed first then inflight then requested (used by rollback)."""
        states = [INFLIGHT, REQUESTED]
        if self._exists(ts, action, COMPLETED):
            if only_pending:
                raise HoodieTimelineError(
                    f"{self._path(Instant(ts, action, COMPLETED).file_name)}: instant {ts} is completed; "
                    "refusing to delete it")
            states.insert(0, COMPLETED)
        removed = []
        for state in states:
            path = self._path(Instant(ts, action, state).file_name)
            try:
                os.remove(path)
                removed.append(path)
            except FileNotFoundError:
                pass
        self.reload()
        return removed
