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
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        run_demo(args.path)
    elif args.command == "summary":
        from .format.summary import table_summary

        print(table_summary(args.path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
