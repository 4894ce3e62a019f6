"""File-system view: file groups and file slices of a table, as of an instant.

Visibility follows Java Hudi's file-system view:
- a base file is visible only when its instant is a completed commit-like instant (<= as_of);
- log files belong to the slice named by the base instant in their file name; a slice whose base instant is a
  pending compaction has no base file yet, so its logs are read together with the previous slice;
- file groups replaced by a completed replacecommit are hidden;
- which log blocks count (completed instants, rollback command blocks) is decided when the slice is read.
"""

import os
from dataclasses import dataclass, field

from .file_names import log_sort_key, parse_base_file_name, parse_log_file_name
from .timeline import Timeline


@dataclass
class FileSlice:
    partition: str
    file_id: str
    base_instant: str
    base_file: str | None = None
    log_files: list = field(default_factory=list)  # LogFileName tuples, in log order

    def log_file_names(self):
        return [lf.name for lf in self.log_files]

    def relative(self, name):
        return f"{self.partition}/{name}" if self.partition else name

    def base_file_path(self, base):
        return os.path.join(base, self.relative(self.base_file)) if self.base_file else None

    def log_file_paths(self, base):
        return [os.path.join(base, self.relative(lf.name)) for lf in self.log_files]

    def file_size(self, base):
        paths = self.log_file_paths(base) + ([self.base_file_path(base)] if self.base_file else [])
        return sum(os.path.getsize(p) for p in paths if os.path.exists(p))


@dataclass
class FileGroup:
    partition: str
    file_id: str
    base_files: dict = field(default_factory=dict)  # base instant -> base file name
    log_files: dict = field(default_factory=dict)  # base instant -> [LogFileName]

    def base_instants(self):
        return sorted(set(self.base_files) | set(self.log_files))


def list_partitions(base):
    """Relative paths of every directory under base (outside .hoodie) that holds data files."""
    found = []
    for root, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if any(parse_base_file_name(f) or parse_log_file_name(f) for f in files):
            rel = os.path.relpath(root, base)
            found.append("" if rel == "." else rel.replace(os.sep, "/"))
    return sorted(found)


def list_file_groups(base, partition):
    """Every file group of one partition, with all its files (no visibility filtering)."""
    groups = {}
    directory = os.path.join(base, partition) if partition else base
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        parsed = parse_base_file_name(name)
        if parsed is not None:
            group = groups.setdefault(parsed.file_id, FileGroup(partition, parsed.file_id))
            previous = group.base_files.get(parsed.instant)
            # Two base files of one instant: a retried task; Java keeps the one the commit names.
            group.base_files[parsed.instant] = name if previous is None else min(previous, name)
            continue
        parsed = parse_log_file_name(name)
        if parsed is not None and not parsed.is_cdc:
            group = groups.setdefault(parsed.file_id, FileGroup(partition, parsed.file_id))
            group.log_files.setdefault(parsed.base_instant, []).append(parsed)
    return [groups[k] for k in sorted(groups)]


class FileSystemView:
    """File slices of a table as of an instant (default: the latest completed one)."""

    def __init__(self, base, timeline=None, as_of=None):
        self.base = str(base)
        self.timeline = timeline or Timeline(self.base)
        self.as_of = as_of
        completed = self.timeline.commits_timeline()
        self.committed = {i.timestamp for i in completed if as_of is None or i.timestamp <= as_of}
        self.pending_compactions = {
            i.timestamp
            for i in self.timeline.pending(["compaction"])
            if as_of is None or i.timestamp <= as_of
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
            self._partitions = list_partitions(self.base)
        return self._partitions

    def file_groups(self, partition=None):
        parts = self.partitions() if partition is None else [partition]
        for p in parts:
            for group in list_file_groups(self.base, p):
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
            result.append(FileSlice(group.partition, group.file_id, instant, base_name, logs))
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
                yield FileSlice(s.partition, s.file_id, s.base_instant, s.base_file, [])
