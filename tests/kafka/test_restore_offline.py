"""Offline restore of an archived topic into a fresh broker's log dir (issue 30: "Restore ... offline into a
fresh broker's log dir: consumers read the same records; a consumer group restored resumes at the record it
would have read next").

The README's procedure, as a user runs it: `klake archive` a topic of the session broker (aborted
transactions leave gaps in its offsets, a consumer group has committed mid-topic), then on a second, fresh
broker create the topic, read its topic id, stop the broker, `klake export --topic-id T=ID --groups-csv DIR`
into its log dir, start it, and commit the group's positions with Kafka's own `kafka-consumer-groups
--reset-offsets --from-file DIR/{group}.csv --execute`. The truth is the source cluster: its consumers'
records (offset, timestamp, key, value, headers), its ListOffsets answers, and the first record a consumer
of the group reads there.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTP
from kafka.protocol.consumer.offsets import OffsetSpec
from kafka.structs import OffsetAndMetadata

from jobs import archive, export
from jobs.runtime.job_runner import main
from tests.kafka.runs import consumed
from tests.kafka_broker import KafkaBroker, start_broker
from tests.oracles import fetch_jvm

pytestmark = pytest.mark.spark

PARTITIONS = 2


def _produce(broker: KafkaBroker, topic: str) -> None:
    """A committed then an aborted transaction (their records and markers: gaps a renumbering would close),
    then plain records with headers and null keys, stamped after every marker."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{topic}", linger_ms=5)
    producer.init_transactions()
    for commit in (True, False):
        producer.begin_transaction()
        for i in range(6):
            producer.send(topic, key=b"t%d" % i, value=b"txn-%d-%d" % (commit, i), partition=i % PARTITIONS)
        producer.flush()
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()
    time.sleep(0.5)  # the coordinator writes the markers after it answers: the plain records' times come later
    plain = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    for i in range(12):
        plain.send(topic, key=None if i % 4 == 0 else b"k%d" % i, value=b"plain-%d" % i, partition=i % PARTITIONS,
                   headers=[("i", b"%d" % i), ("empty", b"")] if i % 3 else [])
        if i % 3 == 2:
            plain.flush()
            time.sleep(0.01)  # distinct timestamps to look up
    plain.flush()
    plain.close()



def _list_offsets(broker: KafkaBroker, topic: str, targets: list[int]) -> list[tuple[int, int, int, int]]:
    """(partition, target, offset, timestamp) of ListOffsets for each target (-1 latest, -2 earliest, -3 max)."""
    admin = broker.admin()
    try:
        answers = []
        for target in targets:
            spec = {-1: OffsetSpec.LATEST, -2: OffsetSpec.EARLIEST, -3: OffsetSpec.MAX_TIMESTAMP}.get(target, target)
            found = admin.list_partition_offsets({KafkaTP(topic, p): spec for p in range(PARTITIONS)})
            answers += [(tp.partition, target, a.offset, a.timestamp) for tp, a in sorted(found.items())]
        return answers
    finally:
        admin.close()


def _next_records(broker: KafkaBroker, topic: str, group: str) -> dict[int, tuple[int, bytes]]:
    """Per partition, the (offset, value) a consumer of `group` reads first: from its committed offset (no
    committed offset is an error, not a reset)."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="none", isolation_level="read_committed")
    try:
        consumer.assign([KafkaTP(topic, p) for p in range(PARTITIONS)])
        first: dict[int, tuple[int, bytes]] = {}
        deadline = time.monotonic() + 30
        while len(first) < PARTITIONS and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                first.setdefault(tp.partition, (records[0].offset, records[0].value))
        return first
    finally:
        consumer.close()


def _reset_offsets(broker: KafkaBroker, group: str, plan: Path) -> str:
    """Kafka's `kafka-consumer-groups --reset-offsets --from-file PLAN --execute` on `broker`."""
    done = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", fetch_jvm.require("kafka"),
                           "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                           "--bootstrap-server", broker.bootstrap, "--group", group, "--reset-offsets",
                           "--from-file", str(plan), "--execute"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"kafka-consumer-groups exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


def test_a_topic_archived_and_restored_offline_into_a_fresh_broker_is_served_whole_and_its_group_resumes(
        spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    fetch_jvm.require("spark-kafka")
    topic = kafka_broker.create_topic(f"offline-{uuid.uuid4().hex[:8]}", partitions=PARTITIONS, retention_ms=-1)
    _produce(kafka_broker, topic)
    source = consumed(kafka_broker, topic, PARTITIONS)
    held = {(p, o) for p, o, *_ in source}
    aborted = next(o for o in range(1, source[-1][1]) if not {(0, o - 1), (0, o), (0, o + 1)} & held)  # not a marker
    group = f"readers-{topic}"
    committed = {0: aborted, 1: [o for p, o, *_ in source if p == 1][4]}  # partition 0: at an aborted record
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, group_id=group, enable_auto_commit=False)
    consumer.commit({KafkaTP(topic, p): OffsetAndMetadata(o, "", -1) for p, o in committed.items()})
    consumer.close()
    would_read = _next_records(kafka_broker, topic, group)
    assert would_read[0] == next((o, v) for p, o, _, _, v, _ in source if p == 0 and o > aborted)

    conf = tmp_path / "klake.yaml"
    conf.write_text(yaml.safe_dump({"storage": {"root": str(tmp_path / "root")}}))
    assert main(archive.SPEC, ["--conf", str(conf), "--bootstrap-servers", kafka_broker.bootstrap, "--topic", topic,
                               "--no-progress"]) == 0

    fresh = start_broker(tmp_path / "fresh-broker")
    try:
        fresh.create_topic(topic, partitions=PARTITIONS, retention_ms=-1)
        plans = tmp_path / "groups"
        with fresh.stopped():
            assert main(export.SPEC, ["--conf", str(conf), "--topic", topic, "--output", str(fresh.log_dir),
                                      "--topic-id", f"{topic}={fresh.topic_id(topic)}", "--groups-csv", str(plans),
                                      "--no-progress"]) == 0
        assert consumed(fresh, topic, PARTITIONS) == source
        times = sorted({t for *_, t, _, _, _ in source})
        targets = [-1, -2, -3, 0, *times[-6:], times[-1] + 1]  # the plain records' times: after every marker
        assert _list_offsets(fresh, topic, targets) == _list_offsets(kafka_broker, topic, targets)

        _reset_offsets(fresh, group, plans / f"{group}.csv")
        assert _next_records(fresh, topic, group) == would_read
    finally:
        fresh.stop()
