"""The archive's Arrow batches (`jobs.ingest.arrow_batches`): sized from the largest record of each range's
first fetch, measured against the records the test produced, within Spark's bounds, the session's settings
as they were afterwards; the archive holds every record whatever the batch size."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest
import yaml
from kafka import KafkaProducer

from jobs import archive
from jobs.ingest.arrow_batches import (
    MAX_BYTES,
    MAX_RECORDS,
    ROW_OVERHEAD_BYTES,
    UNCHECKED_BYTES,
    records_per_batch,
    sized_batches,
)
from jobs.read import read_records
from jobs.runtime.config import load_config
from jobs.runtime.job_runner import main
from kernel.names import TopicPartition
from tests.kafka_broker import KafkaBroker
from tests.oracles import fetch_jvm

pytestmark = pytest.mark.spark


def test_rows_per_batch_keep_spark_s_byte_bound_and_row_bound() -> None:
    assert records_per_batch(1_000) == 10_000  # Spark's row bound: 10,000 x 1,064 B is within 64 MiB
    assert records_per_batch(1 << 20) == (64 << 20) // ((1 << 20) + ROW_OVERHEAD_BYTES) == 63
    assert records_per_batch(200 << 20) == 1  # a record above the byte bound travels alone, as Spark admits it
    assert records_per_batch(100, max_records=500) == 500
    assert records_per_batch(100, max_bytes=1 << 20) == (1 << 20) // (100 + ROW_OVERHEAD_BYTES)
    for size in (0, 1, 6_647, 6_648, 6_649, 1 << 16):  # brute force: the most rows whose bytes fit
        fits = max([n for n in range(1, 10_001) if n * (size + ROW_OVERHEAD_BYTES) <= 64 << 20], default=1)
        assert records_per_batch(size) == fits, size


def test_sized_batches_set_the_rows_uncheck_the_bytes_and_restore_the_session(spark) -> None:
    spark.conf.set(MAX_RECORDS, "5000")
    spark.conf.set(MAX_BYTES, "1m")
    try:
        with sized_batches(spark, 10_000) as rows:
            assert rows == (1 << 20) // (10_000 + ROW_OVERHEAD_BYTES)  # the user's 1 MiB, parsed as Spark does
            assert spark.conf.get(MAX_RECORDS) == str(rows)
            assert spark.conf.get(MAX_BYTES) == str(UNCHECKED_BYTES)
        assert (spark.conf.get(MAX_RECORDS), spark.conf.get(MAX_BYTES)) == ("5000", "1m")
        with sized_batches(spark, 10) as rows:
            assert rows == 5000  # the user's row bound
    finally:
        spark.conf.unset(MAX_RECORDS)
        spark.conf.unset(MAX_BYTES)
    with sized_batches(spark, 10) as rows:
        assert rows == 10_000
    assert spark.conf.get(MAX_BYTES, None) is None and spark.conf.get(MAX_RECORDS, None) is None
    with sized_batches(spark, None) as rows:  # not measured: Spark's own checks
        assert rows is None and spark.conf.get(MAX_BYTES, None) is None


def _produced(broker: KafkaBroker, topic: str) -> dict[int, list[tuple[bytes, bytes, list]]]:
    """Partition 0: small records; partition 1: 150-250 KiB values with a header, the largest third."""
    sent: dict[int, list] = {0: [], 1: []}
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="lz4", max_request_size=4 << 20)
    for i in range(40):
        sent[0].append((b"k%d" % i, b"v" * (50 + i), []))
    for i, kib in enumerate((150, 180, 250, 200, 160)):
        sent[1].append((b"big-%d" % i, bytes(range(256)) * (kib * 4), [("trace", b"t" * (10 + i))]))
    for partition, records in sent.items():
        for key, value, headers in records:
            producer.send(topic, key=key, value=value, headers=headers, partition=partition)
    producer.flush()
    producer.close()
    return sent


def test_the_archive_sizes_its_batches_from_the_largest_record_and_holds_every_record(
        spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    fetch_jvm.require("spark-kafka")
    topic = kafka_broker.create_topic(f"batches-{uuid.uuid4().hex[:8]}", partitions=2, max_message_bytes=4 << 20)
    sent = _produced(kafka_broker, topic)
    largest = max(len(k) + len(v) + sum(len(hk) + len(hv) for hk, hv in h) for rs in sent.values() for k, v, h in rs)
    conf = tmp_path / "klake.yaml"
    conf.write_text(yaml.safe_dump({"storage": {"root": str(tmp_path / "root")}}))
    report = tmp_path / "report.json"
    assert main(archive.SPEC, ["--conf", str(conf), "--bootstrap-servers", kafka_broker.bootstrap, "--topic", topic,
                               "--no-progress", "--report", str(report)]) == 0
    batches = json.loads(report.read_text())["results"]["arrow_batches"]
    assert batches == {"records": records_per_batch(largest), "largest_record_bytes": largest}
    assert spark.conf.get(MAX_BYTES, None) is None and spark.conf.get(MAX_RECORDS, None) is None
    rows = read_records(spark, load_config(str(conf), []), topic).collect()
    got = sorted((r["partition"], r["offset"], r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"] or []])
                 for r in rows)
    assert got == [(p, o, k, v, h) for p, rs in sent.items() for o, (k, v, h) in enumerate(rs)]


def test_a_range_of_aborted_records_only_is_sampled_as_nothing(kafka_broker: KafkaBroker,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Under read_committed a range holding only an aborted transaction yields no record: the sample ends once
    the consumer's position passes the range's end (not at its deadline, here an hour), nothing measured."""
    monkeypatch.setattr(archive, "SAMPLE_SECONDS", 3600.0)
    topic = kafka_broker.create_topic(f"aborted-{uuid.uuid4().hex[:8]}")
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, transactional_id=f"tx-{topic}")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(5):
        producer.send(topic, value=b"aborted-%d" % i)
    producer.flush()
    producer.abort_transaction()
    producer.close()
    cluster = archive.Cluster(kafka_broker.bootstrap, {}, "read_committed")
    try:
        tp = TopicPartition(topic, 0)
        end = cluster.offsets([tp])[1][tp]
        assert end == 6  # five aborted records and the abort marker
        answers: list[int | None] = []
        sampling = threading.Thread(target=lambda: answers.extend(
            [cluster.largest_record({tp: (0, end)}), cluster.largest_record({tp: (0, 3)})]), daemon=True)
        sampling.start()
        sampling.join(120)  # liveness only: without the position rule it would wait out the hour
        assert answers == [None, None]
    finally:
        cluster.close()
