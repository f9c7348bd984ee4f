"""klake -> Kafka: the segments klake's jobs write pass Kafka's own `kafka-dump-log` (issue 27, 3b).

Every live segment of a store after append (all five codecs, LogAppendTime, headers, null keys and values),
truncate (a segment cut inside), recover (a rebuilt `.index`, a corrupt tail cut), retention, roll and
compact is laid out as a broker would hold it (`<base offset>.log|.index|.timeindex`) and given
to `kafka.tools.DumpLogSegments` twice: `--deep-iteration --index-sanity-check` (every batch and record
decoded, CRCs checked, every index passing the broker's start-up sanity check) and `--verify-index-only`
(every index entry points at the batch holding its offset and timestamp). Kafka's report is the truth:
no error line, every index passes, and offsets are consecutive except where compaction removed records.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.protocol.consumer.offsets import OffsetSpec

from jobs import append, compact, export, offsets_for_times, recover, retention, roll
from jobs import truncate as truncate_job
from layouts.store import read_bytes
from tests.jobs.test_jobs import HOUR, NOW, Jobs, compact_input, input_table, local_backend, write_parquet
from tests.kafka_broker import KafkaBroker
from tests.oracles.kafka_tools import dump_log_segments

pytestmark = pytest.mark.spark

CODECS = ("uncompressed", "gzip", "snappy", "lz4", "zstd")
RECORD_LINE = re.compile(r"\| offset: (\d+) (?:CreateTime|LogAppendTime): (-?\d+) keySize: (-?\d+) valueSize: (-?\d+)")


def broker_layout(jobs: Jobs, topic: str, partition: int, dest: Path) -> list[Path]:
    """The partition's live segments copied as `<dest>/<topic>-<partition>/<base:020d>.{log,index,timeindex}`."""
    directory = dest / f"{topic}-{partition}"
    directory.mkdir(parents=True)
    files = []
    for row in jobs.rows(topic, partition):
        for key, suffix in ((row.log_key, "log"), (row.index_key, "index"), (row.timeindex_key, "timeindex")):
            path = directory / f"{row.base_offset:020d}.{suffix}"
            path.write_bytes(read_bytes(key))
            files.append(path)
    return files


def test_segments_of_append_roll_and_compact_pass_kafka_dump_log(spark, tmp_path: Path) -> None:
    topics = {f"c-{codec}": {"partitions": 1, "segment.bytes": 2000, "index.interval.bytes": 200,
                             "compression.type": codec, "segment.ms": 600_000} for codec in CODECS}
    topics["lat"] = {"partitions": 1, "segment.bytes": 1500, "message.timestamp.type": "LogAppendTime"}
    topics["trunc"] = {"partitions": 1, "segment.bytes": 3000, "index.interval.bytes": 150}
    topics["recov"] = {"partitions": 1, "segment.bytes": 3000, "index.interval.bytes": 150, "max.message.bytes": 400}
    topics["ret"] = {"partitions": 1, "segment.bytes": 3000, "retention.ms": 10 * HOUR}
    topics["state"] = {"partitions": 1, "cleanup.policy": "compact", "segment.bytes": 1200,
                       "index.interval.bytes": 100}
    jobs = Jobs(tmp_path, local_backend(tmp_path), topics)
    for codec in CODECS:
        table = input_table(150, seed=len(codec), null_key_every=7, start_ts=NOW - 2 * HOUR, step_ms=20_000)
        table = table.append_column("headers", pa.array(
            [[{"key": "h", "value": b"v%d" % i}, {"key": "n", "value": None}] if i % 3 else []
             for i in range(150)], pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
        path = write_parquet(tmp_path / f"{codec}.parquet", table)
        assert jobs.run(append.SPEC, "--input", str(path), "--topic", f"c-{codec}")[0] == 0
    for i in range(2):
        path = write_parquet(tmp_path / f"lat{i}.parquet", input_table(60, seed=20 + i, tag=f"l{i}"))
        assert jobs.run(append.SPEC, "--input", str(path), "--topic", "lat", now=NOW + i * HOUR)[0] == 0
    path = write_parquet(tmp_path / "state.parquet", compact_input(300, seed=5))
    assert jobs.run(append.SPEC, "--input", str(path), "--topic", "state")[0] == 0
    for topic in ("trunc", "recov", "ret"):
        table = input_table(200, seed=len(topic), start_ts=NOW - 30 * HOUR, step_ms=500_000, tag=topic)
        path = write_parquet(tmp_path / f"{topic}.parquet", table)
        assert jobs.run(append.SPEC, "--input", str(path), "--topic", topic)[0] == 0
    trunc = jobs.rows("trunc", 0)
    cut = trunc[-2].base_offset + 3  # inside the last closed segment: its .log and indexes are rewritten
    assert jobs.run(truncate_job.SPEC, "--topic", "trunc", "--partition", "0", "--offset", str(cut))[0] == 0
    recov = jobs.rows("recov", 0)
    jobs.backend.put(recov[1].index_key, b"\x07" * 37)  # a garbage .index, rebuilt by recover
    corrupt = bytearray(read_bytes(recov[3].log_key))
    corrupt[len(corrupt) // 2] ^= 0x55  # a CRC mismatch: recover cuts the segment's tail
    jobs.backend.put(recov[3].log_key, bytes(corrupt))
    code, report = jobs.run(recover.SPEC)
    assert code == 0 and report["results"]["segments_repaired"] == 2, report
    code, report = jobs.run(retention.SPEC)
    assert code == 0 and report["results"]["segments_deleted"] > 0, report
    code, report = jobs.run(roll.SPEC)
    assert code == 0 and report["results"]["segments_rolled"] >= len(CODECS), report
    code, report = jobs.run(compact.SPEC, "--force")
    assert code == 0 and report["results"]["records_removed"] > 0, report

    out = tmp_path / "broker-layout"
    files = {topic: broker_layout(jobs, topic, 0, out) for topic in topics}
    every = [f for paths in files.values() for f in paths]
    assert len(every) > 3 * 30  # many segments

    deep = dump_log_segments(every, "--deep-iteration", "--index-sanity-check")
    assert deep.errors == [], "\n".join(deep.errors)
    indexes = {str(f) for f in every if f.suffix in (".index", ".timeindex")}
    assert deep.sound_indexes() == indexes
    state_dir = str(out / "state-0")
    assert deep.gaps and all(state_dir in line for line in deep.gaps), deep.gaps  # gaps only where compacted

    by_topic: dict[str, list[tuple[int, int, int, int]]] = {topic: [] for topic in topics}
    topic = None
    for line in deep.output.splitlines():  # what Kafka decoded: offset, timestamp, key and value sizes
        if line.startswith("Dumping "):
            topic = Path(line.removeprefix("Dumping ")).parent.name.rsplit("-", 1)[0]
        elif (match := RECORD_LINE.match(line)) and topic is not None:
            by_topic[topic].append(tuple(int(g) for g in match.groups()))
    for topic in topics:
        assert by_topic[topic] == [(r[0], r[1], -1 if r[2] is None else len(r[2]), -1 if r[3] is None else len(r[3]))
                                   for r in jobs.records(topic, 0)], topic

    verify = dump_log_segments([f for f in every if f.suffix != ".log"], "--verify-index-only")
    assert verify.errors == [], "\n".join(verify.errors)


def test_a_topic_restored_into_a_live_broker_is_served_whole(spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    """The README's restore: create the topic, stop the broker, `klake export --topic-id` into its log dir,
    start it. The broker serves every record from the kept log start offset, its ListOffsets answers what
    klake's offsets-for-times answers, and its log recovery truncates nothing."""
    topic = f"restored-{uuid.uuid4().hex[:8]}"
    jobs = Jobs(tmp_path, local_backend(tmp_path), {topic: {"partitions": 1, "segment.bytes": 2500,
                                                            "index.interval.bytes": 300, "compression.type": "zstd"}})
    table = input_table(400, seed=9, null_key_every=9, start_ts=NOW - 5 * HOUR, step_ms=40_000)
    stamps = (np.asarray(table["timestamp"]) + np.random.default_rng(9).integers(-120_000, 120_000, 400))
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", pa.array(stamps, pa.int64()))
    assert jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "in.parquet", table)), "--topic", topic)[0] == 0
    start = jobs.rows(topic, 0)[1].base_offset + 5  # a log start offset inside the second segment
    assert jobs.run(truncate_job.DELETE_RECORDS, "--topic", topic, "--partition", "0", "--offset", str(start))[0] == 0
    records = jobs.records(topic, 0)
    assert records[0][0] == start and len(jobs.rows(topic, 0)) >= 3

    kafka_broker.create_topic(topic, retention_ms=-1)
    topic_id = kafka_broker.topic_id(topic)
    log_offset = kafka_broker.log_file.stat().st_size
    with kafka_broker.stopped():
        code, report = jobs.run(export.SPEC, "--topic", topic, "--output", str(kafka_broker.log_dir),
                                "--topic-id", f"{topic}={topic_id}")
        assert code == 0, report["failures"]
    broker_log = kafka_broker.log_file.read_bytes()[log_offset:].decode(errors="replace")
    mentions = [line for line in broker_log.splitlines() if f"{topic}-0" in line]
    end = jobs.rows(topic, 0)[-1].next_offset
    assert any(f"logStartOffset={start}, logEndOffset={end})" in line for line in mentions if "Completed load" in line), \
        mentions
    assert not [line for line in mentions if re.search(r"[Tt]runcat|[Cc]orrupt|[Ii]nvalid|[Rr]ecovering segment|"
                                                       r"[Dd]eleting segment|WARN|ERROR", line)], mentions

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    try:
        consumer.assign([tp])
        assert (consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]) == (start, end)
        consumer.seek_to_beginning(tp)
        served = []
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end and time.monotonic() < deadline:
            served += [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
                       for r in consumer.poll(timeout_ms=500).get(tp, [])]
    finally:
        consumer.close()
    assert served == records

    distinct = sorted({r[1] for r in records})
    targets = [-1, -2, -3, distinct[0] - HOUR, *distinct[::25], *(t + 1 for t in distinct[::25]), distinct[-1] + 1]
    code, report = jobs.run(offsets_for_times.SPEC, "--topic", topic, *(a for t in targets for a in ("--timestamp", str(t))))
    assert code == 0, report["failures"]
    ours = [(a["offset"], -1 if a["target"] in (-1, -2) else a["timestamp"]) if a["found"] else (-1, -1)
            for a in report["results"]["answers"]]
    admin = kafka_broker.admin()
    try:
        theirs = []
        for target in targets:
            spec = {-1: OffsetSpec.LATEST, -2: OffsetSpec.EARLIEST, -3: OffsetSpec.MAX_TIMESTAMP}.get(target, target)
            answer = admin.list_partition_offsets({tp: spec})[tp]
            theirs.append((answer.offset, answer.timestamp))
    finally:
        admin.close()
    assert ours == theirs
