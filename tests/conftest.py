"""Shared test fixtures: the broker fixtures (`../shared/` beside the project root) and storage backends.

`backend` runs a test twice: on a local temporary directory and on a fresh bucket of a real
`moto_server` subprocess (started once per session on a free 127.0.0.1 port, stopped at the end).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from layouts.storage import StorageOptions, filesystem, join

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SHARED = PROJECT_ROOT.parent / "shared"
KAFKA_FIXTURES = SHARED / "fixtures" / "kafka"
FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "klake-test-key",
    "AWS_SECRET_ACCESS_KEY": "klake-test-secret",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def kafka_fixtures() -> Path:
    if not KAFKA_FIXTURES.is_dir():
        pytest.fail(f"shared fixtures not found at {KAFKA_FIXTURES}: CI runs with ../shared beside the clone")
    return KAFKA_FIXTURES


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(url: str, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto_server did not answer at {url} within {timeout_s} s")


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """URL of a moto_server subprocess; fake AWS credentials and the endpoint are in the environment."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in FAKE_AWS_ENV.items():
            mp.setenv(name, value)
        mp.setenv("KLAKE_S3_ENDPOINT_URL", url)
        try:
            _wait_until_up(url, proc)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass(frozen=True)
class Backend:
    """Where a test keeps its objects: `base` is a local directory or `s3://bucket`."""

    name: str
    base: str
    options: StorageOptions

    def uri(self, *parts: str) -> str:
        return join(self.base, *parts)

    def upload_tree(self, local_dir: Path, dest: str, skip_suffixes: tuple[str, ...] = (".jsonl",)) -> str:
        """Copy the files of `local_dir` (recursively) under `dest`, leaving out `skip_suffixes`."""
        fs, root = filesystem(dest, self.options)
        for path in sorted(local_dir.rglob("*")):
            if path.is_file() and not path.name.endswith(skip_suffixes):
                target = f"{root}/{path.relative_to(local_dir).as_posix()}"
                if self.name == "local":
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copyfile(path, target)
                else:
                    fs.pipe_file(target, path.read_bytes())
        return dest

    def put(self, uri: str, data: bytes) -> None:
        """Write (or overwrite) an object directly, bypassing klake's put-if-absent."""
        fs, path = filesystem(uri, self.options)
        if self.name == "local":
            os.makedirs(os.path.dirname(path), exist_ok=True)
        fs.pipe_file(path, data)


@pytest.fixture
def s3_backend(moto_server: str) -> Backend:
    """A fresh, empty bucket on the session's moto_server."""
    options = StorageOptions.from_env()
    bucket = f"klake-{uuid.uuid4().hex[:12]}"
    fs, _ = filesystem(f"s3://{bucket}", options)
    fs.call_s3("create_bucket", Bucket=bucket)
    return Backend("s3", f"s3://{bucket}", options)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """The same test on a local directory and on an S3 bucket (moto_server)."""
    if request.param == "local":
        return Backend("local", str(tmp_path / "store"), StorageOptions())
    return request.getfixturevalue("s3_backend")
