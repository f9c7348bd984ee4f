"""The `klake` command line: one subcommand per capability, each registered by its own module.

A command imports only its own module (the others are imported for `klake --help`): a question the
catalog answers in a second (`offsets-for-times`, `segments`) must not wait for every job's imports.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import version
from types import ModuleType
from typing import TYPE_CHECKING

from kernel.errors import KlakeError
from layouts.store import describe_error

if TYPE_CHECKING:
    from jobs.runtime.job_runner import JobSpec


def _load(name: str) -> ModuleType:
    """Import a command's module; a broken install (the compiled codec not built) is one line, not a traceback."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if "compiled record codec" not in str(exc):
            raise
        print(f"klake: {exc}", file=sys.stderr)
        sys.exit(2)


_load("engine.format.compiled")

# command -> the module registering it; job -> (its module, its spec's name there), in `klake --help` order
_COMMAND_MODULES = {"dump": "jobs.cli.inspect", "verify": "jobs.cli.inspect", "index": "jobs.cli.inspect",
                    "lookup": "jobs.cli.inspect", "segments": "jobs.cli.catalog", "topics": "jobs.cli.topics",
                    "consume": "jobs.cli.topics", "groups": "jobs.cli.groups", "demo": "jobs.demo.command",
                    "submit": "jobs.cli.submit"}
_JOB_SPECS = {"append": ("jobs.append", "SPEC"), "roll": ("jobs.roll", "SPEC"), "retention": ("jobs.retention", "SPEC"),
              "compact": ("jobs.compact", "SPEC"), "truncate": ("jobs.truncate", "SPEC"),
              "delete-records": ("jobs.truncate", "DELETE_RECORDS"), "recover": ("jobs.recover", "SPEC"),
              "rebuild-index": ("jobs.recover", "REBUILD_INDEX"), "import": ("jobs.import_log", "SPEC"),
              "export": ("jobs.export", "SPEC"), "scrub": ("jobs.scrub", "SPEC"),
              "catalog-maintenance": ("jobs.catalog_maintenance", "SPEC"),
              "offsets-for-times": ("jobs.offsets_for_times", "SPEC"), "read": ("jobs.read", "SPEC"),
              "mirror": ("jobs.mirror", "SPEC"), "archive": ("jobs.archive", "SPEC"),
              "restore": ("jobs.restore", "SPEC")}


def job_specs() -> list[JobSpec]:
    """Every job's spec, in `klake --help` order."""
    return [getattr(_load(module), name) for module, name in _JOB_SPECS.values()]


def __getattr__(name: str) -> list[JobSpec]:
    """`JOBS`: every job's spec, imported when first asked for."""
    if name == "JOBS":
        return job_specs()
    raise AttributeError(name)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of `command` alone when it names one, else of every command."""
    from jobs.runtime import job_runner

    parser = argparse.ArgumentParser(
        prog="klake",
        description="Kafka logs on object storage: inspect, index, catalog, retain and compact them.")
    parser.add_argument("--version", action="version", version=f"klake {version('klake')}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command in _JOB_SPECS:
        module, name = _JOB_SPECS[command]
        job_runner.register(commands, getattr(_load(module), name))
        return parser
    modules = [_COMMAND_MODULES[command]] if command in _COMMAND_MODULES else list(dict.fromkeys(_COMMAND_MODULES.values()))
    for module in modules:
        _load(module).register(commands)
    if command not in _COMMAND_MODULES:
        for spec in job_specs():
            job_runner.register(commands, spec)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["submit"]:  # its arguments are spark-submit's, then a job's: argparse cannot split them
        from jobs.cli import submit

        try:
            return submit.run(job_specs(), argv[1:])
        except KlakeError as exc:
            print(f"klake submit: error: {exc}", file=sys.stderr)
            return 2
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KlakeError as exc:
        print(f"klake {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:  # storage an inspection command could not read: one line, as the jobs print it
        print(f"klake {args.command}: error: {type(exc).__name__}: {describe_error(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
