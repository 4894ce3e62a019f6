"""File-system view: file groups and file slices of a table, as of an instant.

Visibility follows Java Hudi's file-system view:
- a base file is visible only when its instant is a completed commit-like instant (<= as_of);
- log files belong to the slice named by the base instant in their file name; a slice whose base instant is a
  pending compaction has no base file yet, so its logs are read together with the previous slice;
- file groups replaced by a completed replacecommit are hidden;
- which log blocks count (completed instants, rollback command blocks) is decided when the slice is read.
"""

from dataclasses import dataclass, field

from ..storage import join, storage_for
from .file_names import log_sort_key, parse_base_file_name, parse_log_file_name
from .timeline import Timeline


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
    groups = {}
    for info in storage_for(storage).list(partition):
        name = info.name
        parsed = parse_base_file_name(name)
        if parsed is not None:
            group = groups.setdefault(parsed.file_id, FileGroup(partition, parsed.file_id))
            group.sizes[name] = info.size
            previous = group.base_files.get(parsed.instant)
            # Two base files of one instant: a retried task; Java keeps the one the commit names.
            group.base_files[parsed.instant] = name if previous is None else min(previous, name)
            continue
        parsed = parse_log_file_name(name)
        if parsed is not None and not parsed.is_cdc:
            group = groups.setdefault(parsed.file_id, FileGroup(partition, parsed.file_id))
            group.sizes[name] = info.size
            group.log_files.setdefault(parsed.base_instant, []).append(parsed)
    return [groups[k] for k in sorted(groups)]


class FileSystemView:
    """File slices of a table as of an instant (default: the latest completed one)."""

    def __init__(self, storage, timeline=None, as_of=None):
        self.storage = storage_for(storage)
        self.timeline = timeline or Timeline(self.storage)
        self.as_of = as_of
        completed = self.timeline.commits_timeline()
        self.committed = {i.timestamp for i in completed if as_of is None or i.timestamp <= as_of}
        self.pending_compactions = {
            i.timestamp for i in self.timeline.pending(["compaction"]) if as_of is None or i.timestamp <= as_of
        }
        self.replaced = self._replaced_file_ids(completed)
        self._partitions = None

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
            self._partitions = list_partitions(self.storage)
        return self._partitions

    def file_groups(self, partition=None):
        parts = self.partitions() if partition is None else [partition]
        for p in parts:
            for group in list_file_groups(self.storage, p):
                if (p, group.file_id) not in self.replaced:
                    yield group

    def slices(self, group):
        """Visible slices of a group, oldest first; logs under a pending compaction join the previous slice."""
        result = []
        for instant in group.base_instants():
            if self.as_of is not None and instant > self.as_of:
                continue
            logs = sorted(group.log_files.get(instant, []), key=log_sort_key)
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
