"""Fixtures for the Airflow tests, which run in `.venv-airflow` (Airflow and pyspark cannot share a venv).

Airflow reads its configuration when first imported, so AIRFLOW_HOME (a temporary directory with a
fresh SQLite metadata DB) and the DAGs folder are set here, before any test module imports it. Jobs
are submitted with the project venv's `spark-submit` on `local[2]`, against a `moto_server` run by the
project venv's Python; klake data is prepared and inspected through `klake_store.py` in that venv.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "airflow_dags"
PROJECT_PYTHON = REPO / ".venv" / "bin" / "python"
PROJECT_SPARK_SUBMIT = REPO / ".venv" / "bin" / "spark-submit"
SPARK_CONN_ID = "klake_spark_test"

_AIRFLOW_HOME = tempfile.mkdtemp(prefix="klake-airflow-home-")
os.environ.update({
    "AIRFLOW_HOME": _AIRFLOW_HOME,
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
})
sys.path.insert(0, str(DAGS))

FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "klake-airflow-key",
    "AWS_SECRET_ACCESS_KEY": "klake-airflow-secret",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session", autouse=True)
def airflow_db() -> Iterator[None]:
    """`airflow db migrate` into the session's AIRFLOW_HOME, removed at the end."""
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    yield
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)


def parse_dags():
    """The DAGs parsed as the DAG processor parses a bundle (its root on sys.path)."""
    from airflow.dag_processing.dagbag import BundleDagBag

    return BundleDagBag(dag_folder=DAGS, bundle_path=DAGS, bundle_name="dags-folder")


@pytest.fixture(scope="session")
def dagbag():
    return parse_dags()


@pytest.fixture
def fresh_dag():
    """A newly parsed DAG for each `dag.test()`: in one process a run's conf stays in the DAG's params
    (each task of a real deployment runs in a process of its own), so DAG objects are not shared."""
    return lambda dag_id: parse_dags().get_dag(dag_id)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def project_venv() -> Path:
    if not (PROJECT_PYTHON.exists() and PROJECT_SPARK_SUBMIT.exists()):
        pytest.fail(f"the project venv is missing ({PROJECT_PYTHON}): run `make test-airflow`, which builds it")
    return PROJECT_PYTHON


@pytest.fixture(scope="session")
def spark_environment(project_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The Spark connection and the environment spark-submit inherits from the task.

    The provider accepts only `spark-submit` (or spark2-/spark3-submit) as the connection's
    `spark-binary`, looked up on PATH, so a directory holding a `spark-submit` that runs the project
    venv's goes first on PATH.
    """
    bin_dir = tmp_path_factory.mktemp("spark-bin")
    wrapper = bin_dir / "spark-submit"
    wrapper.write_text(f'#!/bin/sh\nexec "{PROJECT_SPARK_SUBMIT}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    connection = {"conn_type": "spark", "host": "local[2]", "extra": {"spark-binary": "spark-submit"}}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        mp.setenv(f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}", json.dumps(connection))
        mp.setenv("PYSPARK_PYTHON", str(project_venv))
        mp.setenv("PYSPARK_DRIVER_PYTHON", str(project_venv))
        mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        yield


@pytest.fixture(scope="session")
def moto_endpoint(project_venv: Path) -> Iterator[str]:
    """A `moto_server` subprocess; fake credentials and its URL are put in the environment jobs inherit."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([str(project_venv), "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"moto_server exited with code {proc.returncode}")
            try:
                with urllib.request.urlopen(url, timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"moto_server did not answer at {url}")
                time.sleep(0.1)
        with pytest.MonkeyPatch.context() as mp:
            for name, value in FAKE_AWS.items():
                mp.setenv(name, value)
            mp.setenv("KLAKE_S3_ENDPOINT_URL", url)
            yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
