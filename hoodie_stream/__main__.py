"""Command line, modelled on hudi-cli: `python -m hoodie_stream COMMAND ...` (also the `hoodie-stream` script).

    demo                    run the local demo and print the resulting table
    summary PATH            a short summary of a table: configuration, commits, file groups, rows
    timeline PATH           every instant of the active timeline, its state and times
    commits PATH            the completed commits and what they wrote (records, files, bytes, batch id)
    slices PATH             the latest file slice of every file group (base and log file sizes)
    stats PATH              write amplification (records, as hudi-cli's `stats wa`, and bytes) and file sizes
    validate PATH           check files, log blocks, stray files and the index state; exit code 1 on problems
    rollback PATH INSTANT   roll back a pending write or the last completed delta commit
    compact PATH            offline compaction: schedule a plan and/or run pending plans (Spark, local)
    clean PATH              offline cleaning: remove file slices no query needs any more
    upgrade PATH --to 8|9   upgrade a version 6 table to Hudi 1.x's table version 8 or 9 (only when asked)

Every command that takes a table accepts a local path or a URI (`s3://`, `gs://`, `abfss://`, `file://`), as an
argument or as `--path`, and `--storage-option KEY=VALUE` (repeatable; hudi-rs / delta-rs key names, e.g.
aws_endpoint_url=...); the environment (`AWS_*`, `GOOGLE_APPLICATION_CREDENTIALS`, `AZURE_*`) fills in what is not
given. Every command on a table takes `--json` (machine-readable output); the long ones (compact, clean,
validate) show a progress bar on a terminal (tqdm, if installed). Exit codes: 0, 1 (validate found problems),
2 (an error, printed on stderr: `error: ...`, or with `--json` one JSON object `{"error": class, "message": ...}`).
"""

import argparse
import functools
import json
import sys

from .errors import HoodieConfigError, HoodieError


def _print_error(error_class, message, as_json):
    """An error on stderr: `error: [class: ]message`, or with --json the object {"error": class, "message": ...}."""
    if as_json:
        print(json.dumps({"error": error_class, "message": message}), file=sys.stderr)
    else:
        print(f"error: {message}" if error_class is None else f"error: {error_class}: {message}", file=sys.stderr)


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are a JSON object when the command line asks for --json."""

    def __init__(self, *args, json_errors=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.json_errors = json_errors

    def error(self, message):
        if not self.json_errors:
            super().error(message)
        _print_error("ArgumentError", f"{self.prog}: {message}", True)
        sys.exit(2)


def _pairs(values, what):
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise HoodieConfigError(f"{what} {item.split('=', 1)[0]!r}: expected KEY=VALUE")
        out[key] = value
    return out


def _positive(text):
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def _storage_arg(parser):
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="object store credential or endpoint, e.g. aws_endpoint_url=http://127.0.0.1:9000 (repeatable)",
    )


def _option_arg(parser):
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="compaction/clean/lock option, e.g. compaction.max_memory=200 (repeatable)",
    )


def _table_command(sub, name, help_text, long=False):
    """A command on one table: PATH (or --path), --storage-option, --json (and --no-progress for long ones)."""
    parser = sub.add_parser(name, help=help_text)
    parser.add_argument("table", nargs="?", metavar="PATH", help="table path or URI")
    parser.add_argument("--path", help="table path or URI (instead of PATH)")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    if long:
        parser.add_argument("--no-progress", action="store_true", help="no progress bar, even on a terminal")
    _storage_arg(parser)
    return parser


def _parser(json_errors=False):
    parser = _Parser(
        prog="python -m hoodie_stream", description="Hudi table tools (hudi-cli style)", json_errors=json_errors
    )
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=functools.partial(_Parser, json_errors=json_errors)
    )
    demo = sub.add_parser("demo", help="run the local demo and print the resulting table")
    demo.add_argument("--path", help="table directory (default: a new temporary directory)")
    _table_command(sub, "summary", "a summary of a table: configuration, commits, file groups, rows")
    _table_command(sub, "timeline", "the active timeline: every instant, its state and times")
    commits = _table_command(sub, "commits", "completed commits and what they wrote")
    commits.add_argument("--limit", type=_positive, help="only the last N commits")
    slices = _table_command(sub, "slices", "the latest file slice of every file group")
    slices.add_argument("--partition", help="only this partition path")
    _table_command(sub, "stats", "write amplification and file sizes")
    validate = _table_command(sub, "validate", "check the table's files, log blocks and index state", long=True)
    validate.add_argument("--skip-index", action="store_true", help="do not check the index state")
    rollback = _table_command(sub, "rollback", "roll back a pending write or the last completed delta commit")
    rollback.add_argument("instant", help="the instant time to roll back")
    _option_arg(rollback)
    compact = _table_command(sub, "compact", "offline compaction: schedule a plan and/or run pending plans", True)
    compact.add_argument("--schedule", action="store_true", help="write a compaction plan now")
    compact.add_argument("--run", action="store_true", help="execute and commit every pending plan")
    compact.add_argument("--clean", action="store_true", help="run the cleaner after compacting")
    _option_arg(compact)
    clean = _table_command(sub, "clean", "offline cleaning: remove file slices no query needs any more", True)
    _option_arg(clean)
    upgrade = _table_command(sub, "upgrade", "upgrade a version 6 table to Hudi 1.x's table version 8 or 9")
    upgrade.add_argument("--to", type=int, choices=(8, 9), required=True, help="the table version to upgrade to")
    _option_arg(upgrade)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    as_json = "--json" in argv
    parser = _parser(json_errors=as_json)
    args = parser.parse_args(argv)
    if args.command != "demo":
        if (args.table is None) == (args.path is None):
            parser.error(f"{args.command}: give the table as PATH or as --path (once)")
        args.path = args.path or args.table
    try:
        storage_options = _pairs(getattr(args, "storage_option", []), "--storage-option")
        options = _pairs(getattr(args, "option", []), "--option")
        if args.command == "demo":
            from .demo import run_demo

            run_demo(args.path)
        else:
            from .cli.commands import run

            return run(args, storage_options, options)
    except HoodieError as exc:
        _print_error(type(exc).__name__ if as_json else None, str(exc), as_json)
        return 2
    except Exception as exc:  # any other failure (the store, the OS, Spark): still an error, not "problems found"
        _print_error(type(exc).__name__, str(exc), as_json)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
