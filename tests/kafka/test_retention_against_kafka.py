"""Retention against Kafka: the log start offset the broker's retention (retention.ms, retention.bytes) leaves
equals what `klake retention` computes on the pre-retention copy of the same log (issue 27, 3d).

A topic is produced into the session's broker with `retention.ms` off: old records (10 h to 6 h ago, then
4 h to 2 h ago, a minute apart, 4 KiB segments) and recent ones (the active segment). The partition is
copied, then `retention.ms` is set to 5 hours; the broker's retention check (every second here) deletes
every segment whose largest timestamp is older than its clock minus 5 hours. Kafka's choice depends on its
clock, so it is pinned by the data: no record lies between 6 h and 4 h ago, so any check within an hour
of the copy cuts at the same segment, and `klake retention --now` is given the time the broker was seen
to have cut.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

from engine.catalog.schema import partition_log_start_offset
from jobs import import_log, retention
from tests.jobs.test_jobs import Jobs, local_backend
from tests.kafka_broker import KafkaBroker

pytestmark = pytest.mark.spark

HOUR = 3_600_000
RETENTION_MS = 5 * HOUR


def beginning_offset(broker: KafkaBroker, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    try:
        return consumer.beginning_offsets([tp])[tp]
    finally:
        consumer.close()


def broker_cut(broker: KafkaBroker, topic: str, configs: dict[str, str]) -> int:
    """Set `configs` on `topic` and wait for the broker's retention check to raise its log start offset;
    that offset (a second check, 2 s later, must leave it where it is: the cut is the data's)."""
    admin = broker.admin()
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)], incremental=True)
    finally:
        admin.close()
    deadline = time.monotonic() + 60
    start = 0
    while start == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
        start = beginning_offset(broker, topic)
    time.sleep(2)
    assert beginning_offset(broker, topic) == start > 0
    return start


def test_klake_retention_cuts_the_log_where_the_brokers_retention_did(
        spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    topic = kafka_broker.create_topic(f"retained-{uuid.uuid4().hex[:8]}", segment_bytes=4096, retention_ms=-1)
    now = int(time.time() * 1000)
    stamps = [now - 10 * HOUR + i * 60_000 for i in range(240)] + [now - 4 * HOUR + i * 60_000 for i in range(120)]
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5, batch_size=1024)
    for i, stamp in enumerate(stamps):
        producer.send(topic, key=b"k%d" % (i % 17), value=b"old-%04d|" % i + b"x" * 60, partition=0, timestamp_ms=stamp)
    for i in range(50):
        producer.send(topic, key=b"k%d" % i, value=b"new-%04d" % i, partition=0)
    producer.close()
    pre = tmp_path / "pre-retention"
    kafka_broker.copy_topic(topic, pre)
    assert len(list((pre / f"{topic}-0").glob("*.log"))) > 8

    start = broker_cut(kafka_broker, topic, {"retention.ms": str(RETENTION_MS)})
    cut_at = int(time.time() * 1000)  # within an hour of the broker's cut: the data pins the same one
    assert start in {int(p.stem) for p in (pre / f"{topic}-0").glob("*.log")}  # whole segments went

    jobs = Jobs(tmp_path / "klake", local_backend(tmp_path), {topic: {"partitions": 1, "retention.ms": RETENTION_MS}})
    code, report = jobs.run(import_log.SPEC, str(pre), now=None)
    assert code == 0, report.get("failures")
    code, report = jobs.run(retention.SPEC, now=cut_at)
    assert code == 0, report.get("failures")
    rows = jobs.rows(topic, 0)
    assert partition_log_start_offset(rows) == rows[0].base_offset == start


def test_klake_retention_bytes_cuts_the_log_where_the_brokers_did(
        spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    """`retention.bytes`: the broker deletes the oldest closed segments while the log stays at least that size
    without them (`UnifiedLog.deleteRetentionSizeBreachedSegments`); its clock plays no part, so the cut is the
    sizes' alone and `klake retention` on the copy taken before must cut at the same segment."""
    topic = kafka_broker.create_topic(f"sized-{uuid.uuid4().hex[:8]}", segment_bytes=4096, retention_ms=-1)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5, batch_size=1024)
    for i in range(800):
        producer.send(topic, key=b"k%d" % (i % 17), value=b"v-%04d|" % i + b"y" * (i % 90), partition=0)
    producer.close()
    pre = tmp_path / "pre-retention"
    kafka_broker.copy_topic(topic, pre)
    logs = sorted((pre / f"{topic}-0").glob("*.log"))
    total = sum(log.stat().st_size for log in logs)
    assert len(logs) > 10
    retention_bytes = total // 3  # between segment boundaries for the broker to find its cut

    start = broker_cut(kafka_broker, topic, {"retention.bytes": str(retention_bytes)})

    jobs = Jobs(tmp_path / "klake", local_backend(tmp_path),
                {topic: {"partitions": 1, "retention.ms": -1, "retention.bytes": retention_bytes}})
    code, report = jobs.run(import_log.SPEC, str(pre), now=None)
    assert code == 0, report.get("failures")
    code, report = jobs.run(retention.SPEC, now=None)
    assert code == 0, report.get("failures")
    rows = jobs.rows(topic, 0)
    assert partition_log_start_offset(rows) == rows[0].base_offset == start
