"""A short text summary of a table: configuration, completed instants, file groups and row count."""

from .fs_view import FileSystemView
from .reader import HoodieTable


def table_summary(path, storage_options=None):
    table = HoodieTable(path, storage_options)
    cfg = table.config
    lines = [
        f"table {cfg.table_name!r} at {table.path}",
        f"  type {cfg.table_type}, version {cfg.props.get('hoodie.table.version')}, "
        f"record key {','.join(cfg.record_key_fields)}, precombine {cfg.precombine_field or '-'}, "
        f"partitions {','.join(cfg.partition_fields) or '-'}",
    ]
    instants = table.timeline.commits_timeline()
    lines.append(f"  completed commits: {len(instants)}")
    for inst in instants:
        meta = table.timeline.read_commit_metadata(inst.timestamp)
        stats = meta.all_write_stats()
        written = sum(s.num_writes for s in stats)
        deleted = sum(s.num_deletes for s in stats)
        lines.append(
            f"    {inst.timestamp} {inst.action:<13} {meta.operation_type:<8} files {len(stats):>3}  "
            f"writes {written:>7}  deletes {deleted:>5}"
        )
    pending = table.timeline.pending()
    if pending:
        lines.append("  pending: " + ", ".join(f"{i.timestamp}.{i.action}.{i.state}" for i in pending))
    slices = list(FileSystemView(table.storage, table.timeline).latest_slices())
    logs = sum(len(s.log_files) for s in slices)
    with_base = sum(1 for s in slices if s.base_file)
    lines.append(f"  file groups: {len(slices)} ({with_base} with a base file, {logs} log files in latest slices)")
    lines.append(f"  rows (snapshot): {table.read().num_rows}")
    return "\n".join(lines)
