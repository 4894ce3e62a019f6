"""Run one parsed command line (`__main__.py` parses it): open the table, call the command's module, print its
result as text or JSON (`--json`). Returns the exit code: 0, or 1 when `validate` found problems."""

from __future__ import annotations

import argparse
from typing import Any

from ..format.hoodie_table import HoodieTable
from ..format.views.summary import summary_of, summary_text
from . import output, rollback, services, show, stats, upgrade, validate


def _table(args: argparse.Namespace, storage_options: dict[str, str]) -> HoodieTable:
    return HoodieTable(args.path, storage_options or None)


def _progress(args: argparse.Namespace) -> bool | None:
    return False if getattr(args, "no_progress", False) else None


def run(args: argparse.Namespace, storage_options: dict[str, str], options: dict[str, str]) -> int:
    as_json = bool(getattr(args, "json", False))
    command = args.command
    result: Any
    if command == "summary":
        result = summary_of(_table(args, storage_options))
        output.emit(result, as_json, summary_text(result))
    elif command == "timeline":
        output.emit(show.timeline(_table(args, storage_options)), as_json)
    elif command == "commits":
        output.emit(show.completed_commits(_table(args, storage_options), args.limit), as_json)
    elif command == "slices":
        output.emit(show.latest_slices(_table(args, storage_options), args.partition), as_json)
    elif command == "stats":
        result = stats.table_stats(_table(args, storage_options))
        output.emit(result, as_json, stats.stats_text(result))
    elif command == "validate":
        report = validate.validate(
            _table(args, storage_options), index=not args.skip_index, show_progress=_progress(args)
        )
        output.emit(report.to_dict(), as_json, report.text())
        return 0 if report.valid else 1
    elif command == "rollback":
        result = rollback.rollback(args.path, args.instant, options, storage_options or None)
        output.emit(result, as_json, rollback.rollback_text(result))
    elif command == "compact":
        echo = None if as_json else print
        result = services.compact(
            args.path, args.schedule, args.run, args.clean, options, storage_options or None, _progress(args), echo
        )
        if as_json:
            output.emit(result, True)
    elif command == "clean":
        result = services.clean(args.path, options, storage_options or None, _progress(args))
        output.emit(result, as_json, f"cleaned {result['files_deleted']} files")
    elif command == "upgrade":
        result = upgrade.upgrade_table(args.path, args.to, options, storage_options or None)
        output.emit(result, as_json, upgrade.upgrade_text(result))
    else:
        raise ValueError(f"unknown command {command!r}")
    return 0
