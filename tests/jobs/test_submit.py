"""`klake submit`: spark-submit from the venv with nothing of it on PATH and no Spark variables set, the
way a new user runs it; the Python workers (which decode and write the segments) must be the venv's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.ops.catalog_table import Catalog
from jobs.cli.main import JOBS
from jobs.cli.submit import job_command, quiet_driver, submit_environment
from layouts.store import read_bytes
from layouts.store.bound import Store
from tests.oracles.kafka_python import read_with_kafka_python

KLAKE = Path(sys.executable).parent / "klake"


def test_the_arguments_split_at_the_job_name_and_a_shared_file_gets_its_flag() -> None:
    spark, job = job_command(JOBS, ["--master", "yarn", "--conf", "spark.x=1", "delete-records", "--topic", "t"])
    assert spark == ["--master", "yarn", "--conf", "spark.x=1"]
    assert job[0].endswith("jobs/truncate.py") and job[1:] == ["--delete-records", "--topic", "t"]
    spark, job = job_command(JOBS, ["retention", "--dry-run"])
    assert spark == [] and job[0].endswith("jobs/retention.py") and job[1:] == ["--dry-run"]
    assert quiet_driver([], job)[0] == "--driver-java-options"
    assert quiet_driver([], [*job, "--verbose"]) == []


def test_the_environment_comes_from_the_venv_and_what_is_set_wins() -> None:
    env = submit_environment({"PATH": "/usr/bin"})
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert (Path(env["SPARK_HOME"]) / "bin" / "spark-submit").exists()
    assert submit_environment({"PYSPARK_PYTHON": "/opt/python"})["PYSPARK_PYTHON"] == "/opt/python"


def test_no_job_named_is_one_line_and_exit_2() -> None:
    done = subprocess.run([str(KLAKE), "submit", "--master", "local[1]"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no job named" in done.stderr


@pytest.mark.spark
@pytest.mark.slow
def test_submit_appends_from_a_bare_environment(tmp_path: Path) -> None:
    n = 300
    values = [b"v-%04d" % i for i in range(n)]
    pq.write_table(pa.table({"value": pa.array(values, pa.binary()),
                             "timestamp": pa.array([1_790_000_000_000 + i for i in range(n)], pa.int64())}),
                   tmp_path / "in.parquet")
    root = tmp_path / "root"
    bare = {"HOME": os.environ.get("HOME", str(tmp_path)), "PATH": "/usr/bin:/bin", "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([str(KLAKE), "submit", "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                           "append", "--root", str(root), "--input", str(tmp_path / "in.parquet"), "--topic", "t",
                           "--set", "topics.t.partitions=1", "--now", "1790000001000"],
                          cwd=tmp_path, env=bare, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert f"append: {n} of {n} record(s) appended" in done.stdout
    assert " INFO " not in done.stderr
    rows = Catalog.open(Store(str(root / "_catalog"))).live_segments("t", 0)
    records = [r for row in rows for r in read_with_kafka_python(read_bytes(row.log_key))[0]]
    assert [r[3] for r in records] == values and [r[0] for r in records] == list(range(n))
