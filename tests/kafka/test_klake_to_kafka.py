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
from pathlib import Path

import pyarrow as pa
import pytest

from jobs import append, compact, recover, retention, roll
from jobs import truncate as truncate_job
from layouts.store import read_bytes
from tests.jobs.test_jobs import HOUR, NOW, Jobs, compact_input, input_table, local_backend, write_parquet
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
