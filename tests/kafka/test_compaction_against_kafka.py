"""Compaction against Kafka's LogCleaner: the records the broker's cleaner keeps are the records `klake compact`
keeps of the same pre-clean log (issue 27, 3c).

A topic is produced into the session's broker with `cleanup.policy=delete` (so nothing cleans it yet): 40
keys updated many times, tombstones, headers, out-of-order timestamps, 4 KiB segments, and halfway
transactions, two committed and two aborted. The partition is
copied; then the policy becomes `compact` (dirty ratio 0.01, no compaction lag) and the broker's cleaner
cleans up to the active segment's base offset, which `cleaner-offset-checkpoint` shows when it is done.
Neither side's choice depends on time: a first clean keeps every tombstone (their delete horizon starts
with it, `delete.retention.ms` is a day), and the cleaning point is the active segment's base on both
sides. The same pre-clean copy imported into klake and compacted must then read (offset, timestamp, key,
value, headers) exactly as Kafka's consumer reads the cleaned partition, read_uncommitted and read_committed.
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

from engine.log.kafka_files import KafkaFileError, parse_offset_checkpoint
from engine.names import TopicPartition
from jobs import compact, import_log
from tests.jobs.test_jobs import Jobs, local_backend
from tests.kafka.test_broker_to_klake import consumed, klake_records
from tests.kafka_broker import KafkaBroker

pytestmark = pytest.mark.spark

HOUR = 3_600_000


def test_klake_compact_keeps_what_kafkas_log_cleaner_keeps(spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    topic = kafka_broker.create_topic(f"compacted-{uuid.uuid4().hex[:8]}", segment_bytes=4096, retention_ms=-1,
                                      delete_retention_ms=24 * HOUR)
    rng = np.random.default_rng(3)
    t0 = int(time.time() * 1000) - 2 * HOUR

    def updates(numbers: range) -> None:
        producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5, batch_size=1024,
                                 enable_idempotence=False, acks=1, compression_type="gzip")
        for i in numbers:
            key = b"key-%02d" % rng.integers(40)
            value = None if i % 13 == 6 else b"v-%04d|" % i + b"x" * int(rng.integers(0, 80))
            headers = [("i", b"%d" % i)] if i % 4 == 0 else []
            producer.send(topic, key=key, value=value, headers=headers, partition=0,
                          timestamp_ms=t0 + i * 5000 + int(rng.integers(-20_000, 20_000)))
        producer.close()

    updates(range(450))
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, transactional_id=f"tx-{topic}", linger_ms=5)
    producer.init_transactions()
    for n, commit in enumerate((True, False, True, False)):  # keys of their own: only the abort removes them
        producer.begin_transaction()
        for k in range(12):
            producer.send(topic, key=b"txn-%d-%02d" % (n, k), value=b"tx-%d-%d" % (n, k), partition=0,
                          timestamp_ms=t0 + (450 + 12 * n + k) * 5000)
        producer.flush()
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()
    updates(range(450, 900))
    pre = tmp_path / "pre-clean"
    kafka_broker.copy_topic(topic, pre)
    active = max(int(p.stem) for p in (pre / f"{topic}-0").glob("*.log"))
    aborted = {r[0] for r in consumed(kafka_broker, topic) if (r[4] or b"").startswith((b"tx-1-", b"tx-3-"))}
    committed_before = consumed(kafka_broker, topic, "read_committed")
    assert not {r[0] for r in committed_before} & aborted and len(aborted) == 24
    assert min(aborted) < active  # aborted records lie in the part the cleaners clean

    admin = kafka_broker.admin()
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})],
            incremental=True)
    finally:
        admin.close()
    checkpoint = kafka_broker.log_dir / "cleaner-offset-checkpoint"
    tp = TopicPartition(topic, 0)
    deadline = time.monotonic() + 90
    cleaned_to = None
    while cleaned_to != active and time.monotonic() < deadline:
        time.sleep(0.5)
        with contextlib.suppress(FileNotFoundError, KafkaFileError):  # not yet written, or empty at first
            cleaned_to = parse_offset_checkpoint(checkpoint.read_bytes(), str(checkpoint)).get(tp)
    assert cleaned_to == active, f"the broker's cleaner reached {cleaned_to}, not the active segment's base {active}"
    kafka = consumed(kafka_broker, topic)

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
