"""read_committed against the real broker (issue 29, item 1).

A topic of two partitions and small segments gets interleaved batches of two transactional producers
(committed and aborted transactions, spanning segments), of a plain producer, and a third transaction left
open. Its partition directories are copied while the broker runs and imported. Kafka is the truth:
- `klake read --isolation-level read_committed` returns what kafka-python's read_committed consumer fetches
  (aborted records and markers left out, nothing from the open transaction's first offset on);
- `spark.read.format("klake")` equals `spark.read.format("kafka")` on the broker, every column, with
  `kafka.isolation.level` read_committed and read_uncommitted;
- the `.txnindex` files `klake export` writes are the broker's, byte for byte.
Then the open transaction is aborted, the topic copied again, imported under a new name and exported into
the broker's own log dir (the README's restore): the broker loads it without recovering a segment and
serves a read_committed consumer what klake's read_committed read returns, which is the source topic's
read_committed records; without the exported `.txnindex` it would serve the aborted records.
"""

from __future__ import annotations

import re
import shutil
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from jobs import export, import_log, read
from jobs.klake_source import register
from tests.kafka.runs import available_now, checkpointed_offsets, run_job
from tests.kafka_broker import KafkaBroker
from tests.oracles import fetch_jvm

pytestmark = pytest.mark.spark

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
PARTITIONS = (0, 1)
ABORTED_TXN = np.dtype([("version", ">i2"), ("producer_id", ">i8"), ("first_offset", ">i8"), ("last_offset", ">i8"),
                        ("last_stable_offset", ">i8")])  # Kafka's AbortedTxn, 34 bytes
Record = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def produce(broker: KafkaBroker, topic: str) -> KafkaProducer:
    """Interleaved transactions and plain records in both partitions; returns the producer whose
    transaction is left open."""
    common = {"bootstrap_servers": broker.bootstrap, "linger_ms": 0, "batch_size": 512}
    plain = KafkaProducer(acks=1, enable_idempotence=False, **common)
    a = KafkaProducer(transactional_id=f"a-{topic}", compression_type="lz4", **common)
    b = KafkaProducer(transactional_id=f"b-{topic}", **common)
    hanging = KafkaProducer(transactional_id=f"c-{topic}", transaction_timeout_ms=600_000, **common)
    for producer in (a, b, hanging):
        producer.init_transactions()
    i = 0

    def send(producer: KafkaProducer, n: int) -> None:
        nonlocal i
        for _ in range(n):
            headers = [("i", b"%d" % i)] if i % 3 else []
            producer.send(topic, key=None if i % 7 == 0 else b"k%d" % (i % 5), value=b"v%d-" % i + b"x" * (i % 40),
                          headers=headers, partition=i % 2)
            i += 1
        producer.flush()

    for round_ in range(6):
        a.begin_transaction()
        b.begin_transaction()
        for _ in range(3):  # each producer's batches between the others'
            send(a, 4)
            send(plain, 3)
            send(b, 5)
        if round_ == 4:
            hanging.begin_transaction()
            send(hanging, 6)
        send(a, 2)
        a.commit_transaction() if round_ % 2 == 0 else a.abort_transaction()
        send(plain, 2)
        b.abort_transaction() if round_ % 3 != 1 else b.commit_transaction()
    send(plain, 10)
    for producer in (plain, a, b):
        producer.close()
    return hanging


def consumed(broker: KafkaBroker, topic: str, isolation: str = "read_committed") -> dict[int, list[Record]]:
    """What kafka-python's consumer fetches of each partition, up to its end offset (the last stable offset
    when read_committed)."""
    tps = [TopicPartition(topic, p) for p in PARTITIONS]
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, isolation_level=isolation,
                             auto_offset_reset="earliest")
    try:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        consumer.seek_to_beginning(*tps)
        out: dict[int, list[Record]] = {p: [] for p in PARTITIONS}
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                out[tp.partition] += [(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))
                                      for r in records]
        return out
    finally:
        consumer.close()


def klake_read(tmp: Path, root: str, topic: str, *argv: str) -> dict[int, list[Record]]:
    out = tmp / f"read-{uuid.uuid4().hex[:6]}"
    run_job(read.SPEC, tmp, "--root", root, "--topic", topic, "--output", str(out), *argv)
    rows = pq.read_table(out).sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pylist()
    result: dict[int, list[Record]] = {p: [] for p in PARTITIONS}
    for r in rows:
        result[r["partition"]].append((r["offset"], round(r["timestamp"].timestamp() * 1000), r["key"], r["value"],
                                       tuple((h["key"], h["value"]) for h in r["headers"] or ())))
    return result


def txn_indexes(directory: Path) -> dict[str, bytes]:
    """The non-empty `.txnindex` files under `directory`, by partition directory and name."""
    return {f"{path.parent.name}/{path.name}": path.read_bytes() for path in sorted(directory.glob("*/*.txnindex"))
            if path.stat().st_size}


def test_read_committed_reads_and_txnindexes_are_kafkas(spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    fetch_jvm.require("spark-kafka")
    topic = kafka_broker.create_topic(f"txn-{uuid.uuid4().hex[:8]}", partitions=len(PARTITIONS), segment_bytes=3000,
                                      retention_ms=-1)
    hanging = produce(kafka_broker, topic)
    try:
        committed = consumed(kafka_broker, topic)
        uncommitted = consumed(kafka_broker, topic, "read_uncommitted")
        logs = tmp_path / "logs"
        for partition in PARTITIONS:
            kafka_broker.copy_topic(topic, logs, partition)
        root = str(tmp_path / "root")
        run_job(import_log.SPEC, tmp_path, str(logs), "--root", root)

        for p in PARTITIONS:  # the data holds what the test is about
            assert len(committed[p]) < len([r for r in uncommitted[p] if r[0] < committed[p][-1][0]]), p
            assert max(r[0] for r in uncommitted[p]) > committed[p][-1][0] + 1, p  # the open transaction's records
        assert len(txn_indexes(logs)) >= 4 and len(list(logs.glob(f"{topic}-0/*.log"))) >= 4
        entries = np.frombuffer(b"".join(txn_indexes(logs).values()), ABORTED_TXN)
        assert (entries["last_stable_offset"] < entries["last_offset"] + 1).any()  # another transaction was open

        assert klake_read(tmp_path, root, topic, "--isolation-level", "read_committed") == committed
        assert klake_read(tmp_path, root, topic) == uncommitted

        register(spark)
        for isolation in ("read_committed", "read_uncommitted"):
            theirs = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka_broker.bootstrap)
                      .option("subscribe", topic).option("includeHeaders", "true")
                      .option("kafka.isolation.level", isolation).load())
            ours = (spark.read.format("klake").option("root", root).option("subscribe", topic)
                    .option("includeHeaders", "true").option("kafka.isolation.level", isolation).load())
            assert ours.select(*COLUMNS).schema == theirs.select(*COLUMNS).schema
            their_rows = [r.asDict(recursive=True) for r in theirs.select(*COLUMNS).orderBy("partition", "offset").collect()]
            our_rows = [r.asDict(recursive=True) for r in ours.select(*COLUMNS).orderBy("partition", "offset").collect()]
            assert our_rows == their_rows, isolation
            assert len(our_rows) == sum(len(r) for r in (committed if isolation == "read_committed" else uncommitted).values())

        # a stream ends at the last stable offset too, batch by batch as Spark's Kafka source cuts it
        shared = {"kafka.bootstrap.servers": kafka_broker.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
                  "includeHeaders": "true", "kafka.isolation.level": "read_committed", "maxOffsetsPerTrigger": "60"}
        theirs_stream = available_now(spark, "kafka", shared, tmp_path / "kafka-stream")
        ours_stream = available_now(spark, "klake", {"root": root, **shared}, tmp_path / "klake-stream")
        assert checkpointed_offsets(tmp_path / "klake-stream") == checkpointed_offsets(tmp_path / "kafka-stream")
        assert ours_stream == theirs_stream
        assert sum(len(rows) for rows in ours_stream.values()) == sum(len(r) for r in committed.values())

        exported = tmp_path / "exported"
        run_job(export.SPEC, tmp_path, "--root", root, "--topic", topic, "--output", str(exported))
        assert txn_indexes(exported) == txn_indexes(logs)
    finally:
        hanging.abort_transaction()
        hanging.close()

    # the restore: the topic, its transaction now aborted, exported into the broker under a new name
    final = consumed(kafka_broker, topic)
    again = tmp_path / "again"
    name = f"restored-{uuid.uuid4().hex[:8]}"
    for partition in PARTITIONS:
        shutil.copytree(kafka_broker.topic_dir(topic, partition), again / f"{name}-{partition}")
    restored_root = str(tmp_path / "restored-root")
    run_job(import_log.SPEC, tmp_path, str(again), "--root", restored_root)
    ours = klake_read(tmp_path, restored_root, name, "--isolation-level", "read_committed")
    assert ours == final
    kafka_broker.create_topic(name, partitions=len(PARTITIONS), retention_ms=-1)
    topic_id = kafka_broker.topic_id(name)
    log_offset = kafka_broker.log_file.stat().st_size
    with kafka_broker.stopped():
        run_job(export.SPEC, tmp_path, "--root", restored_root, "--topic", name, "--output", str(kafka_broker.log_dir),
            "--topic-id", f"{name}={topic_id}")
    broker_log = kafka_broker.log_file.read_bytes()[log_offset:].decode(errors="replace")
    mentions = [line for line in broker_log.splitlines() if name in line]
    assert any("Completed load" in line for line in mentions), mentions
    assert not [line for line in mentions if re.search(r"[Rr]ecovering segment|[Rr]ebuild|WARN|ERROR", line)], mentions
    assert consumed(kafka_broker, name) == ours
