"""`append` keeping a cluster's offsets (issue 30, item 1): a DataFrame of Spark's Kafka source over the live broker,
appended by klake, reads back with the cluster's offsets, timestamps and timestamp types.

Truth is Spark's Kafka source on the broker. The topics have gaps a renumbering would close: a transactional
producer's commit and abort markers, and the aborted records themselves, which `read_committed` skips; a
LogAppendTime topic stamps the broker's times. A second run appends the cluster's next range where the first
ended; a third gives records the log already holds, which are rejected (`OFFSETS_OUT_OF_ORDER`), never renumbered.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from kafka import KafkaProducer

from jobs import append
from jobs.read import read_records
from jobs.runtime.config import load_config
from jobs.runtime.job_runner import main
from tests.kafka_broker import KafkaBroker
from tests.oracles import fetch_jvm

pytestmark = pytest.mark.spark

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def _produce(broker: KafkaBroker, txn: str, stamped: str, round_: int) -> None:
    """Committed and aborted transactions into `txn`; plain sends into the LogAppendTime topic `stamped`."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{txn}", linger_ms=5)
    producer.init_transactions()
    for t in range(4):
        producer.begin_transaction()
        for i in range(7 + t):
            producer.send(txn, key=b"k%d" % (i % 5), value=b"r%d-t%d-%d" % (round_, t, i), partition=i % 2,
                          headers=[("n", b"%d" % i)] if i % 3 else [])
        producer.flush()
        producer.commit_transaction() if t % 2 == 0 else producer.abort_transaction()
    producer.close()
    plain = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20, batch_size=256)
    for i in range(30):
        plain.send(stamped, key=None, value=b"s%d-%d" % (round_, i), partition=0)
    plain.flush()
    plain.close()


def _source(spark, broker: KafkaBroker, topic: str, starting: str = "earliest"):
    return (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("kafka.isolation.level", "read_committed").option("subscribe", topic)
            .option("includeHeaders", "true").option("startingOffsets", starting)
            .option("endingOffsets", "latest").load())


def _append(tmp_path: Path, conf: Path, name: str, df) -> dict:
    df.write.parquet(str(tmp_path / name))
    report = tmp_path / f"{name}.json"
    code = main(append.SPEC, ["--conf", str(conf), "--input", str(tmp_path / name), "--keep-offsets",
                              "--no-progress", "--report", str(report)])
    return {"code": code, **json.loads(report.read_text())}


def test_a_spark_kafka_source_dataframe_appends_at_the_clusters_offsets(
        spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    fetch_jvm.require("spark-kafka")
    suffix = uuid.uuid4().hex[:8]
    txn = kafka_broker.create_topic(f"kept-txn-{suffix}", partitions=2)
    stamped = kafka_broker.create_topic(f"kept-lat-{suffix}", message_timestamp_type="LogAppendTime")
    root = tmp_path / "root"
    conf = tmp_path / "klake.yaml"
    conf.write_text(yaml.safe_dump({"storage": {"root": str(root)}, "topics": {
        txn: {"partitions": 2}, stamped: {"partitions": 1, "message.timestamp.type": "LogAppendTime"}}}))
    config = load_config(str(conf), [])

    _produce(kafka_broker, txn, stamped, 0)
    first = {topic: _source(spark, kafka_broker, topic) for topic in (txn, stamped)}
    ends = {topic: {str(r["partition"]): r["end"] for r in df.groupBy("partition").agg({"offset": "max"})
                    .withColumnRenamed("max(offset)", "end").collect()} for topic, df in first.items()}
    for topic, df in first.items():
        report = _append(tmp_path, conf, f"first-{topic}", df)
        assert report["code"] == 0 and report["rejected"]["count"] == 0, report

    _produce(kafka_broker, txn, stamped, 1)  # the cluster goes on: the next run appends from where the first ended
    for topic in (txn, stamped):
        starting = json.dumps({topic: {p: end + 1 for p, end in ends[topic].items()}})
        report = _append(tmp_path, conf, f"second-{topic}", _source(spark, kafka_broker, topic, starting))
        assert report["code"] == 0 and report["rejected"]["count"] == 0, report

    for topic in (txn, stamped):
        theirs = [r.asDict(recursive=True) for r in _source(spark, kafka_broker, topic).select(*COLUMNS)
                  .orderBy("partition", "offset").collect()]
        ours = [r.asDict(recursive=True) for r in read_records(spark, config, topic).select(*COLUMNS)
                .orderBy("partition", "offset").collect()]
        assert ours == theirs
        offsets = [r["offset"] for r in theirs if r["partition"] == 0]
        assert offsets != list(range(offsets[0], offsets[0] + len(offsets))) or topic == stamped  # gaps to keep
    assert {r["timestampType"] for r in theirs} == {1}  # the LogAppendTime topic, kept as the broker stamped it

    again = _append(tmp_path, conf, "again", first[txn])  # the log already holds these offsets
    assert again["results"]["records_appended"] == 0
    assert again["rejected"]["by_reason"] == {"OFFSETS_OUT_OF_ORDER": first[txn].count()}


def test_a_table_with_offsets_and_a_spark_timestamp_column_keeps_both(spark, tmp_path: Path) -> None:
    """`append --table` of a DataFrame with an `offset` column and a Spark TimestampType `timestamp` (not Spark's
    Kafka source: a user's own frame): each record at its offset (gaps kept, the first past the empty log's end) and
    with its time to the millisecond, out of order and hours before the run's `--now`; truth is kafka-python
    decoding the stored segments."""
    from pyspark.sql import Row

    from engine.ops.catalog_table import Catalog
    from layouts.store import read_bytes
    from layouts.store.bound import Store
    from tests.oracles.kafka_python import read_with_kafka_python

    base = 1_790_000_000_000
    given = {0: [(1000, base + 123), (1001, base + 5), (1004, base + 999_999), (1010, base + 7)],
             1: [(3, base - 86_400_001), (9, base + 1)]}
    schema = "topic string, partition int, offset long, timestamp timestamp, timestampType int, value binary"
    rows = [Row("stamped", p, o, datetime.fromtimestamp(0, UTC) + timedelta(milliseconds=ms), 0, b"v%d" % o)
            for p, records in given.items() for o, ms in records]
    view = f"stamped_{uuid.uuid4().hex[:8]}"
    spark.createDataFrame(rows, schema).coalesce(1).createOrReplaceTempView(view)
    root = tmp_path / "root"
    conf = tmp_path / "klake.yaml"
    conf.write_text(yaml.safe_dump({"storage": {"root": str(root)}, "topics": {"stamped": {"partitions": 2}}}))
    report = tmp_path / "report.json"
    code = main(append.SPEC, ["--conf", str(conf), "--table", view, "--now", str(base + 3_600_000), "--no-progress",
                              "--report", str(report)])
    assert code == 0 and json.loads(report.read_text())["results"]["records_appended"] == 6, report.read_text()
    catalog = Catalog.open(Store(str(root)).at(str(root / "_catalog")))
    for partition, records in given.items():
        stored = [(offset, stamp) for segment in catalog.live_segments("stamped", partition)
                  for offset, stamp, *_ in read_with_kafka_python(read_bytes(segment.log_key))[0]]
        assert stored == records
    back = read_records(spark, load_config(str(conf), []), "stamped").collect()
    assert sorted((r["partition"], r["offset"], r["timestampType"]) for r in back) == sorted(
        (p, o, 0) for p, records in given.items() for o, _ in records)
