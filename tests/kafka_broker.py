"""A real Apache Kafka broker for the tests: one KRaft node (controller and broker) on 127.0.0.1 (issue 27).

`tests/conftest.py` makes it the session fixture `kafka_broker`: started the first time a test asks for it
(the rest of the suite pays nothing) from the pinned `kafka` set of `tests/oracles/fetch_jvm.py`, stopped at
the session's end. Its log is kept in `<tmp>/broker.log`; a failing test that used it shows the log's tail.

Broker configs are chosen for fast, small tests: one partition per topic, the internal topics with a
replication factor of 1, no initial rebalance delay, a retention check every second and a cleaner that
backs off 200 ms. Kafka 4 refuses a `segment.bytes` below 1 MiB; `internal.segment.bytes` (LogConfig's
internal override, meant for tests) is what `create_topic(segment_bytes=...)` sets to get many small segments.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.oracles import fetch_jvm

START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60
LOG_TAIL_LINES = 60

_LOG4J2 = """\
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.cleaner.name = org.apache.kafka.storage.internals.log.LogCleaner
logger.cleaner.level = INFO
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_id() -> str:
    """A random cluster id as Kafka writes one (`Uuid.randomUuid().toString()`: URL-safe base64, no padding,
    never starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


SASL_USER = ("klake", "klake-secret")
"""The one user of the broker's SASL_PLAINTEXT listener (PLAIN): name and password."""


@dataclass
class KafkaBroker:
    """A single-node KRaft broker in its own JVM; `start`, `stop` and `restart` it (the log dir stays).
    `configs` adds or overrides broker configs (the benchmarks' cleaner settings); `heap` is its JVM's -Xmx."""

    workdir: Path
    classpath: str
    broker_port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    sasl_port: int = field(default_factory=free_port)
    """A SASL_PLAINTEXT listener (PLAIN, the one user `SASL_USER`): tests of clients' credentials."""
    extra_configs: dict[str, str] = field(default_factory=dict)
    """Broker configs added to (or overriding) the defaults below: a dedicated broker's own, e.g. tiered storage."""
    heap: str = "512m"
    process: subprocess.Popen | None = None
    start_seconds: list[float] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def log_file(self) -> Path:
        return self.workdir / "broker.log"

    @property
    def properties_file(self) -> Path:
        return self.workdir / "server.properties"

    def topic_dir(self, topic: str, partition: int = 0) -> Path:
        return self.log_dir / f"{topic}-{partition}"

    def _java(self, main: str, *args: str, heap: str = "256m") -> list[str]:
        return ["java", f"-Xmx{heap}", "-XX:+UseSerialGC", "-cp", self.classpath,
                f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}", main, *args]

    def configure(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.broker_port},CONTROLLER://127.0.0.1:{self.controller_port},"
                         f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.broker_port},"
                                    f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{SASL_USER[0]}" password="{SASL_USER[1]}" user_{SASL_USER[0]}="{SASL_USER[1]}";',
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.retention.check.interval.ms": "1000",
            "log.cleaner.backoff.ms": "200",
            "log.flush.offset.checkpoint.interval.ms": "1000",
            **self.extra_configs,
        }
        self.properties_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        done = subprocess.run(self._java("kafka.tools.StorageTool", "format", "-t", cluster_id(),
                                         "-c", str(self.properties_file)),
                              capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"kafka StorageTool format failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> None:
        """Start the JVM and wait until the broker is RUNNING and answers on its port."""
        begun = time.monotonic()
        offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(self._java("kafka.Kafka", str(self.properties_file), heap=self.heap),
                                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        while b"Kafka Server started" not in self._log_bytes(offset):
            if self.process.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited with code {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() - begun > START_TIMEOUT_S:
                self.stop()
                raise RuntimeError(f"the Kafka broker did not start within {START_TIMEOUT_S} s:\n{self.log_tail()}")
            time.sleep(0.1)
        with socket.create_connection(("127.0.0.1", self.broker_port), timeout=10):
            pass
        self.start_seconds.append(time.monotonic() - begun)

    def stop(self) -> None:
        """A clean shutdown (SIGTERM: the broker flushes, writes its checkpoints and the clean-shutdown marker)."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_S)
        self.process = None

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """The broker cleanly stopped for the block (its log dir quiet and complete), then started again."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def rss_bytes(self) -> int:
        """The broker JVM's resident memory (from /proc)."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def _log_bytes(self, offset: int = 0) -> bytes:
        with self.log_file.open("rb") as f:
            f.seek(offset)
            return f.read()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        if not self.log_file.exists():
            return "(no broker log)"
        return "\n".join(self._log_bytes().decode(errors="replace").splitlines()[-lines:])

    # -- clients (kafka-python)
    def admin(self):
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=30_000)

    def create_topic(self, name: str, *, partitions: int = 1, segment_bytes: int | None = None,
                     **configs: str | int) -> str:
        """Create `name` (a per-test name) with topic configs given as keyword arguments, dots as '_'
        (`cleanup_policy="compact"`); `segment_bytes` below Kafka's 1 MiB floor goes to `internal.segment.bytes`.
        Returns once the broker has made the partitions' directories."""
        from kafka.admin import NewTopic

        topic_configs = {key.replace("_", "."): str(value) for key, value in configs.items()}
        if segment_bytes is not None:
            topic_configs["internal.segment.bytes" if segment_bytes < 1 << 20 else "segment.bytes"] = str(segment_bytes)
        admin = self.admin()
        try:
            admin.create_topics([NewTopic(name, partitions, 1, topic_configs=topic_configs)])
        finally:
            admin.close()
        deadline = time.monotonic() + START_TIMEOUT_S  # the controller answers before the broker makes the logs
        while not all((self.topic_dir(name, p) / "partition.metadata").is_file() for p in range(partitions)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name}: no partition directories after {START_TIMEOUT_S} s:\n{self.log_tail()}")
            time.sleep(0.05)
        return name

    def topic_id(self, topic: str) -> str:
        """The topic id the cluster gave `topic`, from its partition 0's `partition.metadata`."""
        text = (self.topic_dir(topic) / "partition.metadata").read_text()
        return dict(line.split(": ", 1) for line in text.splitlines())["topic_id"]

    def copy_topic(self, topic: str, dest: Path, partition: int = 0) -> Path:
        """A copy of the partition's directory as it is now (the broker may be running)."""
        target = dest / f"{topic}-{partition}"
        shutil.copytree(self.topic_dir(topic, partition), target)
        return target


def start_broker(workdir: Path, extra_configs: dict[str, str] | None = None) -> KafkaBroker:
    broker = KafkaBroker(workdir, fetch_jvm.require("kafka"), extra_configs=dict(extra_configs or {}))
    broker.configure()
    broker.start()
    if os.environ.get("KLAKE_BROKER_STATS"):
        print(f"\nkafka broker: started in {broker.start_seconds[0]:.1f} s, RSS {broker.rss_bytes() / 2**20:.0f} MiB")
    return broker
