"""Command line: `python -m hoodie_stream demo [--path P]` and `python -m hoodie_stream summary PATH`."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hoodie_stream")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the local demo and print the resulting table")
    demo.add_argument("--path", help="table directory (default: a new temporary directory)")
    summary = sub.add_parser("summary", help="print a summary of a Hudi table")
    summary.add_argument("path")
    compact = sub.add_parser("compact", help="offline compaction: schedule a plan and/or run pending plans")
    compact.add_argument("--path", required=True, help="table directory")
    compact.add_argument("--schedule", action="store_true", help="write a compaction plan now")
    compact.add_argument("--run", action="store_true", help="execute and commit every pending plan")
    compact.add_argument("--clean", action="store_true", help="run the cleaner after compacting")
    compact.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="compaction/clean option, e.g. compaction.max_memory=200 (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        run_demo(args.path)
    elif args.command == "compact":
        from .compaction.offline import compact_table

        options = dict(o.split("=", 1) for o in args.option)
        schedule, run = args.schedule, args.run
        if not schedule and not run:
            schedule = run = True
        for line in compact_table(args.path, schedule=schedule, run=run, clean_after=args.clean, options=options):
            print(line)
    elif args.command == "summary":
        from .format.summary import table_summary

        print(table_summary(args.path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
