"""The `klake` command line: one subcommand per capability, each registered by its own module."""

from __future__ import annotations

import argparse
import sys

from engine.errors import KlakeError

try:
    from jobs import (
        append,
        catalog_maintenance,
        compact,
        export,
        import_log,
        mirror,
        offsets_for_times,
        read,
        recover,
        retention,
        roll,
        scrub,
        truncate,
    )
    from jobs.cli import catalog as cli_catalog
    from jobs.cli import inspect as cli_inspect
    from jobs.cli import submit as cli_submit
    from jobs.demo import command as demo
    from jobs.runtime import job_runner
except ImportError as exc:  # a broken install (the compiled codec not built) is one line, not a traceback
    if "compiled record codec" not in str(exc):
        raise
    print(f"klake: {exc}", file=sys.stderr)
    sys.exit(2)

_COMMAND_MODULES = [cli_inspect, cli_catalog, demo, cli_submit]
JOBS = [append.SPEC, roll.SPEC, retention.SPEC, compact.SPEC, truncate.SPEC, truncate.DELETE_RECORDS, recover.SPEC,
        recover.REBUILD_INDEX, import_log.SPEC, export.SPEC, scrub.SPEC, catalog_maintenance.SPEC,
        offsets_for_times.SPEC, read.SPEC, mirror.SPEC]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="klake",
        description="Kafka logs on object storage: inspect, index, catalog, retain and compact them.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _COMMAND_MODULES:
        module.register(commands)
    for spec in JOBS:
        job_runner.register(commands, spec)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["submit"]:  # its arguments are spark-submit's, then a job's: argparse cannot split them
        try:
            return cli_submit.run(JOBS, argv[1:])
        except KlakeError as exc:
            print(f"klake submit: error: {exc}", file=sys.stderr)
            return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KlakeError as exc:
        print(f"klake {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
