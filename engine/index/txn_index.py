"""The `.txnindex` file: Kafka's `TransactionIndex` of a segment, the aborted transactions whose ABORT
marker it holds (`LogSegment.updateTxnIndex`), in marker order.

Each entry is `AbortedTxn`: version int16 (0), producerId int64, firstOffset int64, lastOffset int64 (the
marker's offset), lastStableOffset int64, big-endian, 34 bytes, no header. A segment without aborted
transactions has no file (`TransactionIndex` creates it on the first append).

klake's store holds none: the batches are the one home of the rule, and export writes the files from
them (`engine.ops.export.transaction_indexes`), so no job that rewrites segments (append, compact,
truncate, mirror, retention) can leave one stale.
"""

from __future__ import annotations

import numpy as np

VERSION = 0
_ENTRY = np.dtype([("version", ">i2"), ("producer_id", ">i8"), ("first_offset", ">i8"), ("last_offset", ">i8"),
                   ("last_stable_offset", ">i8")])


def txn_index_bytes(producer_id: np.ndarray, first_offset: np.ndarray, last_offset: np.ndarray,
                    last_stable_offset: np.ndarray) -> bytes:
    """The file's bytes for these entries (in marker order)."""
    out = np.zeros(producer_id.shape[0], _ENTRY)
    out["version"] = VERSION
    out["producer_id"], out["first_offset"] = producer_id, first_offset
    out["last_offset"], out["last_stable_offset"] = last_offset, last_stable_offset
    return out.tobytes()

