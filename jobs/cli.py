"""The `klake` command line: one subcommand per capability, each registered by its own module."""

from __future__ import annotations

import argparse
import sys

from engine.errors import KlakeError
from jobs import cli_catalog, cli_inspect, demo

_COMMAND_MODULES = [cli_inspect, cli_catalog, demo]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="klake",
        description="Kafka logs on object storage: inspect, index, catalog, retain and compact them.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
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
