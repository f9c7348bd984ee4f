"""Shared test fixtures: the Kafka fixtures (`tests/fixtures/kafka/`, see its README) and storage backends.

`backend` runs a test twice: on a local temporary directory and on a fresh bucket of a real
`moto_server` subprocess (started once per session on a free 127.0.0.1 port, stopped at the end).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobs.runtime.embedded_s3 import create_bucket, embedded_s3_environment
from layouts.aiven_manifest import KEY_RING_ENV
from layouts.store import StorageOptions, filesystem, join
from layouts.store.bound import Store
from tests.kafka_broker import KafkaBroker, start_broker

PROJECT_ROOT = Path(__file__).resolve().parent.parent
KAFKA_FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "kafka"
SESSION_AIVEN_KEY_RING = "aiven-ring"
"""The directory (under the session's temporary base) whose key ring the shared Spark session's workers read."""


@pytest.fixture(scope="session")
def kafka_fixtures() -> Path:
    if not KAFKA_FIXTURES.is_dir():
        pytest.fail(f"Kafka fixtures not found at {KAFKA_FIXTURES}")
    return KAFKA_FIXTURES


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """URL of a moto_server subprocess; fake AWS credentials and the endpoint are in the environment."""
    with embedded_s3_environment() as url:
        yield url


@dataclass(frozen=True)
class Backend:
    """Where a test keeps its objects: `base` is a local directory or `s3://bucket`."""

    name: str
    base: str
    options: StorageOptions

    def uri(self, *parts: str) -> str:
        return join(self.base, *parts)

    def store(self, *parts: str) -> Store:
        """A `Store` bound at `base` (or a key under it) with the backend's options."""
        return Store(self.uri(*parts) if parts else self.base, self.options)

    def upload_tree(self, local_dir: Path, dest: str, skip_suffixes: tuple[str, ...] = (".jsonl", ".jsonl.gz")) -> str:
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
    return Backend("s3", create_bucket(f"klake-{uuid.uuid4().hex[:12]}"), StorageOptions.from_env())


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """The same test on a local directory and on an S3 bucket (moto_server)."""
    if request.param == "local":
        return Backend("local", str(tmp_path / "store"), StorageOptions())
    return request.getfixturevalue("s3_backend")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A real Kafka broker (KRaft, one node, loopback), started for the first test that asks for it."""
    broker = start_broker(tmp_path_factory.mktemp("kafka-broker"))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failing test that used the broker shows the tail of the broker's log."""
    report = yield
    if report.failed and "kafka_broker" in getattr(item, "fixturenames", ()):
        broker = getattr(item, "funcargs", {}).get("kafka_broker")
        if isinstance(broker, KafkaBroker):
            report.sections.append((f"kafka broker log (tail of {broker.log_file})", broker.log_tail()))
    return report


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    """One local[2] Spark session for the whole test session (jobs run in-process reuse it). Its workers get
    the environment it starts with: an Aiven key ring's path (`SESSION_AIVEN_KEY_RING`), for a test that
    writes a ring there and reads encrypted uploads in Spark tasks."""
    from jobs.runtime.config import load_config
    from jobs.runtime.spark_session import spark_session
    from tests.oracles import fetch_jvm

    kafka_source = fetch_jvm.jars("spark-kafka")  # Spark's Kafka source, the parity tests' truth (none: they fail)
    config = load_config(None, ["storage.root=/tmp/klake-unused", "spark.master=local[2]",
                                "spark.conf.spark.ui.enabled=false", "spark.conf.spark.sql.shuffle.partitions=4",
                                *([f"spark.conf.spark.jars={','.join(map(str, kafka_source))}"] if kafka_source else [])])
    os.environ[KEY_RING_ENV] = str(tmp_path_factory.mktemp(SESSION_AIVEN_KEY_RING) / "keyring.properties")
    session = spark_session(config)
    yield session
    session.stop()


@pytest.fixture
def klake_source(spark):
    """The shared session with `format("klake")` registered; `register`'s filter-pushdown setting is unset after."""
    from jobs.klake_source import register

    register(spark)
    yield spark
    spark.conf.unset("spark.sql.python.filterPushdown.enabled")
