"""The data source names the Python its local workers need, in one line, when theirs cannot run klake."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

pytestmark = [pytest.mark.spark]

SCRIPT = textwrap.dedent("""
    import os, sys
    from pyspark.sql import SparkSession
    from kernel.errors import KlakeError
    from jobs.klake_source import register
    for python in sys.argv[1:]:
        os.environ["PYSPARK_PYTHON"] = python
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        try:
            register(spark)
            print("registered")
        except KlakeError as exc:
            print("error:", exc)
        spark.stop()
""")


def test_register_names_the_python_to_set_when_the_workers_cannot_import_klake(tmp_path: Path) -> None:
    bare = tmp_path / "bare-python"  # a real interpreter without the venv's site-packages
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    bare.chmod(0o755)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(bare), sys.executable, str(tmp_path / "missing")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(("error:", "registered"))]
    assert len(lines) == 3, done.stdout
    assert lines[0].startswith(f"error: Spark's Python workers run '{bare}'")
    assert f"set PYSPARK_PYTHON={sys.executable} before the Spark session starts" in lines[0]
    assert lines[1] == "registered"
    assert "(not found)" in lines[2] and f"PYSPARK_PYTHON={sys.executable}" in lines[2]
