"""`klake archive` SIGKILLed at the natural points of its run and re-run as a fresh process with the same command
(issue 30): while an idempotent producer and a transactional one (every other transaction aborted) keep writing,
the archive is killed during the Spark tasks' appends (a segment's upload), after the appends before the catalog's
commit, and after the commit before the leases' release and the groups' snapshot (the next run, another job since
it starts where that commit ended, takes over the leases the killed one left: `engine.ops.run.lease_is_spent`); a last run after the producers stop. Truth is the cluster itself: a read_committed consumer (kafka-python) reads exactly the archive's records at
their offsets, no aborted record is in the archive, and a read_uncommitted consumer shows the aborted ones exist.

A kill is the crash hook's (`tests/crash/hook`): the run's whole process group (CLI, JVM, Python workers) dies by
SIGKILL at the first storage point whose name holds the given text, the way a node dies.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kafka import KafkaProducer

from jobs.read import read_records
from jobs.runtime.config import load_config
from tests.conftest import PROJECT_ROOT
from tests.kafka.runs import consumed
from tests.kafka_broker import KafkaBroker
from tests.oracles import fetch_jvm

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KLAKE = [sys.executable, "-m", "jobs.cli.main"]
HOOK = PROJECT_ROOT / "tests" / "crash" / "hook"
PARTITIONS = 2
# where each killed run dies, in order (the first point whose `kind target` holds the text)
KILLS = ((".log", "a segment's upload by a Spark task"),
         ("delta:_commit:before", "after the appends, before the catalog commit"),
         ("delta:_commit:after", "after the commit, before the leases' release and the groups' snapshot"))


class Producers:
    """An idempotent producer and a transactional one (odd transactions aborted, their values say so) writing
    into `topic` on threads until stopped."""

    def __init__(self, broker: KafkaBroker, topic: str) -> None:
        self.broker, self.topic = broker, topic
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._idempotent), threading.Thread(target=self._transactional)]
        self.errors: list[BaseException] = []

    def __enter__(self) -> Producers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join()
        assert not self.errors, self.errors

    def _guarded(self, body) -> None:  # noqa: ANN001
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - reported by __exit__
            self.errors.append(exc)

    def _idempotent(self) -> None:
        def body() -> None:
            producer = KafkaProducer(bootstrap_servers=self.broker.bootstrap, enable_idempotence=True, linger_ms=5)
            i = 0
            while not self.done.is_set():
                producer.send(self.topic, key=b"k%d" % (i % 7), value=b"idem-%d" % i, headers=[("i", b"%d" % i)])
                i += 1
                if i % 10 == 0:
                    producer.flush()
                    time.sleep(0.5)
            producer.flush()
            producer.close()
        self._guarded(body)

    def _transactional(self) -> None:
        def body() -> None:
            producer = KafkaProducer(bootstrap_servers=self.broker.bootstrap, linger_ms=5,
                                     transactional_id=f"tx-{self.topic}")
            producer.init_transactions()
            t = 0
            while not self.done.is_set():
                producer.begin_transaction()
                fate = "abort" if t % 2 else "commit"
                for i in range(6):
                    producer.send(self.topic, key=b"t%d" % i, value=f"txn-{t}-{i}-{fate}".encode(),
                                  partition=i % PARTITIONS)
                producer.flush()
                producer.abort_transaction() if t % 2 else producer.commit_transaction()
                t += 1
                time.sleep(0.3)
            producer.close()
        self._guarded(body)



def _archived(spark, conf: Path, topic: str) -> list[tuple]:  # noqa: ANN001
    rows = read_records(spark, load_config(str(conf), []), topic).collect()
    return sorted((r["partition"], r["offset"], round(r["timestamp"].timestamp() * 1000), r["key"], r["value"],
                   [(h["key"], h["value"]) for h in r["headers"] or []]) for r in rows)


def test_archive_killed_at_each_point_of_its_run_and_rerun_loses_and_duplicates_nothing(
        spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    fetch_jvm.require("spark-kafka")
    jars = fetch_jvm.jars("spark-kafka")
    topic = kafka_broker.create_topic(f"kills-{uuid.uuid4().hex[:8]}", partitions=PARTITIONS, segment_bytes=8192,
                                      retention_ms=-1)
    root = tmp_path / "root"
    conf = tmp_path / "klake.yaml"
    conf.write_text(yaml.safe_dump({"storage": {"root": str(root)}}))
    command = [*KLAKE, "archive", "--conf", str(conf), "--bootstrap-servers", kafka_broker.bootstrap, "--topic", topic,
               "--no-progress", "--master", "local[2]", "--set", "spark.conf.spark.ui.enabled=false",
               "--set", f"spark.conf.spark.jars={','.join(map(str, jars))}"]

    def archive(name: str, kill_at: str | None = None) -> tuple[subprocess.CompletedProcess, str]:
        points = tmp_path / name
        points.mkdir()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HOOK), str(PROJECT_ROOT)]),
                   KLAKE_CRASH_DIR=str(points), KLAKE_CRASH_ROOT=str(root))
        if kill_at is not None:
            env["KLAKE_CRASH_WHEN"] = kill_at
        done = subprocess.run([*command, "--report", str(tmp_path / f"{name}.json")], env=env, capture_output=True,
                              text=True, timeout=600, start_new_session=True)
        log = (points / "points").read_text() if (points / "points").exists() else ""
        return done, log

    with Producers(kafka_broker, topic):
        for n, (kill_at, where) in enumerate(KILLS):
            time.sleep(2)
            killed, log = archive(f"killed-{n}", kill_at)
            assert killed.returncode == -signal.SIGKILL, (where, killed.returncode, killed.stderr[-3000:], log)
            assert kill_at in log.splitlines()[-1], (where, log)  # it died there, not anywhere else
    last, _ = archive("last")  # takes over what a killed run left, then reads to the cluster's end
    assert last.returncode == 0, last.stderr[-3000:]
    report = json.loads((tmp_path / "last.json").read_text())
    assert all(row["lag"] == 0 for row in report["results"]["archive"].values()), report["results"]["archive"]
    assert "took over the lease of job archive-" in report["summary"], report["summary"]

    committed = consumed(kafka_broker, topic, PARTITIONS)
    archived = _archived(spark, conf, topic)
    assert archived == committed  # each record once, at its source offset, with its time, key, value, headers
    everything = consumed(kafka_broker, topic, PARTITIONS, "read_uncommitted")
    assert any(v.endswith(b"-abort") for *_, v, _ in everything)  # aborted records exist in the cluster
    assert not any(v.endswith(b"-abort") for *_, v, _ in archived)
    assert len(archived) > 200
    assert not list((root / "_leases").iterdir())  # the last run released its leases and those left by a kill
