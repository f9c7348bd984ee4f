"""A job's default output is its own summary: Spark's log4j lines stay out unless `--verbose` asks for them.

The job runs as a user runs it, `klake <job>` in a fresh process, so that the JVM it launches reads
the package's log4j2 configuration (a session already running in the test process would not).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import KAFKA_FIXTURES, PROJECT_ROOT

pytestmark = pytest.mark.spark

LOG4J_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR) ")


def klake(*argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "KLAKE_SPARK_LOG_LEVEL"}
    env |= {"PYTHONPATH": str(PROJECT_ROOT), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return subprocess.run([sys.executable, "-m", "jobs.cli.main", *argv, "--no-progress"], cwd=PROJECT_ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


def test_a_job_prints_its_summary_and_no_spark_log_unless_verbose(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    assert klake("import", str(KAFKA_FIXTURES / "broker"), "--root", root).returncode == 0
    spark = ["--master", "local[2]", "--set", "spark.conf.spark.ui.enabled=false"]

    done = klake("recover", "--dry-run", "--root", root, *spark)
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 0, lines
    assert [line for line in lines if LOG4J_LINE.match(line) or "log4j" in line or "NativeCodeLoader" in line
            or "setLogLevel" in line] == []
    summary = done.stdout.splitlines()
    assert len(summary) == 2 and summary[0].startswith("recover: checked 7 segment")
    assert summary[1].startswith("recover succeeded (dry run): 4 partition(s) ok, 0 failed")
    # stderr is empty: not even the JVM's boot notice of the vector module Spark 4's launcher adds (issue 26)
    assert done.stderr == ""

    done = klake("recover", "--dry-run", "--root", root, *spark, "--verbose")
    assert done.returncode == 0, done.stderr
    assert any(LOG4J_LINE.match(line) and " INFO " in line for line in done.stderr.splitlines())
