"""Command line: `python -m hoodie_stream demo|summary|compact|clean ...`.

Every command that takes a table accepts a local path or a URI (`s3://`, `gs://`, `abfss://`, `file://`) and
`--storage-option KEY=VALUE` (repeatable; hudi-rs / delta-rs key names, e.g. aws_endpoint_url=...); the
environment (`AWS_*`, `GOOGLE_APPLICATION_CREDENTIALS`, `AZURE_*`) fills in what is not given.
"""

import argparse
import sys

from .errors import HoodieConfigError, HoodieError


def _pairs(values, what):
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise HoodieConfigError(f"{what} {item.split('=', 1)[0]!r}: expected KEY=VALUE")
        out[key] = value
    return out


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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hoodie_stream")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the local demo and print the resulting table")
    demo.add_argument("--path", help="table directory (default: a new temporary directory)")
    summary = sub.add_parser("summary", help="print a summary of a Hudi table")
    summary.add_argument("path")
    _storage_arg(summary)
    compact = sub.add_parser("compact", help="offline compaction: schedule a plan and/or run pending plans")
    compact.add_argument("--path", required=True, help="table path or URI")
    compact.add_argument("--schedule", action="store_true", help="write a compaction plan now")
    compact.add_argument("--run", action="store_true", help="execute and commit every pending plan")
    compact.add_argument("--clean", action="store_true", help="run the cleaner after compacting")
    _option_arg(compact)
    _storage_arg(compact)
    clean = sub.add_parser("clean", help="offline cleaning: remove file slices no query needs any more")
    clean.add_argument("--path", required=True, help="table path or URI")
    _option_arg(clean)
    _storage_arg(clean)
    args = parser.parse_args(argv)
    try:
        storage_options = _pairs(getattr(args, "storage_option", []), "--storage-option")
        options = _pairs(getattr(args, "option", []), "--option")
        if args.command == "demo":
            from .demo import run_demo

            run_demo(args.path)
        elif args.command == "compact":
            from .compaction.offline import compact_table

            schedule, run = args.schedule, args.run
            if not schedule and not run:
                schedule = run = True
            for line in compact_table(
                args.path,
                schedule=schedule,
                run=run,
                clean_after=args.clean,
                options=options,
                storage_options=storage_options,
            ):
                print(line)
        elif args.command == "clean":
            from .compaction.offline import clean_table

            print(f"cleaned {clean_table(args.path, options, storage_options)} files")
        elif args.command == "summary":
            from .format.summary import table_summary

            print(table_summary(args.path, storage_options))
    except HoodieError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
