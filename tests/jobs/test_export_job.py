"""The `export` job end to end on local Spark: topics klake wrote (CreateTime with zstd and out-of-order
timestamps, LogAppendTime, a compacted topic with tombstones, a DeleteRecords log start inside a
segment) exported as a broker's log dir.

Truth is independent of the export: Apache kafka-clients' `FileRecords` (the broker's own record
classes, tests/oracles) and kafka-python read every exported `.log` with CRC checks; ListOffsets over
the exported directory is compared with brute force over the decoded records and with the same lookup
over the catalogued source; every record offset is found through the exported `.index` in the batch
holding it; the checkpoints hold the catalog's log start and end offsets.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from engine.catalog.schema import partition_log_start_offset
from engine.format.batch import scan_batches
from engine.log.kafka_files import parse_offset_checkpoint
from engine.log.lookup import list_offsets
from engine.ops.catalog_table import Catalog
from engine.ops.importer import import_log_dir
from engine.ops.stored_segment import stored_segment
from jobs import append, compact, export
from jobs import truncate as truncate_job
from jobs.cli.inspect import load_partition_dir
from kernel.names import TopicPartition
from layouts.store.bound import Store
from tests.codecs_for_tests import parse_leader_epoch_checkpoint
from tests.engine.format import test_kafka_clients_oracle as jvm_oracle
from tests.engine.ops.test_import import facts
from tests.index_lookups import batch_for_offset
from tests.jobs.test_jobs import (
    HOUR,
    NOW,
    Jobs,
    brute_force_list_offsets,
    compact_input,
    input_table,
    local_backend,
    write_parquet,
)
from tests.oracles.kafka_python import read_with_kafka_python

pytestmark = pytest.mark.spark
kafka = jvm_oracle.kafka  # the kafka-clients JVM (skips, saying why, without the jars or java)


def java_file_records(kafka: jvm_oracle.KafkaClients, path: Path) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record of a `.log` read by kafka-clients' `FileRecords`, each batch and
    record validated (`ensureValid`: sizes and CRC)."""
    records = kafka.record.FileRecords.open(kafka.jvm.java.io.File(str(path)))
    try:
        assert records.sizeInBytes() == path.stat().st_size
        return [(r.offset, r.timestamp) for batch in kafka.iterate(records.batches())
                for r in kafka.read_batch(batch).records]
    finally:
        records.close()


def test_export_writes_a_log_dir_kafka_clients_reads_whose_indexes_answer_like_the_source(
        spark, tmp_path: Path, kafka) -> None:
    topics = {"c": {"partitions": 2, "segment.bytes": 1500, "index.interval.bytes": 100, "compression.type": "zstd"},
              "l": {"partitions": 1, "segment.bytes": 1500, "message.timestamp.type": "LogAppendTime"},
              "state": {"partitions": 1, "cleanup.policy": "compact", "segment.bytes": 1200}}
    jobs = Jobs(tmp_path, local_backend(tmp_path), topics)
    rng = np.random.default_rng(4)
    c = input_table(300, topic="c", seed=3)
    c = c.set_column(c.schema.get_field_index("timestamp"), "timestamp", pa.array(NOW - 2 * HOUR + np.arange(300) * 10_000
                                               + rng.integers(-60_000, 60_000, 300), pa.int64()))
    c = c.append_column("partition", pa.array([i % 2 for i in range(300)], pa.int32()))
    assert jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "c.parquet", c)))[0] == 0
    for i in range(3):  # LogAppendTime: three appends at three clocks
        table = input_table(60, topic="l", seed=10 + i, tag=f"l{i}")
        assert jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / f"l{i}.parquet", table)),
                        now=NOW + i * HOUR)[0] == 0
    assert jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "s.parquet", compact_input(200, 5))))[0] == 0
    assert jobs.run(compact.SPEC, "--force")[0] == 0
    assert jobs.run(truncate_job.DELETE_RECORDS, "--topic", "c", "--partition", "1", "--offset", "50")[0] == 0
    partitions = [TopicPartition("c", 0), TopicPartition("c", 1), TopicPartition("l", 0), TopicPartition("state", 0)]
    assert jobs.rows("c", 1)[0].base_offset < 50  # the log start is inside a segment

    out = tmp_path / "kafka-logs"
    code, report = jobs.run(export.SPEC, "--output", str(out))
    assert code == 0, report["failures"]
    assert report["results"]["export"]["partitions"] == 4
    starts = parse_offset_checkpoint((out / "log-start-offset-checkpoint").read_bytes(), "log-start")
    ends = parse_offset_checkpoint((out / "recovery-point-offset-checkpoint").read_bytes(), "recovery-point")
    for tp in partitions:
        rows = jobs.rows(tp.topic, tp.partition)
        start, end = partition_log_start_offset(rows), rows[-1].next_offset
        assert (starts[tp], ends[tp]) == (start, end)
        records = jobs.records(tp.topic, tp.partition)
        directory = out / tp.dir_name
        logs = sorted(directory.glob("*.log"))
        assert [int(p.stem) for p in logs] == [r.base_offset for r in rows if r.next_offset > start]
        exported = [r for p in logs for r in read_with_kafka_python(p.read_bytes())[0] if r[0] >= start]
        assert exported == records
        java = [r for p in logs for r in java_file_records(kafka, p) if r[0] >= start]
        assert java == [(r[0], r[1]) for r in records]
        assert parse_leader_epoch_checkpoint((directory / "leader-epoch-checkpoint").read_bytes(), "e") == []

        segments = load_partition_dir(Store(str(directory)))
        assert all(s.index_problems == [] for s in segments), [s.index_problems for s in segments]
        for segment in segments:  # every offset through the exported .index lands in the batch holding it
            headers = scan_batches((directory / f"{segment.base_offset:020d}.log").read_bytes()).headers
            offset_index, _ = segment.indexes()
            for offset in range(int(headers.base_offset[0]), int(headers.last_offset[-1]) + 1):
                row = batch_for_offset(headers, offset_index, offset)
                assert headers.base_offset[row] <= offset <= headers.last_offset[row] or offset in \
                    range(int(headers.last_offset[row - 1]) + 1 if row else 0, int(headers.base_offset[row]))
        source = [stored_segment(r, jobs.catalog.store) for r in rows]
        stamps = sorted({r[1] for r in records})
        for target in [-1, -2, -3, stamps[0] - 1, *stamps[::7], stamps[-1], stamps[-1] + 1]:
            answer = list_offsets(segments, target, start, min_timestamp=0)
            assert (answer.offset, answer.timestamp if target not in (-1, -2) else -1) == \
                brute_force_list_offsets(records, start, end, target)
            assert answer == list_offsets(source, target, start, min_timestamp=0)

    # klake import of the export gives back the source's rows: offsets, counts, sizes, timestamps, states, and
    # the log start offset inside c-1's first segment (from log-start-offset-checkpoint)
    again = Catalog.create(Store(str(tmp_path / "again" / "_catalog")))
    assert not import_log_dir(Store(str(out)), Store(str(tmp_path / "again")), again).failed
    for tp in partitions:
        source_rows = [r for r in jobs.rows(tp.topic, tp.partition) if r.next_offset > starts[tp]]
        copies = again.live_segments(tp.topic, tp.partition)
        assert [(facts(r), r.state) for r in copies] == [(facts(r), r.state) for r in source_rows]
        assert partition_log_start_offset(copies) == starts[tp]
    assert partition_log_start_offset(again.live_segments("c", 1)) == 50 > again.live_segments("c", 1)[0].base_offset

    code, again = jobs.run(export.SPEC, "--output", str(out))  # a re-run writes nothing
    assert code == 0 and again["results"]["export"]["checkpoints_written"] == []
    assert all(p["outcome"]["written"] == [] for p in again["partitions"])
