"""The column tools every driver plan (retention, roll, compaction selection) shares: catalog rows grouped
by partition without row objects, int64 views of columns, dictionary-encoded word columns, and a plan's
per-partition table looked up by topic-partition."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kernel.names import TopicPartition


@dataclass(frozen=True)
class Groups:
    """The partitions of a table grouped by (topic, partition): each one's rows are `[starts[g], ends[g])`;
    `gid` maps a row to its group, `topic_of` a group to its index in `topics` (first-seen order)."""

    starts: np.ndarray
    ends: np.ndarray
    gid: np.ndarray
    topics: list[str]
    topic_of: np.ndarray
    partitions: np.ndarray


def group_partitions(table: pa.Table) -> tuple[pa.Table, Groups]:
    """`table` (non-empty, each partition's rows in offset order) with every partition's rows together:
    topics in first-seen order, partition numbers ascending, rows of a partition in their given order."""
    topic_codes = pc.dictionary_encode(table["topic"]).combine_chunks()
    key = (np.asarray(topic_codes.indices, dtype=np.int64) << 32) | int64(table["partition"])
    if np.any(key[1:] < key[:-1]):
        order = np.argsort(key, kind="stable")
        table, key = table.take(order), key[order]
    n = table.num_rows
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], n].astype(np.int64)
    gid = np.repeat(np.arange(len(starts)), ends - starts)
    return table, Groups(starts, ends, gid, topic_codes.dictionary.to_pylist(), key[starts] >> 32,
                         key[starts] & 0xFFFFFFFF)


def int64(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A numeric column as an int64 numpy array."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.int64)


def dictionary(codes: np.ndarray, words: list[str]) -> pa.DictionaryArray:
    """A word column: `codes` index `words` (a plan's actions and reasons, one dictionary entry each)."""
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(words, pa.string()))


class PartitionRows:
    """A plan's `partitions` table (one row per topic-partition) looked up by topic-partition; the index and
    the rows are built once, on first use (a job asks for every partition's row)."""

    partitions: pa.Table

    @cached_property
    def _index(self) -> dict[TopicPartition, int]:
        tps = zip(self.partitions["topic"].to_pylist(), self.partitions["partition"].to_pylist(), strict=True)
        return {TopicPartition(t, p): i for i, (t, p) in enumerate(tps)}

    @cached_property
    def _rows(self) -> list[dict[str, Any]]:
        return self.partitions.to_pylist()

    def topic_partitions(self) -> list[TopicPartition]:
        return list(self._index)
