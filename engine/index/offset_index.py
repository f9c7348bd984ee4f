"""The `.index` file: sparse `(relativeOffset int32, position int32)` entries (spec 1.9).

An entry `(K, P)` says: the bytes appended at position `P` end with offset `base + K`. Entries are
sorted, both columns strictly increase, and `P > 0` because Kafka never indexes a segment's first
append (spec 2.5). Lookups return the floor entry; callers scan batches forward from its position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.index.common import (
    INT32_MAX,
    IndexLoad,
    frozen_column,
    length_problem,
    prefix_length,
    prefix_problem,
)

ENTRY_SIZE = 8
_ENTRY = np.dtype(">i4")


@dataclass(frozen=True, eq=False)
class OffsetIndex:
    """An immutable offset index; columns are read-only native int32 arrays."""

    base_offset: int
    relative_offsets: np.ndarray
    positions: np.ndarray

    def __post_init__(self) -> None:
        rel = frozen_column(self.relative_offsets, np.int32, "relative_offsets")
        pos = frozen_column(self.positions, np.int32, "positions")
        if rel.shape != pos.shape:
            raise ValueError(f"{rel.shape[0]} relative offsets but {pos.shape[0]} positions")
        object.__setattr__(self, "base_offset", int(self.base_offset))
        object.__setattr__(self, "relative_offsets", rel)
        object.__setattr__(self, "positions", pos)

    @classmethod
    def empty(cls, base_offset: int) -> OffsetIndex:
        return cls(base_offset, np.zeros(0, np.int32), np.zeros(0, np.int32))

    @classmethod
    def load(cls, data: bytes, base_offset: int, source: str = "<index>") -> IndexLoad[OffsetIndex]:
        """Parse a `.index` file, keeping its longest valid prefix (spec 1.12 recommendation).

        Valid: relative offset >= 0, position > 0, both strictly increasing. Unlike Kafka, a
        zero-padded (untrimmed) file does not read as valid entries (KAFKA-10207).
        """
        raw = np.frombuffer(data, dtype=np.uint8)
        entries = raw.shape[0] // ENTRY_SIZE
        cols = raw[:entries * ENTRY_SIZE].view(_ENTRY).reshape(entries, 2)
        rel = cols[:, 0].astype(np.int32)
        pos = cols[:, 1].astype(np.int32)
        valid = prefix_length(_entry_ok(rel, pos))
        problems = length_problem(source, raw.shape[0], ENTRY_SIZE)
        if valid < entries:
            problems += prefix_problem(source, raw, ENTRY_SIZE, valid, entries, _reason(rel, pos, valid))
        index = cls(base_offset, rel[:valid], pos[:valid])
        return IndexLoad(index=index, valid_entries=valid, file_entries=entries, problems=problems)

    def problems(self, source: str = "<index>") -> list[str]:
        """The first entry that breaks the index invariants (for indexes built in memory), if any."""
        valid = prefix_length(_entry_ok(self.relative_offsets, self.positions))
        if valid == len(self):
            return []
        return [f"{source}: byte {valid * ENTRY_SIZE}: entry {valid}: "
                f"{_reason(self.relative_offsets, self.positions, valid)}"]

    def to_bytes(self) -> bytes:
        """Kafka's on-disk form: big-endian `relativeOffset int32 | position int32` per entry."""
        out = np.empty((len(self), 2), dtype=_ENTRY)
        out[:, 0] = self.relative_offsets
        out[:, 1] = self.positions
        return out.tobytes()

    def __len__(self) -> int:
        return int(self.relative_offsets.shape[0])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OffsetIndex):
            return NotImplemented
        return (self.base_offset == other.base_offset
                and np.array_equal(self.relative_offsets, other.relative_offsets)
                and np.array_equal(self.positions, other.positions))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OffsetIndex(base_offset={self.base_offset}, entries={len(self)})"

    @property
    def offsets(self) -> np.ndarray:
        """Absolute offsets of the entries (int64)."""
        return self.relative_offsets.astype(np.int64) + self.base_offset

    def last_entry(self) -> tuple[int, int]:
        """`(absolute offset, position)` of the last entry; `(base_offset, 0)` when empty (spec 1.9)."""
        if not len(self):
            return self.base_offset, 0
        return self.base_offset + int(self.relative_offsets[-1]), int(self.positions[-1])

    def entry(self, n: int) -> tuple[int, int]:
        return self.base_offset + int(self.relative_offsets[n]), int(self.positions[n])

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """The largest entry with offset <= target, else `(base_offset, 0)` (Kafka `OffsetIndex.lookup`)."""
        slot = self._floor_slot(target_offset)
        if slot < 0:
            return self.base_offset, 0
        return self.entry(slot)

    def truncate_to(self, offset: int) -> OffsetIndex:
        """Drop every entry with offset >= `offset` (spec 6, `LogSegment.truncateTo` step 2)."""
        rel = offset - self.base_offset
        if rel > INT32_MAX:
            keep = len(self)
        else:
            keep = int(np.searchsorted(self.relative_offsets, np.int32(max(rel, 0)), side="left"))
        return OffsetIndex(self.base_offset, self.relative_offsets[:keep], self.positions[:keep])

    def _floor_slot(self, target_offset: int) -> int:
        rel = target_offset - self.base_offset
        if rel < 0:
            return -1
        key = np.int32(min(rel, INT32_MAX))
        return int(np.searchsorted(self.relative_offsets, key, side="right")) - 1


def _entry_ok(rel: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Per entry: valid by itself and strictly above its predecessor in both columns."""
    ok = (rel >= 0) & (pos > 0)
    ok[1:] &= (rel[1:] > rel[:-1]) & (pos[1:] > pos[:-1])
    return ok


def _reason(rel: np.ndarray, pos: np.ndarray, n: int) -> str:
    k, p = int(rel[n]), int(pos[n])
    if k < 0:
        return f"relative offset {k} is negative"
    if p <= 0:
        return f"position {p} is not > 0 (Kafka never indexes a segment's first append)"
    if k <= int(rel[n - 1]):
        return f"relative offset {k} does not increase over the previous entry's {int(rel[n - 1])}"
    return f"position {p} does not increase over the previous entry's {int(pos[n - 1])}"
