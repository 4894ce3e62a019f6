"""File-system view: file groups and file slices of a table, as of an instant.

Visibility follows Java Hudi's file-system view:
- a base file is visible only when its instant is a completed commit-like instant (<= as_of), or is older than the
  active timeline's first write instant (archived: committed, as Hudi's containsOrBeforeTimelineStarts has it);
- log files belong to a slice: on table version 6 the one named by the base instant in their file name; on
  versions 8 and 9 (Hudi 1.x) the name carries the delta commit that wrote the file, and the file joins the slice
  with the greatest base instant at or before that commit's completion time (`_logs_by_slice`); a slice whose base
  instant is a pending compaction has no base file yet, so its logs are read together with the previous slice;
- file groups replaced by a completed replacecommit are hidden;
- which log blocks count (completed instants, rollback command blocks) is decided when the slice is read.

On an object store the file listings are cached per table in the process (`_Listings`), as Hudi's incremental
file-system view sync: a partition is listed the first time a view asks for it, then kept up to date from the
metadata of the instants completed since: the files a commit, delta commit, replace commit or compaction wrote
(its write stats, with their sizes), the files a clean or a rollback deleted (and the log files a rollback
appended to). A completed instant the cache had applied that is no longer on the timeline, a restore, or an
action it does not know, and the whole cache is listed again. Files of instants still pending are not in the cache
once it has been synced past them (a listing shows them; the view never makes them visible: base files only of
completed instants, log blocks filtered when read). Local tables are listed each time (`SHARED`).
"""

import bisect
import threading
from dataclasses import dataclass, field

from ...errors import HoodieError
from ...storage import LocalStorage, join, storage_for
from ..timeline.active_timeline import Timeline
from ..timeline.instant import COMMIT_ACTIONS, COMPACTION, REQUESTED, Instant
from .file_names import log_sort_key, parse_base_file_name, parse_log_file_name

# the process-wide listing cache: None = for object stores only, True/False = always/never
SHARED: bool | None = None


@dataclass
class FileSlice:
    partition: str
    file_id: str
    base_instant: str
    base_file: str | None = None
    log_files: list = field(default_factory=list)  # LogFileName tuples, in log order
    sizes: dict = field(default_factory=dict, compare=False)  # file name -> bytes, as listed

    @property
    def base_size(self):
        return self.sizes.get(self.base_file, 0) if self.base_file else 0

    @property
    def log_sizes(self):
        return [self.sizes.get(lf.name, 0) for lf in self.log_files]

    @property
    def file_size(self):
        """Bytes of the slice's base file and log files."""
        return self.base_size + sum(self.log_sizes)

    def log_file_names(self):
        return [lf.name for lf in self.log_files]

    def relative(self, name):
        """The path of one of this slice's files relative to the table root."""
        return join(self.partition, name)

    @property
    def base_file_path(self):
        return self.relative(self.base_file) if self.base_file else None

    @property
    def log_file_paths(self):
        return [self.relative(lf.name) for lf in self.log_files]


@dataclass
class FileGroup:
    partition: str
    file_id: str
    base_files: dict = field(default_factory=dict)  # base instant -> base file name
    log_files: dict = field(default_factory=dict)  # base instant -> [LogFileName]
    cdc_files: dict = field(default_factory=dict)  # base instant -> [name] of its `.cdc` files (not data)
    sizes: dict = field(default_factory=dict, compare=False)  # file name -> bytes, as listed

    def base_instants(self):
        return sorted(set(self.base_files) | set(self.log_files))


def list_partitions(storage):
    """Relative paths of every directory under the table root (outside .hoodie, the one directory Hudi's listing skips:
    a partition may start with '.') that holds data files."""
    storage = storage_for(storage)
    found = []
    pending = [""]
    while pending:
        path = pending.pop()
        if any(parse_base_file_name(f.name) or parse_log_file_name(f.name) for f in storage.list(path)):
            found.append(path)
        pending.extend(join(path, d) for d in storage.list_dirs(path) if d != ".hoodie")
    return sorted(found)


def list_file_groups(storage, partition):
    """Every file group of one partition, with all its files (no visibility filtering)."""
    return file_groups_of(partition, ((info.name, info.size) for info in storage_for(storage).list(partition)))


def file_groups_of(partition, files):
    """The file groups of a partition holding `files` ((name, size) pairs)."""
    groups = {}
    for name, size in files:
        parsed = parse_base_file_name(name)
        if parsed is not None:
            group = groups.setdefault(parsed.file_id, FileGroup(partition, parsed.file_id))
            group.sizes[name] = size
            previous = group.base_files.get(parsed.instant)
            # Two base files of one instant: a retried task; Java keeps the one the commit names.
            group.base_files[parsed.instant] = name if previous is None else min(previous, name)
            continue
        parsed = parse_log_file_name(name)
        if parsed is not None:
            group = groups.setdefault(parsed.file_id, FileGroup(partition, parsed.file_id))
            group.sizes[name] = size
            if parsed.is_cdc:
                group.cdc_files.setdefault(parsed.base_instant, []).append(name)
            else:
                group.log_files.setdefault(parsed.base_instant, []).append(parsed)
    return [groups[k] for k in sorted(groups)]


class FileSystemView:
    """File slices of a table as of an instant (default: the latest completed one)."""

    def __init__(self, storage, timeline=None, as_of=None):
        self.storage = storage_for(storage)
        self.timeline = timeline or Timeline(self.storage)
        self.as_of = as_of
        completed = self.timeline.commits_timeline()
        # completed commit-like instants, and the archived ones before the active timeline (Hudi's
        # containsOrBeforeTimelineStarts): a base file or log block of an archived instant is committed
        self.committed = self.timeline.committed_instants(as_of)
        self.pending_compactions = {
            i.timestamp for i in self.timeline.pending(["compaction"]) if as_of is None or i.timestamp <= as_of
        }
        self.replaced = self._replaced_file_ids(completed)
        # layout 2: {delta commit instant: completion time}, by which log files join slices
        self.completion = self.timeline.completion_times() if self.timeline.layout >= 2 else None
        self._compacted_groups: dict[str, set] = {}  # pending compaction instant -> {(partition, file id)} planned
        self._partitions = None
        self._listings = _listings_for(self.storage)
        self._synced = False

    def _cache(self):
        """The table's shared listings, brought up to date with this view's timeline (None: not cached)."""
        if self._listings is not None and not self._synced:
            self._listings.sync(self.storage, self.timeline)
            self._synced = True
        return self._listings

    def _replaced_file_ids(self, completed):
        replaced = set()
        for inst in completed:
            if inst.action != "replacecommit" or (self.as_of is not None and inst.timestamp > self.as_of):
                continue
            meta = self.timeline.read_commit_metadata(inst.timestamp)
            for partition, ids in (meta.partition_to_replace_file_ids or {}).items():
                replaced.update((partition, fid) for fid in ids)
        return replaced

    def partitions(self):
        if self._partitions is None:
            cache = self._cache()
            self._partitions = list_partitions(self.storage) if cache is None else cache.partitions(self.storage)
        return self._partitions

    def file_groups(self, partition=None):
        parts = self.partitions() if partition is None else [partition]
        cache = self._cache()
        for p in parts:
            if cache is None:
                groups = list_file_groups(self.storage, p)
            else:
                groups = file_groups_of(p, cache.files(self.storage, p).items())
            for group in groups:
                if (p, group.file_id) not in self.replaced:
                    yield group

    def _planned(self, instant):
        """The (partition, file id) pairs a pending compaction's plan compacts."""
        if instant not in self._compacted_groups:
            plan = self.timeline.read_avro(Instant(instant, COMPACTION, REQUESTED))
            self._compacted_groups[instant] = {
                (op.get("partitionPath") or "", op.get("fileId")) for op in plan.get("operations") or []
            }
        return self._compacted_groups[instant]

    def _logs_by_slice(self, group):
        """{base instant: log files} of a group. Table version 6: the base instant a log file's name carries. Versions
        8 and 9, as Hudi 1.x's file group (HoodieFileGroup.addLogFile) slices them: the slices are those of the
        committed base files and of the pending compactions that plan the group; in log order, a file whose delta
        commit completed joins the slice with the greatest base instant at or before its completion time (a new slice
        at the commit's own instant when there is none), a file of a commit not completed joins the latest slice. A
        commit older than the active timeline (archived, committed: its completion time is in the history, not read
        here) counts as completed at its own instant time."""
        if self.completion is None:
            return group.log_files
        keys = sorted(
            {i for i in group.base_files if i in self.committed}
            | {c for c in self.pending_compactions if (group.partition, group.file_id) in self._planned(c)}
        )
        out: dict[str, list] = {}
        for log in sorted((lf for logs in group.log_files.values() for lf in logs), key=log_sort_key):
            delta = log.base_instant
            done = self.completion.get(delta)
            if done is None and delta in self.committed:
                done = delta
            if done is None and keys:
                key = keys[-1]
            else:
                at = bisect.bisect_right(keys, done) if done is not None else 0
                if at:
                    key = keys[at - 1]
                else:
                    key = delta
                    bisect.insort(keys, key)
            out.setdefault(key, []).append(log)
        return out

    def slices(self, group):
        """Visible slices of a group, oldest first; logs under a pending compaction join the previous slice."""
        result = []
        by_slice = self._logs_by_slice(group)
        for instant in sorted(set(group.base_files) | set(by_slice)):
            if self.as_of is not None and instant > self.as_of:
                continue
            logs = sorted(by_slice.get(instant, []), key=log_sort_key)
            base_name = group.base_files.get(instant) if instant in self.committed else None
            if base_name is None and instant in self.pending_compactions and result:
                result[-1].log_files.extend(logs)
                continue
            if base_name is None and not logs:
                continue  # a base file of an uncommitted write, nothing else
            result.append(FileSlice(group.partition, group.file_id, instant, base_name, logs, group.sizes))
        return result

    def latest_slices(self, partition=None):
        for group in self.file_groups(partition):
            slices = self.slices(group)
            if slices:
                yield slices[-1]

    def latest_base_files(self, partition=None):
        """Latest slice of every group that has a committed base file, logs ignored (read-optimized)."""
        for group in self.file_groups(partition):
            with_base = [s for s in self.slices(group) if s.base_file]
            if with_base:
                s = with_base[-1]
                yield FileSlice(s.partition, s.file_id, s.base_instant, s.base_file, [], s.sizes)


# -- the shared listings -------------------------------------------------------------------------------------
_LISTINGS: dict[str, "_Listings"] = {}
_LISTINGS_LOCK = threading.Lock()


def _listings_for(storage):
    if SHARED is False or (SHARED is None and isinstance(storage, LocalStorage)):
        return None
    with _LISTINGS_LOCK:
        listings = _LISTINGS.get(storage.uri)
        if listings is None:
            listings = _LISTINGS[storage.uri] = _Listings()
        return listings


def invalidate(uri=None):
    """Forget the cached listings of a table (of every table when `uri` is None): listed again when next asked."""
    with _LISTINGS_LOCK:
        for key in [k for k in _LISTINGS if uri is None or k == uri.rstrip("/")]:
            _LISTINGS[key].reset()


def _name(path):
    return str(path).replace("\\", "/").rpartition("/")[2]


class _Listings:
    """The data files of a table's partitions (name -> size), as listed once and changed since by the completed
    instants' metadata; `applied` holds the completed instants whose changes are in."""

    def __init__(self):
        self.lock = threading.RLock()
        self.reset()

    def reset(self):
        with getattr(self, "lock", threading.RLock()):
            self.applied: set[tuple[str, str]] | None = None  # None: nothing known
            self.known: set[str] | None = None  # partitions found by the walk and by commits since
            self.parts: dict[str, dict[str, int]] = {}  # listed partitions

    def sync(self, storage, timeline):
        with self.lock:
            completed = [i for i in timeline.completed()]
            keys = {(i.timestamp, i.action) for i in completed}
            if self.applied is None or not self.applied <= keys:
                self.reset()
                self.applied = keys  # partitions listed from now on hold what these instants left
                return
            for inst in completed:
                key = (inst.timestamp, inst.action)
                if key in self.applied:
                    continue
                try:
                    ok = self._apply(timeline, inst)
                except HoodieError:
                    ok = False
                if not ok:
                    self.reset()
                    self.applied = keys
                    return
                self.applied.add(key)

    def _apply(self, timeline, inst):
        """Apply one completed instant's file changes; False when it cannot be followed (list again)."""
        if inst.action in COMMIT_ACTIONS:
            meta = timeline.read_commit_metadata(inst.timestamp)
            for partition, stats in meta.partition_to_write_stats.items():
                for stat in stats:
                    if not stat.path:
                        continue
                    part = stat.partition_path if stat.partition_path is not None else partition
                    self._add(part or "", _name(stat.path), int(stat.file_size_in_bytes or 0))
                    for path, size in (stat.cdc_stats or {}).items():
                        self._add(part or "", _name(path), int(size or 0))
            return True
        if inst.action in ("clean", "rollback"):
            meta = timeline.read_avro(inst)
            records = meta if isinstance(meta, list) else [meta]
            for record in records:
                for partition, pm in (record.get("partitionMetadata") or {}).items():
                    part = pm.get("partitionPath", partition) or ""
                    files = self.parts.get(part)
                    if files is None:
                        continue
                    for path in pm.get("successDeleteFiles") or []:
                        files.pop(_name(path), None)
                    for path, size in (pm.get("rollbackLogFiles") or {}).items():
                        files[_name(path)] = int(size)
            return True
        return inst.action in ("savepoint", "indexing", "schemacommit")  # no data file changes

    def _add(self, partition, name, size):
        if self.known is not None:
            self.known.add(partition)
        files = self.parts.get(partition)
        if files is not None:
            files[name] = size

    def partitions(self, storage):
        with self.lock:
            if self.known is None:
                self.known = set(list_partitions(storage))
            return sorted(p for p in self.known if self.files(storage, p))

    def files(self, storage, partition):
        with self.lock:
            files = self.parts.get(partition)
            if files is None:
                files = self.parts[partition] = {
                    info.name: info.size
                    for info in storage_for(storage).list(partition)
                    if parse_base_file_name(info.name) or parse_log_file_name(info.name)
                }
                if files and self.known is not None:
                    self.known.add(partition)
            return files
