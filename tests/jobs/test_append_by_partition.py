"""An input task appending its split directly (`AppendTasks.over_input`, the archive's path: one Kafka partition per
split, nothing staged): its rows go to their partition's run whole, and a split whose rows of one partition come
in two runs (which staging would have brought together) fails instead of appending them as two appends; input
whose partition comes in two splits (two tasks append it, each from the log end) fails on the driver before the
commit, with nothing committed."""

from __future__ import annotations

import pickle
import uuid
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from engine.ops.catalog_table import Catalog
from jobs import append
from jobs.ingest.append_task import HELD, AppendTasks
from jobs.ingest.assign import tp_names
from jobs.ingest.source import InputSettings
from jobs.runtime.job_runner import main
from kernel.errors import KlakeError
from kernel.names import TopicPartition
from layouts.store.bound import Store

COUNTS = {"orders": 2}


def _tasks() -> AppendTasks:
    """Both partitions selected, neither appended by this attempt (no items: their leases are elsewhere), so a
    run's result row is its record count, with no engine and no storage."""
    selected = frozenset(TopicPartition("orders", p) for p in range(2))
    return AppendTasks(tp_names(COUNTS), {}, selected, COUNTS, None, [""], None, {})


def _split(partitions: list[int]) -> pa.RecordBatch:
    n = len(partitions)
    return pa.RecordBatch.from_pydict({
        "topic": ["orders"] * n, "partition": pa.array(partitions, pa.int32()), "key": pa.array([b"k"] * n),
        "value": pa.array([b"v"] * n), "offset": list(range(n)), "_block": [0] * n, "_rank": [0] * n,
        "_pos": list(range(n))})


def test_a_split_of_one_partition_is_one_run_with_every_row() -> None:
    out = pa.Table.from_batches(list(_tasks().over_input(iter([_split([1, 1]), _split([1])])))).to_pylist()
    assert [(r["topic"], r["partition"], r["kind"], pickle.loads(r["result"])) for r in out] == [("orders", 1, HELD, 3)]


def test_a_partition_in_two_runs_of_one_split_fails() -> None:
    with pytest.raises(KlakeError, match="orders-0 are not in one run"):
        list(_tasks().over_input(iter([_split([0, 0]), _split([1]), _split([0])])))


@pytest.mark.spark
def test_a_partition_in_two_splits_fails_the_run_before_its_commit(spark, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """A caller promising one whole partition per split (as the archive does of Spark's Kafka source) over a table
    whose two splits each hold one run of orders-0: each task appends its run from the log end, and the driver
    refuses the two appends of one partition (exit 2, one line) before the catalog commits either."""
    view = f"two_splits_{uuid.uuid4().hex[:8]}"
    spark.sql("SELECT 'orders' AS topic, 0 AS partition, CAST(id AS STRING) AS value FROM range(0, 40, 1, 2)") \
        .createOrReplaceTempView(view)
    conf = tmp_path / "klake.yaml"
    conf.write_text(yaml.safe_dump({"storage": {"root": str(tmp_path / "root")}, "topics": {"orders": {"partitions": 1}}}))
    by_partition = replace(append.SPEC, run=lambda ctx: append.append_input(
        ctx, replace(InputSettings.from_args(ctx.args), by_partition=True)))
    assert spark.table(view).rdd.getNumPartitions() == 2
    capsys.readouterr()
    assert main(by_partition, ["--conf", str(conf), "--table", view, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"input table {view}: a partition's records came in several input splits" in err[0], err
    catalog = Catalog.open(Store(str(tmp_path / "root")).at(str(tmp_path / "root" / "_catalog")))
    assert catalog.live_segments("orders", 0) == []
