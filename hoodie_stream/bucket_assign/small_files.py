"""Small-file profile, computed by the coordinator before each micro-batch.

A file slice is small when base size + log size x `hoodie.logfile.to.parquet.compression.ratio` is under the max
file size; its free capacity in records comes from the average record size of recent commits. Each small file
group is owned by exactly one bucket-assign task (a stable hash of its file id), so no two tasks ever write one
file group in a micro-batch.
"""

import zlib

from ..format.file_group.fs_view import FileSystemView

RECENT_COMMITS = 5


def owner_task(file_id, num_tasks):
    return zlib.crc32(file_id.encode("utf-8")) % num_tasks


def recent_write_commits(timeline, limit=RECENT_COMMITS):
    """CommitMetadata of the `limit` most recent delta commits that wrote records, newest first (compactions
    are skipped: they rewrite records as parquet, with footers; new records arrive as log records)."""
    out = []
    for inst in reversed(timeline.commits_timeline()):
        meta = timeline.read_commit_metadata(inst.timestamp)
        if meta.compacted:
            continue
        if sum(s.records for s in meta.all_write_stats()) <= 0:
            continue
        out.append(meta)
        if len(out) >= limit:
            break
    return out


def average_record_size(commits, default):
    """Bytes per record written by the given commits (`recent_write_commits`); `default` until known."""
    total_bytes = total_records = 0
    for meta in commits:
        total_records += sum(s.records for s in meta.all_write_stats())
        total_bytes += sum(s.total_write_bytes or 0 for s in meta.all_write_stats())
    if total_records <= 0 or total_bytes <= 0:
        return float(default)
    return max(1.0, total_bytes / total_records)


def small_file_profile(storage, timeline, max_file_size, ratio, record_size, num_tasks):
    """{task index: {partition: [(file id, base instant, base file name or "", capacity in records)]}}."""
    view = FileSystemView(storage, timeline)
    owners = {}
    for fs in view.latest_slices():
        size = fs.base_size + sum(fs.log_sizes) * ratio
        if size >= max_file_size:
            continue
        capacity = int((max_file_size - size) / record_size)
        if capacity <= 0:
            continue
        task = owner_task(fs.file_id, num_tasks)
        owners.setdefault(task, {}).setdefault(fs.partition, []).append(
            (fs.file_id, fs.base_instant, fs.base_file or "", capacity)
        )
    for parts in owners.values():
        for files in parts.values():
            files.sort(key=lambda f: f[0])
    return owners
