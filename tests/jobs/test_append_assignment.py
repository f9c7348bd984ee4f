"""Which Parquet inputs the append job sends through its sticky (null-key) pass: `may_need_sticky` reads
only footers, so it must never say "none" for a file that has a record with neither key nor partition
(checked against the rows themselves), and should say so for files that have none."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from jobs.append import may_need_sticky

N = 40


def _table(keys: list[bytes | None], partitions: list[int | None] | None) -> pa.Table:
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array([b"v"] * len(keys), pa.binary())})
    return table if partitions is None else table.append_column("partition", pa.array(partitions, pa.int32()))


def _has_sticky_rows(table: pa.Table) -> bool:
    neither = table["key"].is_null()
    if "partition" in table.column_names:
        neither = pc.and_(neither, table["partition"].is_null())
    return pc.any(neither).as_py() or False


CASES = {
    "all keyed, no partition column": (_table([b"k"] * N, None), False),
    "one null key, no partition column": (_table([b"k"] * (N - 1) + [None], None), True),
    "null keys, every partition given": (_table([None] * N, list(range(N))), False),
    "null keys and null partitions on other rows of one row group": (
        _table([None] * (N // 2) + [b"k"] * (N // 2), [0] * (N // 2) + [None] * (N // 2)), True),
    "null keys and null partitions in different row groups": (
        _table([None] * (N // 2) + [b"k"] * (N // 2), [0] * (N // 2) + [None] * (N // 2)), False),
    "a null key with a null partition": (_table([b"k"] * (N - 1) + [None], [1] * (N - 1) + [None]), True),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("statistics", [True, False])
def test_footers_never_hide_a_record_that_needs_the_sticky_partitioner(name: str, statistics: bool,
                                                                       tmp_path: Path) -> None:
    table, expected = CASES[name]
    path = tmp_path / "in.parquet"
    row_group_size = N // 2 if "different row groups" in name else N
    pq.write_table(table, path, row_group_size=row_group_size, write_statistics=statistics)
    says = may_need_sticky(pq.ParquetFile(path).metadata)
    assert says or not _has_sticky_rows(table)  # never a false "none"
    assert says == (expected or not statistics)  # without null counts, it cannot rule the pass out


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
@pytest.mark.parametrize("tasks", [1, 3, 8, 13])
def test_task_keys_send_each_to_its_own_task_under_sparks_hash_partitioning(spark, tasks: int) -> None:
    """`task_keys` against Spark itself: repartitioned into `tasks` by hash, key i lands in task i."""
    from pyspark.sql import functions as F

    from jobs.append import task_keys

    keys = task_keys(spark, tasks)
    df = spark.createDataFrame([(i, key) for i, key in enumerate(keys)], "i int, key int")
    placed = dict(df.repartition(tasks, "key").select("i", F.spark_partition_id().alias("task")).collect())
    assert placed == {i: i for i in range(tasks)}


@pytest.mark.spark
@pytest.mark.parametrize("sort", ["one long key", "four columns"])
def test_parquet_split_across_many_tasks_appends_in_input_order(spark, tmp_path: Path, monkeypatch,
                                                                 sort: str) -> None:
    """Files of many row groups, each read by several Spark tasks (small `maxPartitionBytes`): every
    partition holds exactly its keyed records (kafka-python's partitioner) in input order, files in path
    order, rows in file order; explicit partitions the topic lacks are rejected. Both sort forms: the
    packed `_order` long and, when it would not fit, the four columns."""
    from jobs import append
    from tests.jobs.test_jobs import Jobs, kafka_partition, local_backend

    if sort == "four columns":
        monkeypatch.setattr(append, "ORDER_BITS", 5)
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
