"""Transactions and producers as the cleaner, read_committed reads and the `.txnindex` see them (spec 1.6,
8.2, 8.4). One walk (`_walk`) serves all three: the cleaner's per-batch state (`transaction_state`), and
Kafka's `AbortedTxn` entries and last stable offset (`completed_transactions`), which a read_committed
reader applies as Kafka's consumer does (`AbortedTxns.covers`) and export writes as `.txnindex` files.

Kafka learns aborted transactions from the `.txnindex` files and active producers from the producer
state manager. klake derives both from the batches of the whole partition (every segment, including
the ones the round does not clean), as Kafka's log loading would:
- a producer's transaction opens at its first transactional data batch after its previous marker and
  is closed by its next ABORT or COMMIT control record (key = version int16, type int16);
- the data batches of a transaction closed by ABORT are aborted (never mapped, removed whole);
- "the last batch of an active producer" is Kafka's `isBatchLastRecordOfProducer`: the producer's last
  data batch, or, for a producer without data batches, its control batches of its current epoch.
  Producers expire as in `ProducerStateManager` (no open transaction and now - timestamp of their last
  batch >= producer.id.expiration.ms) only when an expiration is given; by default every producer id
  in the log is active, which keeps more empty batches than a broker whose producers expired.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from engine.format.batch import BatchHeaders
from engine.format.builder import CONTROL_ABORT, CONTROL_COMMIT
from engine.format.records import decode_records

CONTROL_NONE = -2  # not a control batch, or a control batch without records (already cleaned)
CONTROL_UNKNOWN = -1
KNOWN_CONTROL_TYPES = range(0, 7)  # ABORT, COMMIT, LEADER_CHANGE, SNAPSHOT_*, KRAFT_VERSION, KRAFT_VOTERS
_KEY = struct.Struct(">hh")


def control_types(data: bytes, headers: BatchHeaders, source: str = "<segment>") -> np.ndarray:
    """The control record type of each batch (`ControlRecordType.parse` of its first record's key);
    CONTROL_NONE for data batches and for control batches without records."""
    out = np.full(len(headers), CONTROL_NONE, np.int16)
    rows = np.flatnonzero(headers.is_control & (headers.records_count > 0))
    if rows.size == 0:
        return out
    records = decode_records(data, headers.take(rows), source)
    _, first = np.unique(records.batch_index, return_index=True)
    for row, key in zip(rows.tolist(), records.key.take(first).to_pylist(), strict=True):
        kind = _KEY.unpack_from(key)[1] if key is not None and len(key) >= _KEY.size else CONTROL_UNKNOWN
        out[row] = kind if kind in KNOWN_CONTROL_TYPES else CONTROL_UNKNOWN
    return out


@dataclass(frozen=True)
class TxnState:
    """Per batch of the partition: `txn` = the transaction a transactional data batch belongs to, or the
    one an ABORT/COMMIT marker closes (-1: none, i.e. a marker of an empty transaction)."""

    txn: np.ndarray
    aborted: np.ndarray
    marker: np.ndarray
    last_of_producer: np.ndarray


def _last_rows(keys: np.ndarray, rows: np.ndarray) -> dict[int, int]:
    """key -> the last of `rows` (in order) holding it."""
    if rows.size == 0:
        return {}
    unique, first_in_reversed = np.unique(keys[rows][::-1], return_index=True)
    return dict(zip(unique.tolist(), rows[::-1][first_in_reversed].tolist(), strict=True))


def transaction_state(headers: BatchHeaders, control_type: np.ndarray, now_ms: int,
                      producer_expiration_ms: int | None = None) -> TxnState:
    """Transactions and active producers over all batches of a partition, in log order."""
    walk = _walk(headers, control_type)
    aborted = ~headers.is_control & (walk.txn >= 0) & np.isin(walk.txn, walk.aborted_txns)
    return TxnState(walk.txn, aborted, walk.marker,
                    _last_of_producer(headers, now_ms, producer_expiration_ms, walk.open_txn))


@dataclass(frozen=True)
class _Walk:
    txn: np.ndarray
    marker: np.ndarray
    aborted_txns: list[int]
    abort_markers: list[int]
    stable_rows: list[int]
    open_txn: dict[int, int]


def _walk(headers: BatchHeaders, control_type: np.ndarray) -> _Walk:
    """The module docstring's transactions, batch by batch in log order (`ProducerStateManager`'s walk): per
    ABORT marker of a non-empty transaction, the transaction's first row, the marker's row and the first row
    of the earliest transaction of another producer still open at the marker (-1: none), as
    `ProducerStateManager.lastStableOffset(completedTxn)` finds it; the transactions open at the end."""
    pid = headers.producer_id
    control = headers.is_control
    txn = np.full(len(headers), -1, np.int64)
    marker = control & ((control_type == CONTROL_ABORT) | (control_type == CONTROL_COMMIT))
    open_txn: dict[int, int] = {}
    aborted_txns: list[int] = []
    abort_markers: list[int] = []
    stable_rows: list[int] = []
    rows = np.flatnonzero((pid >= 0) & (headers.is_transactional | marker))
    for row, producer, is_marker, kind in zip(rows.tolist(), pid[rows].tolist(), marker[rows].tolist(),
                                              control_type[rows].tolist(), strict=True):
        if is_marker:
            closed = open_txn.pop(producer, -1)
            txn[row] = closed
            if closed >= 0 and kind == CONTROL_ABORT:
                aborted_txns.append(closed)
                abort_markers.append(row)
                stable_rows.append(min(open_txn.values(), default=-1))
        elif not control[row]:
            txn[row] = open_txn.setdefault(producer, row)  # a transaction is named by its first batch
    return _Walk(txn, marker, aborted_txns, abort_markers, stable_rows, open_txn)


@dataclass(frozen=True)
class AbortedTxns:
    """Kafka's `AbortedTxn` entries (the `.txnindex`'s, a fetch response's `abortedTransactions`), in marker
    order: the producer, the transaction's first offset, its ABORT marker's offset (`lastOffset`) and the
    partition's last stable offset once it completed (`ProducerStateManager.lastStableOffset`)."""

    producer_id: np.ndarray
    first_offset: np.ndarray
    last_offset: np.ndarray
    last_stable_offset: np.ndarray

    def __len__(self) -> int:
        return int(self.producer_id.shape[0])

    def take(self, rows: np.ndarray) -> AbortedTxns:
        return AbortedTxns(self.producer_id[rows], self.first_offset[rows], self.last_offset[rows],
                           self.last_stable_offset[rows])

    def overlapping(self, from_offset: int, to_offset: int) -> AbortedTxns:
        """The transactions with an offset in [from_offset, to_offset) (`TransactionIndex.collectAbortedTxns`)."""
        return self.take(np.flatnonzero((self.last_offset >= from_offset) & (self.first_offset < to_offset)))

    def covers(self, headers: BatchHeaders) -> np.ndarray:
        """Which batches a read_committed consumer drops as aborted (`CompletedFetch.nextFetchedRecord`):
        transactional data batches of a producer inside one of its aborted transactions, first offset to
        marker. A producer's transactions never overlap, so the one that can hold a batch is the last one
        of that producer starting at or before it."""
        out = np.zeros(len(headers), bool)
        data = headers.is_transactional & ~headers.is_control
        for producer in np.unique(self.producer_id).tolist():
            mine = np.flatnonzero(data & (headers.producer_id == producer))
            if not mine.size:
                continue
            own = self.producer_id == producer
            firsts, lasts = self.first_offset[own], self.last_offset[own]
            order = np.argsort(firsts, kind="stable")
            firsts, lasts = firsts[order], lasts[order]
            base = headers.base_offset[mine]
            j = np.searchsorted(firsts, base, side="right") - 1
            out[mine] = (j >= 0) & (base <= lasts[np.maximum(j, 0)])
        return out


@dataclass(frozen=True)
class Transactions:
    """What a read_committed reader needs of a partition: its aborted transactions and its first unstable
    offset (the first offset of the earliest transaction without a marker: the last stable offset, past
    which a read_committed fetch returns nothing; None: every transaction is complete)."""

    aborted: AbortedTxns
    first_unstable_offset: int | None
    stable_prefix_end: int | None
    """The greatest offset <= the first unstable offset that no transaction straddles (none starts
    before it and ends at or after it): the log cut there holds no open transaction. None: no open one."""


def completed_transactions(headers: BatchHeaders, control_type: np.ndarray) -> Transactions:
    """The aborted transactions and the first unstable offset of a run of batches in log order (a whole
    partition, or what a broker recovering it from its first batch sees)."""
    walk = _walk(headers, control_type)
    base = headers.base_offset
    stable = np.array(walk.stable_rows, np.int64)
    markers = np.array(walk.abort_markers, np.int64)
    last = base[markers]
    aborted = AbortedTxns(headers.producer_id[markers], base[np.array(walk.aborted_txns, np.int64)], last,
                          np.where(stable >= 0, base[np.maximum(stable, 0)], last + 1))
    first_open = min(walk.open_txn.values(), default=None)
    if first_open is None:
        return Transactions(aborted, None, None)
    closing = np.flatnonzero(walk.marker & (walk.txn >= 0))
    starts = np.concatenate([base[walk.txn[closing]], base[list(walk.open_txn.values())]])
    ends = np.concatenate([base[closing], np.full(len(walk.open_txn), np.iinfo(np.int64).max)])
    cut = int(base[first_open])
    while (straddling := (starts < cut) & (ends >= cut)).any():
        cut = int(starts[straddling].min())
    return Transactions(aborted, int(base[first_open]), cut)


def _last_of_producer(headers: BatchHeaders, now_ms: int, expiration_ms: int | None,
                      open_txn: dict[int, int]) -> np.ndarray:
    pid = headers.producer_id
    control = headers.is_control
    last_any = _last_rows(pid, np.flatnonzero(pid >= 0))
    last_data = _last_rows(pid, np.flatnonzero((pid >= 0) & ~control))
    out = np.zeros(len(headers), bool)
    for producer, last in last_any.items():
        if (expiration_ms is not None and producer not in open_txn
                and now_ms - int(headers.max_timestamp[last]) >= expiration_ms):
            continue  # expired: its state is gone, so none of its batches must be kept
        if producer in last_data:
            out[last_data[producer]] = True
        else:  # only control batches left: keep those of the current epoch (fencing)
            out |= control & (pid == producer) & (headers.producer_epoch == headers.producer_epoch[last])
    return out
