"""How the append job places records and keeps their input order across its input tasks: keyed records where
kafka-python's partitioner sends them, explicit partitions as given, null keys in sticky runs, and each
partition's records in input order (files in path order, rows in file order) however the input is split."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


@pytest.mark.spark
def test_json_input_with_null_keys_appends_every_record_where_the_producer_would(spark, tmp_path: Path) -> None:
    """JSON lines (Spark infers `partition` as bigint): keyed records go where kafka-python's partitioner
    sends them, explicit partitions as given, and the null-key ones in sticky runs, none lost."""
    from jobs import append
    from tests.jobs.test_jobs import Jobs, kafka_partition, local_backend

    jobs = Jobs(tmp_path, local_backend(tmp_path), {"t": {"partitions": 3}}, jobs={"sticky_batch_bytes": 100})
    rows = [{"key": None if i % 3 == 0 else f"k{i % 11}", "partition": 2 if i % 10 == 7 else None,
             "value": f"r-{i:03d}|" + "x" * (i % 17), "timestamp": 1_790_000_000_000 - 1000 + i} for i in range(120)]
    (tmp_path / "in.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, report = jobs.run(append.SPEC, "--input", str(tmp_path / "in.json"), "--format", "json", "--topic", "t")
    assert code == 0, report.get("failures")
    placed = {int(r[3].split(b"|")[0][2:]): p for p in range(3) for r in jobs.records("t", p)}
    assert sorted(placed) == list(range(120))
    for i, row in enumerate(rows):
        if row["partition"] is not None:
            assert placed[i] == row["partition"]
        elif row["key"] is not None:
            assert placed[i] == kafka_partition(row["key"].encode(), 3)
    assert len({placed[i] for i, row in enumerate(rows) if row["key"] is None and row["partition"] is None}) > 1


@pytest.mark.spark
def test_parquet_split_across_many_tasks_appends_in_input_order(spark, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Files of many row groups, each read by several input tasks (small `maxPartitionBytes`), whose rows
    are staged in several flushes (a small flush size): every partition holds exactly its keyed records
    (kafka-python's partitioner) in input order, files in path order, rows in file order; explicit
    partitions the topic lacks are rejected."""
    from jobs import append
    from tests.jobs.test_jobs import Jobs, kafka_partition, local_backend

    monkeypatch.setattr(append, "STAGE_FLUSH_BYTES", 30_000)
    rows = {(f, i): (f"k{(i * 7 + f) % 97}".encode(), 9 if i % 250 == 3 else None) for f in range(3) for i in range(3000)}
    for f in range(3):
        path = tmp_path / "in" / f"part-{f}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        ordered = [rows[f, i] for i in range(3000)]
        pq.write_table(pa.table({"key": pa.array([k for k, _ in ordered], pa.binary()),
                                 "partition": pa.array([p for _, p in ordered], pa.int32()),
                                 "value": pa.array([f"{f}-{i:05d}|{'x' * (i % 40)}" for i in range(3000)], pa.binary()),
                                 "timestamp": pa.array(range(1_790_000_000_000, 1_790_000_003_000), pa.int64())}),
                       path, row_group_size=100)
    jobs = Jobs(tmp_path, local_backend(tmp_path), {"t": {"partitions": 5}})
    before = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "20000")
    try:
        assert spark.read.parquet(str(tmp_path / "in")).rdd.getNumPartitions() > 6
        code, report = jobs.run(append.SPEC, "--input", str(tmp_path / "in"), "--topic", "t")
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", before)
    assert code == 0, report.get("failures")
    assert report["rejected"]["by_reason"] == {"UNKNOWN_PARTITION": sum(p == 9 for _, p in rows.values())}
    for p in range(5):
        got = [tuple(map(int, r[3].split(b"|")[0].split(b"-"))) for r in jobs.records("t", p)]
        assert got == sorted((f, i) for (f, i), (key, given) in rows.items()
                             if given is None and kafka_partition(key, 5) == p)


@pytest.mark.spark
def test_a_record_without_a_topic_is_bad_input_named_by_file_and_row(spark, tmp_path: Path) -> None:
    """Found by an input task (JSON, read by Spark): exit code 2, one error naming the file and the row,
    nothing appended and nothing left staged."""
    from jobs import append
    from tests.jobs.test_jobs import Jobs, local_backend

    jobs = Jobs(tmp_path, local_backend(tmp_path), {"t": {"partitions": 2}})
    rows = [{"topic": None if i == 3 else "t", "key": f"k{i}", "value": f"v{i}"} for i in range(5)]
    (tmp_path / "in.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, report = jobs.run(append.SPEC, "--input", str(tmp_path / "in.json"), "--format", "json")
    assert code == 2
    [failure] = report["failures"]
    assert "in.json" in failure["error"] and "row 3" in failure["error"] and "`topic`" in failure["error"]
    assert report["results"].get("records_appended", 0) == 0
    assert not (tmp_path / "root" / "_staging").exists() or not any((tmp_path / "root" / "_staging").rglob("*.arrow"))


def test_task_buffers_shrink_with_the_smallest_segment_between_floor_and_cap() -> None:
    """Issue 28 item 8: a worker's memory is its buffers plus one open segment, bounded by
    4 x segment.bytes + 300 MB, so the buffers are a quarter of the smallest segment.bytes, never more
    than their fixed cap nor less than the floor."""
    from engine.log.topic_config import TopicConfig
    from engine.ops.run import PartitionInput
    from jobs.ingest.append_task import APPEND_CHUNK_BYTES
    from jobs.ingest.stage import BUFFER_FLOOR_BYTES, STAGE_FLUSH_BYTES, buffer_bytes
    from kernel.names import TopicPartition

    def items(*segment_bytes: int) -> list[PartitionInput]:
        return [PartitionInput(TopicPartition("t", p), (), TopicConfig.from_mapping({"segment.bytes": s}))
                for p, s in enumerate(segment_bytes)]

    mib = 1024**2
    assert buffer_bytes(APPEND_CHUNK_BYTES, items(1024 * mib, 32 * mib)) == 8 * mib
    assert buffer_bytes(STAGE_FLUSH_BYTES, items(32 * mib)) == 8 * mib
    assert buffer_bytes(APPEND_CHUNK_BYTES, items(1024 * mib)) == APPEND_CHUNK_BYTES
    assert buffer_bytes(STAGE_FLUSH_BYTES, items(1024 * mib)) == STAGE_FLUSH_BYTES
    assert buffer_bytes(APPEND_CHUNK_BYTES, items(1 * mib)) == BUFFER_FLOOR_BYTES
    assert buffer_bytes(APPEND_CHUNK_BYTES, []) == APPEND_CHUNK_BYTES
