"""`klake submit [SPARK-SUBMIT OPTIONS] JOB [JOB OPTIONS]`: spark-submit a job from this environment.

`spark-submit jobs/<job>.py` needs Spark's home and a Python that has klake: run from a virtualenv
that is not on PATH it fails (`Could not find valid SPARK_HOME`), and Spark's Python workers start
the first `python3` on PATH, which lacks pyarrow. This wrapper runs the pyspark installation's own
`spark-submit` with SPARK_HOME, PATH and PYSPARK_PYTHON/PYSPARK_DRIVER_PYTHON taken from the Python
that runs klake (what is set already wins: a cluster's own executor Python, say). The options before
the job's name go to spark-submit (`--master yarn`, `--conf spark.x=y`, ...), the rest to the job.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from jobs.runtime.job_runner import JobSpec
from jobs.runtime.spark_session import LOG4J2_PROPERTIES
from kernel.errors import KlakeError

USAGE = "klake submit [SPARK-SUBMIT OPTIONS] JOB [JOB OPTIONS]"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Listed in `klake --help`; the arguments are split by `run` (argparse cannot split them)."""
    subparsers.add_parser("submit", help="spark-submit a job with this environment's Spark and Python",
                          description=__doc__, usage=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)


def spark_home() -> Path:
    """The Spark that ships with this environment's pyspark."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def job_command(jobs: Sequence[JobSpec], argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(spark-submit options, the job's file and its options): split at the first word naming a job.

    A job that shares its file with another (`delete-records` in `jobs/truncate.py`) is selected by
    the file's `--<name>` flag, as its own spark-submit entry point expects."""
    by_name = {spec.name: spec for spec in jobs}
    for at, word in enumerate(argv):
        spec = by_name.get(word)
        if spec is None:
            continue
        module = sys.modules[spec.run.__module__]
        entry = [str(Path(module.__file__ or "").resolve())]
        if getattr(module, "SPEC", None) is not spec:
            entry.append(f"--{spec.name}")
        return list(argv[:at]), entry + list(argv[at + 1:])
    raise KlakeError(f"no job named in {' '.join(argv)!r}: {USAGE}; jobs: {', '.join(sorted(by_name))}")


def submit_environment(environ: dict[str, str]) -> dict[str, str]:
    """SPARK_HOME, PATH and the Pythons for a spark-submit from this environment; set values win."""
    python = sys.executable
    env = dict(environ)
    env.setdefault("SPARK_HOME", str(spark_home()))
    env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])
    env.setdefault("PYSPARK_PYTHON", python)
    env.setdefault("PYSPARK_DRIVER_PYTHON", python)
    return env


def quiet_driver(spark_options: Sequence[str], job: Sequence[str]) -> list[str]:
    """The driver JVM logs through klake's log4j2 setup (warnings and errors), as `klake <job>` does,
    unless the job is `--verbose` or the options set the driver's Java options themselves."""
    if "--verbose" in job or any(o.startswith("--driver-java-options") for o in spark_options):
        return []
    return ["--driver-java-options", f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES.as_uri()}"]


def run(jobs: Sequence[JobSpec], argv: Sequence[str]) -> int:
    """Replace this process with spark-submit (its exit code is the job's)."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip() if argv else f"usage: {USAGE}", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    spark_options, job = job_command(jobs, argv)
    env = submit_environment(dict(os.environ))
    command = [str(Path(env["SPARK_HOME"]) / "bin" / "spark-submit"), *quiet_driver(spark_options, job),
               *spark_options, *job]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, env)
