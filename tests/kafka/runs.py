"""What the broker tests share: a klake job run to its report, a topic produced to the broker and imported in
place, and one `AvailableNow` run of a streaming source (klake's or Spark's Kafka source) with its batches and
checkpointed offsets."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from jobs import import_log
from jobs.runtime.job_runner import JobSpec, main
from tests.kafka_broker import KafkaBroker


def run_job(spec: JobSpec, tmp: Path, *argv: str) -> dict:
    """Run `spec` with `argv`; its report, the run asserted successful."""
    report = tmp / f"{spec.name}-{uuid.uuid4().hex[:6]}.json"
    code = main(spec, [*argv, "--no-progress", "--report", str(report)])
    document = json.loads(report.read_text())
    assert code == 0, document.get("failures")
    return document


def imported_topic(kafka_broker: KafkaBroker, tmp: Path, prefix: str,
                   partition_of: Callable[[int], int]) -> tuple[str, Path, int]:
    """A new 2-partition topic `{prefix}-…` of 400 lz4 records in 8 KiB segments (null and repeated keys, values of
    varied length, headers on three in four, timestamps 997 ms apart from an hour ago; record i to partition
    `partition_of(i)`), its log dir copied and imported in place: the topic, klake's root and the first timestamp."""
    topic = kafka_broker.create_topic(f"{prefix}-{uuid.uuid4().hex[:8]}", partitions=2, segment_bytes=8192,
                                      retention_ms=-1)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=10, batch_size=1024,
                             compression_type="lz4")
    t0 = int(time.time() * 1000) - 3_600_000
    for i in range(400):
        producer.send(topic, key=None if i % 9 == 0 else b"k%d" % (i % 13), value=b"v%d-" % i + b"x" * (i % 50),
                      headers=[("n", b"%d" % i)] if i % 4 else [], partition=partition_of(i), timestamp_ms=t0 + i * 997)
    producer.flush()
    producer.close()
    logs = tmp / "logs"
    for partition in (0, 1):
        kafka_broker.copy_topic(topic, logs, partition)
    root = tmp / "root"
    assert main(import_log.SPEC, [str(logs), "--root", str(root), "--no-progress"]) == 0
    return topic, root, t0


def available_now(spark, fmt: str, options: dict[str, str], checkpoint: Path, sources: list | None = None
                  ) -> dict[int, list[dict]]:
    """One AvailableNow run of `fmt` with `options`: each batch's rows (as dicts, in partition and offset order);
    each progress's source entry (offsets, metrics) appended to `sources` if given."""
    batches: dict[int, list[dict]] = {}

    def sink(frame, batch_id: int) -> None:  # noqa: ANN001 - Spark's DataFrame
        batches[batch_id] = [r.asDict(recursive=True) for r in frame.orderBy("partition", "offset").collect()]

    query = (spark.readStream.format(fmt).options(**options).load().writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    if sources is not None:
        sources += [progress.sources[0] for progress in query.recentProgress]
    return batches


def checkpointed_offsets(checkpoint: Path) -> list[dict]:
    """The end offsets of every batch in the checkpoint's offset log (its last line: the source's JSON)."""
    files = sorted((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return [json.loads(p.read_text().splitlines()[-1]) for p in files]


def consumed(broker: KafkaBroker, topic: str, partitions: int, isolation: str = "read_committed") -> list[tuple]:
    """(partition, offset, timestamp, key, value, headers) of every record a consumer of `isolation` reads,
    from the beginning of each partition: the cluster's answer the archive and restore tests compare with."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    out = sorted((r.partition, r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
                 for r in consumer)
    consumer.close()
    return out
