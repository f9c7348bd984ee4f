"""Spark's Kafka source reading the live broker and klake reading the same topic imported from it give equal
rows for the same offset range (issue 27, item 4: the read benchmark's two sides answer alike), and
`spark.read.format("klake")` given the very options dict `format("kafka")` is given answers alike too (issue 29).

Truth is Spark's own Kafka source (`spark-sql-kafka-0-10` of the pinned `spark-kafka` set, on the shared
session's classpath); klake's side is `read_records` over the broker's log dir imported in place.
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
from jobs.read import read_records
from jobs.runtime.config import load_config
from jobs.runtime.job_runner import main
from tests.kafka_broker import KafkaBroker
from tests.oracles import fetch_jvm

pytestmark = pytest.mark.spark

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def test_spark_kafka_source_and_klake_read_equal_rows_for_the_same_offsets(
        spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    fetch_jvm.require("spark-kafka")
    topic = kafka_broker.create_topic(f"parity-{uuid.uuid4().hex[:8]}", partitions=2, segment_bytes=8192,
                                      retention_ms=-1)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=10, batch_size=1024,
                             compression_type="lz4")
    t0 = int(time.time() * 1000) - 3_600_000
    for i in range(400):
        producer.send(topic, key=None if i % 9 == 0 else b"k%d" % (i % 13), value=b"v%d-" % i + b"x" * (i % 50),
                      headers=[("n", b"%d" % i)] if i % 4 else [], partition=i % 2, timestamp_ms=t0 + i * 997)
    producer.flush()
    producer.close()
    logs = tmp_path / "logs"
    for partition in (0, 1):
        kafka_broker.copy_topic(topic, logs, partition)
    root = tmp_path / "root"
    assert main(import_log.SPEC, [str(logs), "--root", str(root), "--no-progress"]) == 0

    start, end = 17, 151
    bounds = {"startingOffsets": json.dumps({topic: {"0": start, "1": start}}),
              "endingOffsets": json.dumps({topic: {"0": end, "1": end}})}
    kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka_broker.bootstrap)
             .option("subscribe", topic).option("includeHeaders", "true").options(**bounds).load())
    ours = read_records(spark, load_config(None, [f"storage.root={root}"]), topic, from_offset=start, to_offset=end)
    theirs_rows = kafka.select(*COLUMNS).orderBy("partition", "offset").collect()
    our_rows = ours.select(*COLUMNS).orderBy("partition", "offset").collect()
    assert len(theirs_rows) == 2 * (end - start)
    assert kafka.select(*COLUMNS).schema == ours.select(*COLUMNS).schema
    assert [r.asDict(recursive=True) for r in our_rows] == [r.asDict(recursive=True) for r in theirs_rows]

    register(spark)  # the data source, with the very options dict given to format("kafka") (issue 29, item 3)
    try:
        for options in ({"subscribe": topic, "includeHeaders": "true", **bounds},
                        {"subscribePattern": "parity-.*", "startingTimestamp": str(t0 + 200 * 997),
                         "endingOffsets": json.dumps({topic: {"0": -1, "1": 180}})}):
            shared = {"kafka.bootstrap.servers": kafka_broker.bootstrap, **options}
            kafka = spark.read.format("kafka").options(**shared).load()
            klake = spark.read.format("klake").options(root=str(root), **shared).load()
            assert klake.schema == kafka.schema, options
            theirs_rows = kafka.orderBy("partition", "offset").collect()
            assert len(theirs_rows) > 100
            assert klake.orderBy("partition", "offset").collect() == theirs_rows, options
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
