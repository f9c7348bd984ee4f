"""Appending records at offsets they already have (issue 30): the offset rule of Kafka's follower append.

A leader numbers what it appends; a follower (`UnifiedLog.appendAsFollower`, `validateAndAssignOffsets`
false) keeps the leader's offsets and only checks them: they must increase within the append
(`OffsetsOutOfOrderException`) and start at or after the log end (`UnexpectedAppendOffsetException`).
Gaps are allowed, as a compacted log or one with aborted transactions' control batches has them. klake
applies this rule to an append whose input has an `offset` column (an archive of a cluster): a record
breaking it is rejected with its reason, never renumbered, and every other record still appends.

The rule is one statement over the whole input (`kept_offset_mask`): a record is kept iff its offset is
above every offset before it in the input and at or after the log end, i.e. above the running maximum.
The running maximum includes rejected records (they never raise it: a record below the maximum is
rejected, one above it raises it and is kept).

Batches: a kept batch covers consecutive offsets only (`contiguous_runs`), so its base offset is its
first record's and its lastOffsetDelta its record count - 1; a gap ends a batch, and the offset index
and log end skip it as Kafka's do.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

OFFSETS_OUT_OF_ORDER = "OFFSETS_OUT_OF_ORDER"
CREATE_TIME_TYPE, LOG_APPEND_TIME_TYPE = 0, 1  # Spark's Kafka source `timestampType` (the batch attribute bit)


def kept_offsets(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """An `offset` column as int64 values and its validity mask (a null offset cannot be kept)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    return np.asarray(array.cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False), np.int64), valid


def kept_offset_mask(offsets: np.ndarray, valid: np.ndarray, log_end_offset: int) -> np.ndarray:
    """Which records keep their offset: those above the running maximum of the offsets before them and at
    or after `log_end_offset` (a null offset is not kept and does not move the maximum)."""
    candidate = np.where(valid, offsets, np.iinfo(np.int64).min)
    before = np.concatenate(([log_end_offset - 1], candidate[:-1])) if len(offsets) else candidate
    return valid & (offsets > np.maximum.accumulate(before))


def out_of_order_message(offset: int | None, bound: int, log_end_offset: int) -> str:
    """Why a record's offset cannot be kept: `bound` is the offset it had to exceed."""
    if offset is None:
        return "no offset: an append keeping offsets needs one on every record"
    if bound < log_end_offset:
        return (f"offset {offset} is below the log end offset {log_end_offset} "
                "(Kafka's UnexpectedAppendOffsetException); an append never rewrites the log")
    return (f"offset {offset} does not increase: an earlier record of this append has offset {bound} "
            "(Kafka's OffsetsOutOfOrderException); kept offsets are never renumbered")


def out_of_order_messages(offsets: np.ndarray, valid: np.ndarray, log_end_offset: int,
                          rejected: np.ndarray) -> list[str]:
    """The messages of the `rejected` rows (indices), each naming the offset it had to exceed."""
    candidate = np.where(valid, offsets, np.iinfo(np.int64).min)
    bound = np.maximum.accumulate(np.concatenate(([log_end_offset - 1], candidate)))[:-1] if len(offsets) else candidate
    return [out_of_order_message(int(offsets[r]) if valid[r] else None, int(bound[r]), log_end_offset)
            for r in rejected.tolist()]


def contiguous_runs(offsets: np.ndarray, types: np.ndarray | None, timestamps: np.ndarray) -> np.ndarray:
    """Where the kept records (in order) split into runs a batch may span: at a gap in the offsets, at a
    change of timestamp type and, for LogAppendTime records, at a change of timestamp (a LogAppendTime
    batch has one time for all its records). Returns the start index of each run."""
    if not len(offsets):
        return np.zeros(0, np.int64)
    cut = np.diff(offsets) != 1
    if types is not None:
        cut |= np.diff(types) != 0
        cut |= (types[1:] == LOG_APPEND_TIME_TYPE) & (np.diff(timestamps) != 0)
    return np.concatenate(([0], np.flatnonzero(cut) + 1)).astype(np.int64)
