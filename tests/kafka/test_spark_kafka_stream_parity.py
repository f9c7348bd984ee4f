"""`spark.readStream.format("kafka")` on the live broker and `spark.readStream.format("klake")` on the same topic
imported from it, with the same options dict, give the same micro-batches (issue 29, item 2): for an
`AvailableNow` run, the same offsets in every checkpointed batch (`maxOffsetsPerTrigger`'s split included) and
equal rows, every column, in every batch.

Truth is Spark's own Kafka source (`spark-sql-kafka-0-10` of the pinned `spark-kafka` set, on the shared
session's classpath).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaProducer

from jobs import import_log
from jobs.klake_source import register
from jobs.runtime.job_runner import main
from tests.kafka.runs import available_now, checkpointed_offsets
from tests.kafka_broker import KafkaBroker
from tests.oracles import fetch_jvm

pytestmark = pytest.mark.spark


def test_an_available_now_run_reads_the_same_batches_as_sparks_kafka_source(
        spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    fetch_jvm.require("spark-kafka")
    topic = kafka_broker.create_topic(f"stream-{uuid.uuid4().hex[:8]}", partitions=2, segment_bytes=8192,
                                      retention_ms=-1)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=10, batch_size=1024,
                             compression_type="lz4")
    t0 = int(time.time() * 1000) - 3_600_000
    for i in range(400):
        producer.send(topic, key=None if i % 9 == 0 else b"k%d" % (i % 13), value=b"v%d-" % i + b"x" * (i % 50),
                      headers=[("n", b"%d" % i)] if i % 4 else [], partition=i % 3 % 2, timestamp_ms=t0 + i * 997)
    producer.flush()
    producer.close()
    logs = tmp_path / "logs"
    for partition in (0, 1):
        kafka_broker.copy_topic(topic, logs, partition)
    root = tmp_path / "root"
    assert main(import_log.SPEC, [str(logs), "--root", str(root), "--no-progress"]) == 0
    register(spark)
    try:
        for n, options in enumerate([
                {"subscribe": topic, "startingOffsets": "earliest", "includeHeaders": "true",
                 "maxOffsetsPerTrigger": "110"},
                {"assign": json.dumps({topic: [0, 1]}), "startingTimestamp": str(t0 + 150 * 997),
                 "maxOffsetsPerTrigger": "1000"},
                {"subscribePattern": "stream-.*", "startingOffsets": json.dumps({topic: {"0": 40, "1": -2}}),
                 "includeHeaders": "false"}]):
            shared = {"kafka.bootstrap.servers": kafka_broker.bootstrap, **options}
            theirs = available_now(spark, "kafka", shared, tmp_path / f"kafka-{n}")
            ours = available_now(spark, "klake", {"root": str(root), **shared}, tmp_path / f"klake-{n}")
            assert checkpointed_offsets(tmp_path / f"klake-{n}") == checkpointed_offsets(tmp_path / f"kafka-{n}")
            assert sum(len(rows) for rows in theirs.values()) > 100
            assert ours == theirs, options
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
