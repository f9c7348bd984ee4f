"""An embedded S3 endpoint for demos and tests: a `moto_server` subprocess on a free loopback port.

Why a subprocess: the in-process `ThreadedMotoServer` hangs under delta-rs with several processes, so
moto runs as its own process, is waited for, and is stopped when the context ends.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "klake-embedded-key",
    "AWS_SECRET_ACCESS_KEY": "klake-embedded-secret",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    def answers() -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with code {proc.returncode}")
        with urllib.request.urlopen(url, timeout=1):
            pass

    polling = Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(0.1), retry=retry_if_exception_type(OSError))
    try:
        polling(answers)
    except RetryError:
        raise RuntimeError(f"moto_server did not answer at {url} within {timeout_s} s") from None


@contextmanager
def moto_server() -> Iterator[str]:
    """Run `moto_server` on 127.0.0.1 and yield its URL; the process is stopped on exit."""
    url = f"http://127.0.0.1:{free_port()}"
    port = url.rsplit(":", 1)[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", port],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_up(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def create_bucket(name: str) -> str:
    """Create a bucket on the configured endpoint (no LocationConstraint: us-east-1 rejects one)."""
    from layouts.store import filesystem

    fs, _ = filesystem(f"s3://{name}")
    fs.call_s3("create_bucket", Bucket=name)
    return f"s3://{name}"


@contextmanager
def embedded_s3_environment() -> Iterator[str]:
    """A moto server plus the environment klake reads (fake credentials, endpoint), restored on exit."""
    saved = {name: os.environ.get(name) for name in [*FAKE_AWS_ENV, "KLAKE_S3_ENDPOINT_URL"]}
    with moto_server() as url:
        os.environ.update(FAKE_AWS_ENV)
        os.environ["KLAKE_S3_ENDPOINT_URL"] = url
        try:
            yield url
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
