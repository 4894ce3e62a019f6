"""A short summary of a table: configuration, completed instants, file groups and row count; as a dict
(`summary_of`, what `summary --json` prints) or as text (`summary_text`, `table_summary`)."""

from ..file_group.fs_view import FileSystemView
from ..read.table_reader import TableReader


def summary_of(table):
    """The summary of a HoodieTable as a JSON-ready dict."""
    cfg = table.config
    commits = []
    for inst in table.timeline.commits_timeline():
        meta = table.timeline.read_commit_metadata(inst.timestamp)
        stats = meta.all_write_stats()
        commits.append(
            {
                "instant": inst.timestamp,
                "action": inst.action,
                "operation": meta.operation_type,
                "files": len(stats),
                "records_written": sum(s.num_writes for s in stats),
                "records_deleted": meta.records_deleted,
                "records_moved": meta.records_moved,
            }
        )
    slices = list(FileSystemView(table.storage, table.timeline).latest_slices())
    return {
        "table": cfg.table_name,
        "path": table.path,
        "table_type": cfg.table_type,
        "table_version": cfg.props.get("hoodie.table.version"),
        "record_key_fields": list(cfg.record_key_fields),
        "precombine_field": cfg.precombine_field or None,
        "partition_fields": list(cfg.partition_fields),
        "commits": commits,
        "pending": [f"{i.timestamp}.{i.action}.{i.state}" for i in table.timeline.pending()],
        "file_groups": len(slices),
        "file_groups_with_base_file": sum(1 for s in slices if s.base_file),
        "log_files": sum(len(s.log_files) for s in slices),
        "rows": table.read().num_rows,
    }


def summary_text(info):
    lines = [
        f"table {info['table']!r} at {info['path']}",
        f"  type {info['table_type']}, version {info['table_version']}, "
        f"record key {','.join(info['record_key_fields'])}, precombine {info['precombine_field'] or '-'}, "
        f"partitions {','.join(info['partition_fields']) or '-'}",
        f"  completed commits: {len(info['commits'])}",
    ]
    for c in info["commits"]:
        moved = f"  moves {c['records_moved']:>5}" if c["records_moved"] else ""
        lines.append(
            f"    {c['instant']} {c['action']:<13} {c['operation']:<8} files {c['files']:>3}  "
            f"writes {c['records_written']:>7}  deletes {c['records_deleted']:>5}{moved}"
        )
    if info["pending"]:
        lines.append("  pending: " + ", ".join(info["pending"]))
    lines.append(
        f"  file groups: {info['file_groups']} ({info['file_groups_with_base_file']} with a base file, "
        f"{info['log_files']} log files in latest slices)"
    )
    lines.append(f"  rows (snapshot): {info['rows']}")
    return "\n".join(lines)


def table_summary(path, storage_options=None):
    """The text summary of the table at `path`."""
    return summary_text(summary_of(TableReader(path, storage_options)))
