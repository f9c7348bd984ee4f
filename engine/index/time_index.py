"""The `.timeindex` file: `(timestamp int64, relativeOffset int32)` entries (spec 1.10).

An entry `(T, O)` says: T is the largest timestamp in the segment up to offset `base + O`, first
carried by the batch ending at that offset, so every record with a timestamp > T lies after it.
Within a file T strictly increases and O never decreases.

`min_timestamp` is the smallest timestamp an entry may hold. Kafka's is 0: the time index stores
no negative timestamps, and `-1` (`NO_TIMESTAMP`) means "none" (spec 9). The opt-in KIP-228 mode
passes a lower bound (at least `-2**63 + 1`) so that negative first entries are valid. The
"no entry" sentinel that `lookup` and `last_entry` return is then `min_timestamp - 1`, which is
Kafka's `-1` in the default mode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.index.common import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    IndexLoad,
    frozen_column,
    length_problem,
    prefix_length,
    prefix_problem,
)

ENTRY_SIZE = 12
_ENTRY = np.dtype([("timestamp", ">i8"), ("offset", ">i4")])


@dataclass(frozen=True, eq=False)
class TimeIndex:
    """An immutable time index; `timestamps` are native int64, `relative_offsets` native int32."""

    base_offset: int
    timestamps: np.ndarray
    relative_offsets: np.ndarray
    min_timestamp: int

    def __post_init__(self) -> None:
        ts = frozen_column(self.timestamps, np.int64, "timestamps")
        rel = frozen_column(self.relative_offsets, np.int32, "relative_offsets")
        if ts.shape != rel.shape:
            raise ValueError(f"{ts.shape[0]} timestamps but {rel.shape[0]} relative offsets")
        if not INT64_MIN < self.min_timestamp <= INT64_MAX:
            raise ValueError(f"min_timestamp {self.min_timestamp} must be in (-2**63, 2**63)")
        object.__setattr__(self, "base_offset", int(self.base_offset))
        object.__setattr__(self, "min_timestamp", int(self.min_timestamp))
        object.__setattr__(self, "timestamps", ts)
        object.__setattr__(self, "relative_offsets", rel)

    @classmethod
    def empty(cls, base_offset: int, min_timestamp: int) -> TimeIndex:
        return cls(base_offset, np.zeros(0, np.int64), np.zeros(0, np.int32), min_timestamp)

    @classmethod
    def load(cls, data: bytes, base_offset: int, source: str = "<timeindex>", *,
             min_timestamp: int) -> IndexLoad[TimeIndex]:
        """Parse a `.timeindex` file, keeping its longest valid prefix (spec 1.12 recommendation).

        Valid: timestamps strictly increasing with the first >= `min_timestamp`, relative offsets
        >= 0 and non-decreasing. A zero-padded file keeps only its real entries, so the last entry
        is not the `(0, base)` that made Kafka delete the segment early (KAFKA-10207).
        """
        raw = np.frombuffer(data, dtype=np.uint8)
        entries = raw.shape[0] // ENTRY_SIZE
        cols = raw[:entries * ENTRY_SIZE].view(_ENTRY)
        ts = cols["timestamp"].astype(np.int64)
        rel = cols["offset"].astype(np.int32)
        valid = prefix_length(_entry_ok(ts, rel, min_timestamp))
        problems = length_problem(source, raw.shape[0], ENTRY_SIZE)
        if valid < entries:
            problems += prefix_problem(source, raw, ENTRY_SIZE, valid, entries,
                                       _reason(ts, rel, valid, min_timestamp))
        index = cls(base_offset, ts[:valid], rel[:valid], min_timestamp)
        return IndexLoad(index=index, valid_entries=valid, file_entries=entries, problems=problems)

    def problems(self, source: str = "<timeindex>") -> list[str]:
        """The first entry that breaks the index invariants (for indexes built in memory), if any."""
        valid = prefix_length(_entry_ok(self.timestamps, self.relative_offsets, self.min_timestamp))
        if valid == len(self):
            return []
        return [f"{source}: byte {valid * ENTRY_SIZE}: entry {valid}: "
                f"{_reason(self.timestamps, self.relative_offsets, valid, self.min_timestamp)}"]

    def to_bytes(self) -> bytes:
        """Kafka's on-disk form: big-endian `timestamp int64 | relativeOffset int32` per entry."""
        out = np.empty(len(self), dtype=_ENTRY)
        out["timestamp"] = self.timestamps
        out["offset"] = self.relative_offsets
        return out.tobytes()

    def __len__(self) -> int:
        return int(self.timestamps.shape[0])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TimeIndex):
            return NotImplemented
        return (self.base_offset == other.base_offset and self.min_timestamp == other.min_timestamp
                and np.array_equal(self.timestamps, other.timestamps)
                and np.array_equal(self.relative_offsets, other.relative_offsets))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TimeIndex(base_offset={self.base_offset}, entries={len(self)})"

    @property
    def no_timestamp(self) -> int:
        """The "no entry" timestamp: `-1` (Kafka's NO_TIMESTAMP) unless KIP-228 mode lowers it."""
        return self.min_timestamp - 1

    @property
    def offsets(self) -> np.ndarray:
        """Absolute offsets of the entries (int64)."""
        return self.relative_offsets.astype(np.int64) + self.base_offset

    def entry(self, n: int) -> tuple[int, int]:
        return int(self.timestamps[n]), self.base_offset + int(self.relative_offsets[n])

    def last_entry(self) -> tuple[int, int]:
        """`(timestamp, absolute offset)` of the last entry; `(-1, base_offset)` when empty (spec 1.10).

        This is the segment's largest timestamp as Kafka loads it (spec 7.3).
        """
        if not len(self):
            return self.no_timestamp, self.base_offset
        return self.entry(len(self) - 1)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """The largest entry with timestamp <= target, else `(-1, base_offset)` (Kafka `TimeIndex.lookup`)."""
        slot = self.floor_slot(target_timestamp)
        if slot < 0:
            return self.no_timestamp, self.base_offset
        return self.entry(slot)

    def floor_and_next(self, target_timestamp: int) -> tuple[tuple[int, int] | None, int | None]:
        """The floor entry `(T, O)` of `lookup` (None instead of its sentinel) and the absolute offset of
        the entry after it (None if none): records after O are the only ones that can be >= a target
        above T, and the next entry's batch already reaches past the target."""
        slot = self.floor_slot(target_timestamp)
        following = self.base_offset + int(self.relative_offsets[slot + 1]) if slot + 1 < len(self) else None
        return (self.entry(slot) if slot >= 0 else None), following

    def floor_slot(self, target_timestamp: int) -> int:
        """The slot of the largest entry with timestamp <= target; -1 if none."""
        if target_timestamp < INT64_MIN:
            return -1
        key = np.int64(min(target_timestamp, INT64_MAX))
        return int(np.searchsorted(self.timestamps, key, side="right")) - 1

    def truncate_to(self, offset: int) -> TimeIndex:
        """Drop every entry whose offset >= `offset` (spec 6 step 3); the rest stay valid."""
        rel = offset - self.base_offset
        if rel > INT32_MAX:
            keep = len(self)
        else:
            keep = int(np.searchsorted(self.relative_offsets, np.int32(max(rel, 0)), side="left"))
        return TimeIndex(self.base_offset, self.timestamps[:keep], self.relative_offsets[:keep],
                         self.min_timestamp)


def _entry_ok(ts: np.ndarray, rel: np.ndarray, min_timestamp: int) -> np.ndarray:
    """Per entry: valid by itself and in order after its predecessor (T strictly up, O not down)."""
    ok = rel >= 0
    if ok.shape[0]:
        ok[0] &= bool(ts[0] >= min_timestamp)
    ok[1:] &= (ts[1:] > ts[:-1]) & (rel[1:] >= rel[:-1])
    return ok


def _reason(ts: np.ndarray, rel: np.ndarray, n: int, min_timestamp: int) -> str:
    t, o = int(ts[n]), int(rel[n])
    if o < 0:
        return f"relative offset {o} is negative"
    if n == 0:
        return f"timestamp {t} is below the minimum {min_timestamp}"
    if t <= int(ts[n - 1]):
        return f"timestamp {t} does not increase over the previous entry's {int(ts[n - 1])}"
    return f"relative offset {o} is below the previous entry's {int(rel[n - 1])}"
