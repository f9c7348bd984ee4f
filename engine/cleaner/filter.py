"""What survives a cleaning round, batch by batch and record by record (spec 8.4-8.5).

Kafka's `Cleaner.cleanInto` filter with `MemoryRecords.filterTo`, vectorized over all batches and
records of a round. Batch retention comes first:
- RETAIN_EMPTY: the last batch of an active producer (`cleaner_txn`) and the batch whose next offset
  is the round end (KAFKA-17076) are kept, as a bare header when no record survives;
- aborted data batches lose all their records (DELETE unless RETAIN_EMPTY);
- a control batch can be discarded when it is an ABORT/COMMIT marker whose transaction has no data
  batch left after this round, or it has no records; it then gets a delete horizon like a tombstone
  and loses its record once now >= horizon. Other control types are kept. Kafka decides "no data left"
  from the batches it *read* this round, so a marker needs one more round after its data went; klake
  uses the batches that *survive* this round (the same data-before-marker guarantee, one round
  sooner), which makes a second round with the same clock a no-op.
Record level, for data batches: offset > map.latestOffset -> kept; no key -> removed; otherwise kept
iff offset >= map[key] and (a value, or a tombstone still retained: v2 - no delete horizon yet or
now < horizon; legacy - the source segment's mtime > the legacy delete horizon).
A surviving batch is copied byte-for-byte when nothing was removed and no horizon must be set; a v2
batch that keeps a tombstone (or a discardable marker) without a horizon is rebuilt with
delete horizon = now + delete.retention.ms. A legacy batch that would be kept empty (only the round's
last batch can be) is kept whole: Kafka cannot write an empty legacy batch and fails the round.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.cleaner.txn import CONTROL_NONE

DROP, COPY, REBUILD, EMPTY = 0, 1, 2, 3
KEPT, SUPERSEDED, TOMBSTONE_EXPIRED, KEYLESS, ABORTED, MARKER_DROPPED = 0, 1, 2, 3, 4, 5
REASONS = {KEPT: "kept", SUPERSEDED: "superseded", TOMBSTONE_EXPIRED: "tombstone expired", KEYLESS: "keyless",
           ABORTED: "aborted transaction", MARKER_DROPPED: "marker dropped"}
NO_HORIZON = -1


@dataclass(frozen=True)
class RoundBatches:
    """The round's batches in log order (one entry per batch)."""

    magic: np.ndarray
    control: np.ndarray
    control_type: np.ndarray
    producer_id: np.ndarray
    last_offset: np.ndarray
    has_horizon: np.ndarray
    base_timestamp: np.ndarray
    records_count: np.ndarray
    aborted: np.ndarray
    marker: np.ndarray
    txn: np.ndarray
    last_of_producer: np.ndarray
    retain_legacy_deletes: np.ndarray


@dataclass(frozen=True)
class RoundRecords:
    """The round's records in log order."""

    batch: np.ndarray
    offset: np.ndarray
    has_key: np.ndarray
    has_value: np.ndarray
    map_offset: np.ndarray


@dataclass(frozen=True)
class Plan:
    outcome: np.ndarray       # per batch: DROP / COPY / REBUILD / EMPTY
    delete_horizon: np.ndarray  # per batch: horizon a REBUILD writes, NO_HORIZON for none
    horizon_set: np.ndarray   # per batch: this round sets the horizon
    reason: np.ndarray        # per record: KEPT or why it was removed

    @property
    def kept(self) -> np.ndarray:
        return self.reason == KEPT


def plan_round(b: RoundBatches, r: RoundRecords, latest_offset: int, round_end: int, now_ms: int,
               delete_retention_ms: int) -> Plan:
    """Decide every batch and record of a round (see the module docstring)."""
    n = b.magic.shape[0]
    retain_empty = ((b.producer_id >= 0) & b.last_of_producer) | (b.last_offset + 1 == round_end)
    v2 = b.magic == 2
    horizon_passed = b.has_horizon & (b.base_timestamp <= now_ms)
    retain_deletes = np.where(v2, ~b.has_horizon | ~horizon_passed, b.retain_legacy_deletes)
    rb = r.batch
    reason = np.select(
        [b.aborted[rb], r.offset > latest_offset, ~r.has_key, r.offset < r.map_offset,
         ~r.has_value & ~retain_deletes[rb]],
        [ABORTED, KEPT, KEYLESS, SUPERSEDED, TOMBSTONE_EXPIRED], KEPT).astype(np.int8)
    reason[b.control[rb]] = KEPT
    data = ~b.control
    outcome, need_horizon = _outcomes(b, r, reason, retain_empty, b.aborted, np.zeros(n, bool))
    survivors = np.unique(b.txn[data & (b.txn >= 0) & (outcome != DROP)])
    discardable = b.control & ((b.control_type == CONTROL_NONE)
                               | (b.marker & ((b.txn < 0) | ~np.isin(b.txn, survivors))))
    drop_marker = discardable & horizon_passed
    reason[drop_marker[rb] & b.control[rb]] = MARKER_DROPPED
    control_outcome, control_horizon = _outcomes(b, r, reason, retain_empty, drop_marker, discardable)
    outcome = np.where(b.control, control_outcome, outcome)
    need_horizon = np.where(b.control, control_horizon, need_horizon)
    horizon = np.where(need_horizon, now_ms + delete_retention_ms,
                       np.where(b.has_horizon, b.base_timestamp, NO_HORIZON))
    return Plan(outcome.astype(np.int8), horizon.astype(np.int64), need_horizon & (outcome == REBUILD), reason)


def _outcomes(b: RoundBatches, r: RoundRecords, reason: np.ndarray, retain_empty: np.ndarray,
              discard: np.ndarray, empty_txn_marker: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`filterTo`'s batch outcome given the record decisions; legacy batches kept whole instead of empty."""
    n = b.magic.shape[0]
    kept = reason == KEPT
    total = np.bincount(r.batch, minlength=n)
    n_kept = np.bincount(r.batch[kept], minlength=n)
    tombstones = np.bincount(r.batch[kept & ~r.has_value], minlength=n) > 0
    need_horizon = (b.magic == 2) & (tombstones | empty_txn_marker) & ~b.has_horizon & (n_kept > 0)
    legacy_whole = (b.magic < 2) & retain_empty & (n_kept == 0) & (total > 0)
    if legacy_whole.any():
        reason[legacy_whole[r.batch]] = KEPT
        n_kept = np.where(legacy_whole, total, n_kept)
    outcome = np.select(
        [discard & ~retain_empty, n_kept > 0, retain_empty],
        [DROP, np.where((n_kept == total) & ~need_horizon, COPY, REBUILD), EMPTY], DROP)
    return outcome, need_horizon
