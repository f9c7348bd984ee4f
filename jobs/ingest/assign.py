"""Which partition each input record goes to, as Kafka's default producer decides, and its topic-partition
index `_tp` (`tp_names`), in an input task (`jobs.append`'s module docstring has the rules)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.format.partitioner import murmur2, partition_for_keys
from kernel.errors import KlakeError


def assign_partitions(batch: pa.RecordBatch, counts: dict[str, int], sticky: StickyAssigner,
                      topics: np.ndarray) -> pa.RecordBatch:
    """`batch` with every missing partition filled (module docstring): keyed records get Kafka's murmur2
    partition (`engine.format.partitioner`), records with neither key nor partition the task's sticky runs.
    `topics` is each record's topic as its place in `sorted(counts)` (`topic_index`)."""
    partition = batch.column("partition")
    if not partition.null_count:
        return batch
    missing = partition.is_null().to_numpy(zero_copy_only=False)
    keys = batch.column("key")
    keyed = missing & keys.is_valid().to_numpy(zero_copy_only=False) if keys.null_count else missing
    chosen = partition.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    names = sorted(counts)
    for topic in np.flatnonzero(np.bincount(topics[keyed], minlength=len(names))).tolist():  # topics present
        rows = keyed & (topics == topic)
        if rows.all():  # the common case: every record keyed, one topic: no copy of the keys
            chosen = partition_for_keys(keys, counts[names[topic]]).astype(np.int64)
        else:
            at = np.flatnonzero(rows)
            chosen[at] = partition_for_keys(keys.take(pa.array(at)), counts[names[topic]])
    neither = np.flatnonzero(missing & ~keyed)
    if neither.size:
        chosen[neither] = sticky.choose(batch.take(pa.array(neither)))
    at = batch.schema.get_field_index("partition")
    return batch.set_column(at, "partition", pa.array(chosen).cast(partition.type))


class StickyAssigner:
    """The partitions of records with neither key nor partition, across all the batches of one input task
    (KIP-480's sticky partitioner, module docstring): a run per topic that moves to the next partition once
    `sticky_bytes` of values went to the current one, carried over batch boundaries, starting at a partition
    derived from the input split (`files[_rank]`, `_block`) of the topic's first such record."""

    def __init__(self, counts: dict[str, int], sticky_bytes: int, files: Sequence[str]) -> None:
        self.counts, self.sticky_bytes, self.files = counts, max(sticky_bytes, 1), files
        self.runs: dict[str, tuple[int, int]] = {}  # topic -> (current partition, bytes sent to it)

    def choose(self, batch: pa.RecordBatch) -> np.ndarray:
        """The partition of each record of `batch` (all with neither key nor partition), in order."""
        chosen = np.zeros(batch.num_rows, np.int64)
        topics = batch.column("topic")
        sizes = pc.fill_null(pc.binary_length(batch.column("value")), 0).to_numpy(zero_copy_only=False)
        for topic in pc.unique(topics).to_pylist():
            rows = np.flatnonzero(pc.equal(topics, topic).to_numpy(zero_copy_only=False))
            chosen[rows] = self._run(topic, rows, sizes, batch)
        return chosen

    def _run(self, topic: str, rows: np.ndarray, sizes: np.ndarray, batch: pa.RecordBatch) -> np.ndarray:
        n = self.counts[topic]
        if topic not in self.runs:
            first = int(rows[0])
            split = f"{self.files[batch.column('_rank')[first].as_py()]}@{batch.column('_block')[first].as_py()}"
            seed = f"{split}:{topic}".encode()
            self.runs[topic] = (int(murmur2(pa.array([seed], pa.binary()))[0] & np.uint32(0x7FFFFFFF)) % n, 0)
        current, sent = self.runs[topic]
        run_sizes = sizes[rows].astype(np.int64)
        before = sent + np.cumsum(run_sizes) - run_sizes  # bytes of the run when each record arrives
        total = sent + int(run_sizes.sum())
        self.runs[topic] = ((current + total // self.sticky_bytes) % n, total % self.sticky_bytes)
        return (current + before // self.sticky_bytes) % n


def tp_names(counts: dict[str, int]) -> list[tuple[str, int | None]]:
    """What each `_tp` value names: every partition of every topic (topics in name order), then, one per
    topic, the records that name a partition the topic lacks (partition None: a run split by partition)."""
    return [(t, p) for t in sorted(counts) for p in range(counts[t])] + [(t, None) for t in sorted(counts)]


def topic_index(batch: pa.RecordBatch, counts: dict[str, int], files: Sequence[str]) -> np.ndarray:
    """Each record's topic as its place in `sorted(counts)`; a record without one of them is bad input."""
    topic = pc.index_in(batch.column("topic"), value_set=pa.array(sorted(counts), pa.string()))
    if topic.null_count:
        row = int(np.flatnonzero(topic.is_null().to_numpy(zero_copy_only=False))[0])
        raise KlakeError(f"input {files[batch.column('_rank')[row].as_py()]}: row {batch.column('_pos')[row].as_py()}: "
                         f"column `topic` is {batch.column('topic')[row].as_py()!r}, not one of this run's topics")
    return topic.to_numpy(zero_copy_only=False).astype(np.int64)


def with_tp(batch: pa.RecordBatch, counts: dict[str, int], topics: np.ndarray) -> pa.RecordBatch:
    """`batch` (partitions assigned; `topics` from `topic_index`) with `_tp`, each record's place in
    `tp_names(counts)`: its topic-partition, or its topic's "partition the topic lacks" run."""
    sizes = np.array([counts[t] for t in sorted(counts)], np.int64)
    first = np.cumsum(sizes) - sizes
    p = batch.column("partition").to_numpy(zero_copy_only=False).astype(np.int64)
    inside = (p >= 0) & (p < sizes[topics])
    tp = np.where(inside, first[topics] + np.where(inside, p, 0), int(sizes.sum()) + topics)
    return batch.append_column("_tp", pa.array(tp.astype(np.int32)))
