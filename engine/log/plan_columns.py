"""The column tools every driver plan (retention, roll, compaction selection) shares: catalog rows grouped
by partition without row objects, int64 views of columns, and dictionary-encoded word columns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


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
