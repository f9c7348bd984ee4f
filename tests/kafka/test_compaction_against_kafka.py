"""Compaction against Kafka's LogCleaner: the records the broker's cleaner keeps are the records `klake compact`
keeps of the same log (issue 27, 3c), after a first clean and after a second one.

A topic is produced into the session's broker with `cleanup.policy=delete` (so nothing cleans it yet): 40
keys updated many times, tombstones, headers, out-of-order timestamps, 4 KiB segments, and halfway
transactions, two committed and two aborted. The partition is copied; then the policy becomes `compact`
(dirty ratio 0.01, no compaction lag) and the broker's cleaner cleans up to the active segment's base offset,
which `cleaner-offset-checkpoint` shows when it is done. The copy imported into klake and compacted must then
read (offset, timestamp, key, value, headers) exactly as Kafka's consumer reads the cleaned partition,
read_uncommitted and read_committed.

What may depend on time, and how it is pinned. Every batch is v2, so segment mtimes play no part (they only
date legacy tombstones). A clean keeps a tombstone (or a marker whose transaction has no data) it meets
without a delete horizon and stamps its batch with one, the cleaner's clock + `delete.retention.ms` (KIP-534);
a later clean drops it once its clock has passed that horizon. First clean (`delete.retention.ms` a day):
nothing is dropped for time on either side. Later clean: the broker cleans the topic three times; before each
clean but the first the test waits until `delete.retention.ms` (3 s) has passed since it saw the previous
clean finish, so each clean is past every horizon stamped before it. The copy klake compacts is taken before
the broker's third clean, so the horizons in it are the broker's, pinned by the file, not by either clock;
klake's `--now` is taken after the broker's third clean, past all of them as the broker's clock was. What a
clean meets for the first time has no horizon yet: both sides keep it whatever their clocks say.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from kafka import KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType

from engine.format.batch import scan_batches
from engine.log.kafka_files import KafkaFileError, parse_offset_checkpoint
from jobs import compact, import_log
from kernel.names import TopicPartition
from layouts.store import read_bytes
from tests.jobs.test_jobs import Jobs, local_backend
from tests.kafka.test_broker_to_klake import consumed, klake_records
from tests.kafka_broker import KafkaBroker

pytestmark = pytest.mark.spark

HOUR = 3_600_000
RETENTION_MS = 3000  # delete.retention.ms of the second-clean test


class Writer:
    """The test topic's producers: updates of 40 keys and transactions with keys of their own."""

    def __init__(self, broker: KafkaBroker, topic: str, t0: int) -> None:
        self.broker, self.topic, self.t0 = broker, topic, t0
        self.rng = np.random.default_rng(3)

    def updates(self, numbers: range, tombstone_every: int = 13) -> None:
        producer = KafkaProducer(bootstrap_servers=self.broker.bootstrap, linger_ms=5, batch_size=1024,
                                 enable_idempotence=False, acks=1, compression_type="gzip")
        for i in numbers:
            key = b"key-%02d" % self.rng.integers(40)
            value = None if i % tombstone_every == 6 % tombstone_every else b"v-%04d|" % i + b"x" * int(self.rng.integers(0, 80))
            headers = [("i", b"%d" % i)] if i % 4 == 0 else []
            producer.send(self.topic, key=key, value=value, headers=headers, partition=0,
                          timestamp_ms=self.t0 + i * 5000 + int(self.rng.integers(-20_000, 20_000)))
        producer.close()

    def transactions(self, outcomes: tuple[bool, ...], at: int, first: int = 0) -> None:
        """One transaction per entry of `outcomes` (commit or abort), 12 records of keys `txn-<n>-<k>` each."""
        producer = KafkaProducer(bootstrap_servers=self.broker.bootstrap, transactional_id=f"tx-{self.topic}",
                                 linger_ms=5)
        producer.init_transactions()
        for n, commit in enumerate(outcomes, start=first):
            producer.begin_transaction()
            for k in range(12):
                producer.send(self.topic, key=b"txn-%d-%02d" % (n, k), value=b"tx-%d-%d" % (n, k), partition=0,
                              timestamp_ms=self.t0 + (at + 12 * n + k) * 5000)
            producer.flush()
            producer.commit_transaction() if commit else producer.abort_transaction()
        producer.close()


def set_configs(broker: KafkaBroker, topic: str, configs: dict[str, str]) -> None:
    admin = broker.admin()
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)], incremental=True)
    finally:
        admin.close()


def broker_cleans(broker: KafkaBroker, topic: str, up_to: int) -> None:
    """Make `topic` compacted and wait for the broker's cleaner to clean it up to `up_to` (the active
    segment's base offset), as `cleaner-offset-checkpoint` shows."""
    set_configs(broker, topic, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                "min.compaction.lag.ms": "0"})
    checkpoint = broker.log_dir / "cleaner-offset-checkpoint"
    tp = TopicPartition(topic, 0)
    deadline = time.monotonic() + 90
    cleaned_to = None
    while cleaned_to != up_to and time.monotonic() < deadline:
        time.sleep(0.5)
        with contextlib.suppress(FileNotFoundError, KafkaFileError):  # not yet written, or empty at first
            cleaned_to = parse_offset_checkpoint(checkpoint.read_bytes(), str(checkpoint)).get(tp)
    assert cleaned_to == up_to, f"the broker's cleaner reached {cleaned_to}, not the active segment's base {up_to}"


def active_base(partition_dir: Path) -> int:
    return max(int(p.stem) for p in partition_dir.glob("*.log"))


def batch_shapes(logs: list[bytes]) -> list[tuple[int, int, int, bool, bool | None]]:
    """(base offset, last offset, records, control, has a delete horizon) of every batch of the segments: the
    cleaners keep a batch's offsets, and drop it, keep it empty or stamp it by Kafka's rules. A marker's
    horizon is left out (None): klake stamps a marker in the round that removes its transaction's last data,
    Kafka one round later (README, "Kafka compatibility"); which markers are dropped is still compared."""
    found = []
    for data in logs:
        heads = scan_batches(data).headers
        found += [(base, last, count, control, None if control else horizon) for base, last, count, control, horizon
                  in zip(heads.base_offset.tolist(), heads.last_offset.tolist(), heads.records_count.tolist(),
                         heads.is_control.tolist(), heads.has_delete_horizon.tolist(), strict=True)]
    return found


def control_batches(logs: list[bytes]) -> list[tuple[int, bool]]:
    """(offset, has a delete horizon) of every control batch (transaction marker) in the segments."""
    found = []
    for data in logs:
        heads = scan_batches(data).headers
        control = heads.is_control
        found += zip(heads.base_offset[control].tolist(), heads.has_delete_horizon[control].tolist(), strict=True)
    return sorted(found)


def test_klake_compact_keeps_what_kafkas_log_cleaner_keeps(spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    topic = kafka_broker.create_topic(f"compacted-{uuid.uuid4().hex[:8]}", segment_bytes=4096, retention_ms=-1,
                                      delete_retention_ms=24 * HOUR)
    writer = Writer(kafka_broker, topic, int(time.time() * 1000) - 2 * HOUR)
    writer.updates(range(450))
    writer.transactions((True, False, True, False), at=450)  # keys of their own: only the abort removes them
    writer.updates(range(450, 900))
    pre = tmp_path / "pre-clean"
    kafka_broker.copy_topic(topic, pre)
    active = active_base(pre / f"{topic}-0")
    aborted = {r[0] for r in consumed(kafka_broker, topic) if (r[4] or b"").startswith((b"tx-1-", b"tx-3-"))}
    committed_before = consumed(kafka_broker, topic, "read_committed")
    assert not {r[0] for r in committed_before} & aborted and len(aborted) == 24
    assert min(aborted) < active  # aborted records lie in the part the cleaners clean

    broker_cleans(kafka_broker, topic, active)
    kafka = consumed(kafka_broker, topic)
    kafka_batches = batch_shapes([log.read_bytes() for log in sorted(kafka_broker.topic_dir(topic).glob("*.log"))])

    jobs = Jobs(tmp_path / "klake", local_backend(tmp_path), {topic: {
        "partitions": 1, "cleanup.policy": "compact", "delete.retention.ms": 24 * HOUR}})
    code, report = jobs.run(import_log.SPEC, str(pre), now=None)
    assert code == 0, report.get("failures")
    assert klake_records(tmp_path, jobs.root, topic, "--isolation-level", "read_committed") == committed_before
    code, report = jobs.run(compact.SPEC, "--force", now=int(time.time() * 1000))
    assert code == 0 and report["results"]["records_removed"] > 0, report
    ours = klake_records(tmp_path, jobs.root, topic)
    assert len(kafka) < 900 and any(r[4] is None for r in kafka)  # the cleaner removed records, kept tombstones
    assert not {r[0] for r in kafka if r[0] < active} & aborted  # and the aborted records below its cleaning point
    assert ours == kafka
    assert klake_records(tmp_path, jobs.root, topic, "--isolation-level", "read_committed") == \
        consumed(kafka_broker, topic, "read_committed")
    assert batch_shapes([read_bytes(row.log_key, jobs.backend.options) for row in jobs.rows(topic, 0)]) == kafka_batches


def test_a_later_clean_drops_what_kafkas_drops_past_the_delete_horizon(
        spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    """The broker cleans three times, more written before each: the first clean removes the aborted records
    (their markers kept, no horizon yet: Kafka stamps a marker only once its transaction had no data in the
    round), the second stamps the abort markers and the new tombstones (and drops the first clean's tombstones,
    whose horizon has passed), the third, on a copy klake compacts too, drops what the second stamped."""
    topic = kafka_broker.create_topic(f"recleaned-{uuid.uuid4().hex[:8]}", segment_bytes=4096, retention_ms=-1,
                                      delete_retention_ms=RETENTION_MS)
    writer = Writer(kafka_broker, topic, int(time.time() * 1000) - 2 * HOUR)
    writer.updates(range(400))
    writer.transactions((True, False, True, False), at=400)
    writer.updates(range(400, 700))

    def clean_after(cleaned_at: float | None) -> tuple[int, float]:
        """Clean up to the active segment once `delete.retention.ms` has passed since `cleaned_at`; then no
        clean until the next call (policy `delete`, nothing retention would remove)."""
        up_to = active_base(kafka_broker.topic_dir(topic))
        if cleaned_at is not None:
            time.sleep(max(0.0, cleaned_at + RETENTION_MS / 1000 + 1 - time.monotonic()))
        broker_cleans(kafka_broker, topic, up_to)
        done = time.monotonic()
        set_configs(kafka_broker, topic, {"cleanup.policy": "delete"})
        return up_to, done

    _, first = clean_after(None)
    writer.transactions((True, False), at=700, first=4)
    writer.updates(range(700, 1000), tombstone_every=7)
    second_base, second = clean_after(first)
    stamped = control_batches([log.read_bytes() for log in sorted(kafka_broker.topic_dir(topic).glob("*.log"))])
    assert any(horizon for _, horizon in stamped), stamped  # abort 1's marker: its data went in the first clean
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5, enable_idempotence=False)
    for k in range(12):  # transaction 0's records superseded: its commit marker loses its data
        producer.send(topic, key=b"txn-0-%02d" % k, value=b"over-%d" % k, partition=0)
    producer.close()
    writer.updates(range(1000, 1200), tombstone_every=3)
    pre = tmp_path / "pre-third-clean"
    kafka_broker.copy_topic(topic, pre)
    before = consumed(kafka_broker, topic)
    assert any(r[4] is None and r[0] < second_base for r in before)  # tombstones stamped by the second clean

    clean_after(second)
    now = int(time.time() * 1000)
    kafka = consumed(kafka_broker, topic)
    kafka_batches = batch_shapes([log.read_bytes() for log in sorted(kafka_broker.topic_dir(topic).glob("*.log"))])

    jobs = Jobs(tmp_path / "klake", local_backend(tmp_path), {topic: {
        "partitions": 1, "cleanup.policy": "compact", "delete.retention.ms": RETENTION_MS}})
    code, report = jobs.run(import_log.SPEC, str(pre), now=None)
    assert code == 0, report.get("failures")
    code, report = jobs.run(compact.SPEC, "--force", now=now)
    assert code == 0 and report["results"]["records_removed"] > 0, report
    ours = klake_records(tmp_path, jobs.root, topic)

    assert not any(r[4] is None and r[0] < second_base for r in kafka)  # the stamped tombstones went
    assert any(r[4] is None and r[0] >= second_base for r in kafka)  # the new ones stay, no horizon yet
    assert {o for o, h in stamped if h} - {b[0] for b in kafka_batches if b[3]}  # stamped markers went too
    assert ours == kafka
    assert batch_shapes([read_bytes(row.log_key, jobs.backend.options) for row in jobs.rows(topic, 0)]) == kafka_batches
