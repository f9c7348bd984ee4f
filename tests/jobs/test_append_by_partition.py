"""An input task appending its split directly (`AppendTasks.over_input`, the archive's path: one Kafka partition per
split, nothing staged): its rows go to their partition's run whole, and a split whose rows of one partition come
in two runs (which staging would have brought together) fails instead of appending them as two appends."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from engine.errors import KlakeError
from engine.names import TopicPartition
from jobs.ingest.append_task import HELD, AppendTasks
from jobs.ingest.assign import tp_names

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
