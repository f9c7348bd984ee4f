"""A job as production runs it: a Spark standalone master and worker on loopback (the venv's own pyspark
distribution), and `spark-submit` given nothing but `make dist`'s wheel, installed into a directory of
its own: no checkout on the driver's or the executors' path, the compiled codec included.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from engine.ops.catalog_table import Catalog
from layouts.store.bound import Store
from tests.conftest import PROJECT_ROOT
from tests.oracles.kafka_python import read_with_kafka_python

pytestmark = [pytest.mark.slow, pytest.mark.spark]

BIN = Path(sys.executable).parent
NOW = 1_790_000_000_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int, process: subprocess.Popen, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout} s")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """A standalone master and one 2-core worker, stopped (process groups killed) afterwards."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp_path / "logs"),
           "PYSPARK_PYTHON": sys.executable}
    port, worker_port = _free_port(), _free_port()
    spark_class = str(BIN / "spark-class")
    started = []
    try:
        master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(port), "--webui-port", str(_free_port())], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        started.append(master)
        _wait_for(port, master, "the master")
        url = f"spark://127.0.0.1:{port}"
        worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                                   "--port", str(worker_port), "--webui-port", str(_free_port()), "--cores", "2",
                                   "--memory", "1g", "--work-dir", str(tmp_path / "work")], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        started.append(worker)
        _wait_for(worker_port, worker, "the worker")
        yield url
    finally:
        for process in started:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(process.pid, signal.SIGKILL)


def test_an_append_runs_on_a_standalone_cluster_from_the_wheel_alone(cluster: str, tmp_path: Path) -> None:
    subprocess.run(["make", "dist"], cwd=PROJECT_ROOT, check=True, capture_output=True, timeout=900)
    wheel = next((PROJECT_ROOT / "dist").glob("klake-*.whl"))
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, timeout=300)
    run = tmp_path / "run"
    run.mkdir()
    launcher = run / "append_job.py"  # what an operator's scheduler holds: the job's entry point, no code
    launcher.write_text("import sys\nimport engine\n"
                        "assert engine.__file__.startswith(sys.argv.pop(1)), engine.__file__\n"
                        "from jobs.append import SPEC\nfrom jobs.runtime.job_runner import main\n"
                        "sys.exit(main(SPEC))\n")
    n = 300
    pq.write_table(pa.table({"key": pa.array([b"k%02d" % (i % 17) for i in range(n)], pa.binary()),
                             "value": pa.array([b"v%04d" % i for i in range(n)], pa.binary()),
                             "timestamp": pa.array([NOW - 60_000 + i for i in range(n)], pa.int64())}),
                   run / "input.parquet")
    (run / "klake.yaml").write_text(yaml.safe_dump({"storage": {"root": str(run / "store")},
                                                    "topics": {"events": {"partitions": 2}}}))
    env = {**os.environ, "PYTHONPATH": str(site), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [str(BIN / "spark-submit"), "--master", cluster, "--conf", "spark.ui.enabled=false",
         "--conf", f"spark.executorEnv.PYTHONPATH={site}", "--conf", "spark.executor.memory=512m",
         "--conf", "spark.sql.shuffle.partitions=2", str(launcher), str(site), "--conf", "klake.yaml",
         "--input", "input.parquet", "--topic", "events", "--now", str(NOW), "--report", "append.json"],
        cwd=run, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    report = json.loads((run / "append.json").read_text())
    assert report["status"] == "succeeded" and report["results"]["records_appended"] == n
    catalog = Catalog.open(Store(str(run / "store" / "_catalog")))
    values = sorted(r[3] for p in range(2) for row in catalog.live_segments("events", p)
                    for r in read_with_kafka_python(Path(row.log_key).read_bytes())[0])
    assert values == [b"v%04d" % i for i in range(n)]
