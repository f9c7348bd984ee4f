"""Broker -> klake: a real broker's log dirs, imported by `klake import`, read and answer like the broker (issue 27, 3a).

Topics are produced into the session's broker (`kafka_broker`, tests/kafka_broker.py) by kafka-python's
producer, and by kafka-clients (`tests/oracles/jvm/NullShapesProducer.java`) for records with neither key nor
value and headers with null values, which kafka-python refuses: all five codecs, an idempotent producer, a transactional one with a committed and an aborted
transaction, headers (repeated keys, empty values), null keys, batches of exactly `max.message.bytes`, tombstones, out-of-order timestamps, a LogAppendTime
topic, and segments of 4 KiB so each log has many. The partition directories are copied twice, once while
the broker runs (active segments with their preallocated indexes) and once after a clean shutdown, and
imported in place and `--copy`, on a local root and on a moto S3 bucket. Kafka is the truth for both sides:
- every record `klake read` returns equals what Kafka's consumer fetched (read_uncommitted: aborted records
  included, control records not), offset, timestamp and its type, key, value and headers;
- the catalog's facts of every segment (offsets, record and batch counts, bytes, largest and first batch
  timestamps) are what Kafka's `DumpLogSegments` reports of the file;
- `klake offsets-for-times` answers, for 60+ targets per topic (every timestamp's neighbourhood, -1, -2, -3),
  what the broker's ListOffsets answers (kafka-python's `list_partition_offsets`).
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer.offsets import OffsetSpec

from engine.format.batch import scan_batches
from engine.ops.catalog_table import Catalog
from jobs import import_log, offsets_for_times, read
from layouts.store.bound import Store
from tests.conftest import Backend
from tests.kafka.runs import run_job
from tests.kafka_broker import KafkaBroker
from tests.oracles.kafka_tools import Dump, dump_log_segments, run_java_helper

pytestmark = pytest.mark.spark

CODECS = (None, "gzip", "snappy", "lz4", "zstd")
SEGMENT_BYTES = 4096
MAX_MESSAGE_BYTES = 4000  # the broker refuses a batch above segment.bytes too (RECORD_LIST_TOO_LARGE)
HOUR = 3_600_000

Record = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def produce(broker: KafkaBroker, topic: str, t0: int, seed: int) -> None:
    """Records of every shape through producers of every kind, all into partition 0."""
    rng = np.random.default_rng(seed)
    common = {"bootstrap_servers": broker.bootstrap, "linger_ms": 20, "batch_size": 2048}

    def send(producer: KafkaProducer, i: int) -> None:
        key = None if i % 7 == 3 else b"key-%d" % rng.integers(40)
        value = None if i % 11 == 5 and key is not None else b"value-%05d|" % i + bytes(rng.integers(97, 123, int(rng.integers(0, 120)),
                                                                                     dtype=np.uint8))
        headers = [("h", b"%d" % i), ("h", b"")] if i % 3 == 1 else [("only", b"")] if i % 3 == 2 else []
        timestamp = t0 + i * 1000 + int(rng.integers(-30_000, 30_000))  # out of order within half a minute
        producer.send(topic, key=key, value=value, headers=headers, partition=0, timestamp_ms=timestamp)

    i = 0
    for codec in CODECS:
        producer = KafkaProducer(compression_type=codec, enable_idempotence=False, acks=1, **common)
        for _ in range(150):
            send(producer, i)
            i += 1
        producer.close()
    producer = KafkaProducer(enable_idempotence=False, acks=1, max_request_size=2 * MAX_MESSAGE_BYTES, **common)
    for n in range(2):  # batches of exactly max.message.bytes (61 B batch header, 12 B of record framing), each
        value = b"%d" % n * (MAX_MESSAGE_BYTES - 73)  # nearly a whole segment: each rolls one
        producer.send(topic, key=b"big", value=value, partition=0, timestamp_ms=t0 + i * 1000).get(timeout=30)
        i += 1
    producer.close()
    producer = KafkaProducer(enable_idempotence=True, acks="all", compression_type="lz4", **common)
    for _ in range(100):
        send(producer, i)
        i += 1
    producer.close()
    java_codec = CODECS[seed % len(CODECS)] or "none"  # kafka-clients for what kafka-python refuses to write
    assert run_java_helper("NullShapesProducer", broker.bootstrap, topic, java_codec, str(t0 + i * 1000), "30") \
        == "produced 30\n"
    i += 30
    producer = KafkaProducer(transactional_id=f"tx-{topic}", compression_type="zstd", **common)
    producer.init_transactions()
    for commit in (True, False, True):
        producer.begin_transaction()
        for _ in range(40):
            send(producer, i)
            i += 1
        producer.flush()
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()


def consumed(broker: KafkaBroker, topic: str, isolation: str = "read_uncommitted") -> list[Record]:
    """Every record Kafka's consumer fetches, read_uncommitted by default (as Spark's Kafka source reads)."""
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             isolation_level=isolation, auto_offset_reset="earliest")
    try:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        consumer.seek_to_beginning(tp)
        out: list[Record] = []
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for r in consumer.poll(timeout_ms=500).get(tp, []):
                out.append((r.offset, r.timestamp, r.timestamp_type, r.key, r.value, tuple(tuple(h) for h in r.headers)))
        return out
    finally:
        consumer.close()


def broker_list_offsets(broker: KafkaBroker, topic: str, targets: list[int]) -> list[tuple[int, int]]:
    """The broker's ListOffsets answer (offset, timestamp) per target: -1, -2, -3 (KIP-734) or a timestamp."""
    tp = TopicPartition(topic, 0)
    admin = broker.admin()
    try:
        answers = []
        for target in targets:
            spec = {-1: OffsetSpec.LATEST, -2: OffsetSpec.EARLIEST, -3: OffsetSpec.MAX_TIMESTAMP}.get(target, target)
            answer = admin.list_partition_offsets({tp: spec})[tp]
            answers.append((answer.offset, answer.timestamp))
        return answers
    finally:
        admin.close()


def klake_records(tmp: Path, root: str, topic: str, *argv: str) -> list[Record]:
    out = tmp / f"read-{topic}-{uuid.uuid4().hex[:6]}"
    run_job(read.SPEC, tmp, "--root", root, "--topic", topic, "--output", str(out), *argv)
    table = pq.read_table(out).sort_by("offset")
    rows = table.to_pylist()
    return [(r["offset"], _epoch_ms(r["timestamp"]), r["timestampType"], r["key"], r["value"],
             tuple((h["key"], h["value"]) for h in r["headers"] or ())) for r in rows]


def _epoch_ms(value: object) -> int:
    if isinstance(value, int):
        return value
    return round(value.timestamp() * 1000)  # a timezone-aware datetime (Spark's TimestampType)


def klake_list_offsets(tmp: Path, root: str, topic: str, targets: list[int]) -> list[tuple[int, int]]:
    argv = ["--root", root, "--topic", topic, *(a for t in targets for a in ("--timestamp", str(t)))]
    answers = run_job(offsets_for_times.SPEC, tmp, *argv)["results"]["answers"]
    assert [a["target"] for a in answers] == targets
    return [(a["offset"], -1 if a["target"] in (-1, -2) else a["timestamp"]) if a["found"] else (-1, -1)
            for a in answers]


BATCH_LINE = re.compile(r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* position: (\d+) "
                        r"(?:CreateTime|LogAppendTime): (-?\d+) size: (\d+) ")


def segment_facts(dump: Dump) -> list[tuple[int, int, int, int, int, int, int]]:
    """Per segment, from DumpLogSegments' batch lines: base offset (the file's), last offset, records, batches,
    bytes, largest timestamp and the first batch's timestamp."""
    assert dump.errors == [], dump.errors
    segments: list[list[tuple[int, ...]]] = []
    bases = []
    for line in dump.output.splitlines():
        if line.startswith("Dumping "):
            bases.append(int(Path(line.removeprefix("Dumping ")).stem))
            segments.append([])
        elif match := BATCH_LINE.search(line):
            segments[-1].append(tuple(int(g) for g in match.groups()))
    return [(base, max(b[1] for b in batches), sum(b[2] for b in batches), len(batches), sum(b[5] for b in batches),
             max(b[4] for b in batches), batches[0][4]) for base, batches in zip(bases, segments, strict=True) if batches]


def catalog_facts(root: str, topic: str) -> list[tuple[int, int, int, int, int, int, int]]:
    rows = Catalog.open(Store(f"{root}/_catalog")).live_segments(topic, 0)
    return [(r.base_offset, r.last_offset, r.record_count, r.batch_count, r.size_bytes, r.largest_timestamp,
             r.first_batch_timestamp) for r in rows if r.size_bytes]


def targets_for(records: list[Record]) -> list[int]:
    """-1, -2, -3 and, around 20 of the distinct timestamps, the timestamp itself and its neighbours, plus
    the ends (before the first record, after the last)."""
    stamps = sorted({r[1] for r in records})
    picked = stamps[::max(1, len(stamps) // 20)] + [stamps[-1]]
    around = sorted({t + d for t in picked for d in (-1, 0, 1)})
    return [-1, -2, -3, stamps[0] - HOUR, *around, stamps[-1] + HOUR]


def test_a_brokers_log_dir_imported_reads_and_answers_list_offsets_like_the_broker(
        spark, kafka_broker: KafkaBroker, s3_backend: Backend, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    mixed = kafka_broker.create_topic(f"mixed-{suffix}", segment_bytes=SEGMENT_BYTES, retention_ms=-1,
                                      index_interval_bytes=512, max_message_bytes=MAX_MESSAGE_BYTES)
    lat = kafka_broker.create_topic(f"lat-{suffix}", segment_bytes=SEGMENT_BYTES, retention_ms=-1,
                                    message_timestamp_type="LogAppendTime", max_message_bytes=MAX_MESSAGE_BYTES)
    t0 = int(time.time() * 1000) - 3 * HOUR
    produce(kafka_broker, mixed, t0, seed=1)
    produce(kafka_broker, lat, t0, seed=2)
    topics = (mixed, lat)
    truth = {topic: consumed(kafka_broker, topic) for topic in topics}
    targets = {topic: targets_for(truth[topic]) for topic in topics}
    listed = {topic: broker_list_offsets(kafka_broker, topic, targets[topic]) for topic in topics}
    assert all(len(targets[topic]) >= 50 for topic in topics)
    assert len(list(kafka_broker.topic_dir(mixed).glob("*.log"))) > 15  # many segments

    running = tmp_path / "running"  # copied while the broker runs: active segments, preallocated indexes
    for topic in topics:
        kafka_broker.copy_topic(topic, running)
    sizes = [int(s) for log in (running / f"{mixed}-0").glob("*.log") for s in scan_batches(log.read_bytes()).headers.size]
    assert sizes.count(MAX_MESSAGE_BYTES) == 2  # the two batches at the limit
    stopped_at = time.monotonic()
    with kafka_broker.stopped():
        stopped = tmp_path / "stopped"  # after a clean shutdown
        for topic in topics:
            kafka_broker.copy_topic(topic, stopped)
    print(f"broker stop + restart: {time.monotonic() - stopped_at:.1f} s")

    on_s3 = s3_backend.upload_tree(stopped, s3_backend.uri("kafka-logs"), skip_suffixes=())
    imports = [(str(running), str(tmp_path / "root-running"), False),   # local, in place
               (str(stopped), str(tmp_path / "root-stopped"), True),    # local, --copy
               (on_s3, s3_backend.uri("root"), False),                  # moto S3, in place
               (on_s3, s3_backend.uri("copied"), True)]                 # moto S3, --copy
    for source, root, copy in imports:
        run_job(import_log.SPEC, tmp_path, source, "--root", root, *(["--copy"] if copy else []))
        if source == str(stopped):  # the catalog's segment facts are what DumpLogSegments reports of each file
            for topic in topics:
                logs = sorted((stopped / f"{topic}-0").glob("*.log"))
                assert catalog_facts(root, topic) == segment_facts(dump_log_segments(logs)), topic
        for topic in topics:
            assert klake_records(tmp_path, root, topic) == truth[topic], (source, topic)
            assert klake_list_offsets(tmp_path, root, topic, targets[topic]) == listed[topic], (source, topic)
