"""`spark.readStream.format("kafka")` on the live broker and `spark.readStream.format("klake")` on the same topic
imported from it, with the same options dict, give the same micro-batches (issue 29, item 2): for an
`AvailableNow` run, the same offsets in every checkpointed batch (`maxOffsetsPerTrigger`'s split included),
equal rows, every column, in every batch, and the same progress: latest offsets, and Kafka's offsets-behind-latest
metrics equal to `offsets_behind_latest` of klake's.

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
from jobs.klake_stream import offsets_behind_latest
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
    lagging: list[dict] = []  # batches that ended behind the latest offsets (maxOffsetsPerTrigger)
    try:
        for n, options in enumerate([
                {"subscribe": topic, "startingOffsets": "earliest", "includeHeaders": "true",
                 "maxOffsetsPerTrigger": "110"},
                {"assign": json.dumps({topic: [0, 1]}), "startingTimestamp": str(t0 + 150 * 997),
                 "maxOffsetsPerTrigger": "1000"},
                {"subscribePattern": "stream-.*", "startingOffsets": json.dumps({topic: {"0": 40, "1": -2}}),
                 "includeHeaders": "false"}]):
            shared = {"kafka.bootstrap.servers": kafka_broker.bootstrap, **options}
            their_sources: list = []
            our_sources: list = []
            theirs = available_now(spark, "kafka", shared, tmp_path / f"kafka-{n}", their_sources)
            ours = available_now(spark, "klake", {"root": str(root), **shared}, tmp_path / f"klake-{n}", our_sources)
            assert checkpointed_offsets(tmp_path / f"klake-{n}") == checkpointed_offsets(tmp_path / f"kafka-{n}")
            assert sum(len(rows) for rows in theirs.values()) > 100
            assert ours == theirs, options
            assert [json.loads(s.latestOffset) for s in our_sources] == [json.loads(s.latestOffset)
                                                                          for s in their_sources]
            behind = [offsets_behind_latest(s) for s in our_sources]
            assert behind == [{k: v for k, v in s.metrics.items() if k.endswith("OffsetsBehindLatest")}
                              for s in their_sources]
            lagging += [b for b in behind if b["maxOffsetsBehindLatest"] != "0"]
        assert lagging
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
