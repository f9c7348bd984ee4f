"""Plan one catalog commit against the rows it touches, enforcing the catalog's rules.

A `CatalogChange` adds rows, removes rows and moves rows between states, all in one Delta commit.
`plan_change` checks it against a fresh read of the affected partitions and returns only what is left
to do, so that re-running a change that already committed (a retried job) is a no-op. Rules:

- states only move forward: ACTIVE -> ROLLED -> DELETE_STARTED, or ACTIVE -> DELETE_STARTED when a job
  retires the active segment in the same commit that adds its successor (two-phase delete);
- a removed row must be in one of the change's `remove_states`;
- an added row whose segment id is already registered must describe the same object (same log key,
  size and offsets), otherwise the change conflicts;
- after the change, the live segments of a partition never overlap in offsets
  (spec 1.1: a segment's base offset is > every offset in earlier segments).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from engine.catalog.schema import (
    ALLOWED_TRANSITIONS,
    LIVE_STATES,
    SIDECAR_SIZE_COLUMNS,
    Layout,
    SegmentRef,
    SegmentRow,
    SegmentState,
)
from engine.errors import KlakeError
from engine.names import validate_partition, validate_segment_id, validate_topic

_IDENTITY_FIELDS = ("log_key", "size_bytes", "base_offset", "next_offset")


class CatalogStateError(KlakeError):
    """A change contradicts the catalog as it is now (a rule above would be broken)."""


@dataclass(frozen=True)
class CatalogChange:
    """Rows to add, rows to remove and state transitions, committed together."""

    add: tuple[SegmentRow, ...] = ()
    remove: tuple[SegmentRef, ...] = ()
    transitions: tuple[tuple[SegmentRef, SegmentState], ...] = ()
    remove_states: frozenset[SegmentState] = frozenset(LIVE_STATES)

    def partitions(self) -> set[tuple[str, int]]:
        refs = [r.ref for r in self.add] + list(self.remove) + [ref for ref, _ in self.transitions]
        return {(ref.topic, ref.partition) for ref in refs}


@dataclass
class PlannedChange:
    """What remains to be committed, and what was found already done."""

    add: list[SegmentRow] = field(default_factory=list)
    remove: list[SegmentRef] = field(default_factory=list)
    transitions: list[tuple[SegmentRef, SegmentState]] = field(default_factory=list)
    already_added: int = 0
    already_removed: int = 0
    already_transitioned: int = 0

    @property
    def is_empty(self) -> bool:
        return not (self.add or self.remove or self.transitions)


def validate_row(row: SegmentRow) -> None:
    """Reject rows that could never be valid: bad names, a non-live state, impossible offsets."""
    validate_topic(row.topic)
    validate_partition(row.partition)
    validate_segment_id(row.segment_id)
    if row.state not in LIVE_STATES:
        raise CatalogStateError(f"{_name(row.ref)}: a new row must be ACTIVE or ROLLED, not {row.state}")
    if row.layout not in tuple(Layout):
        raise CatalogStateError(f"{_name(row.ref)}: unknown layout {row.layout!r}")
    if not 0 <= row.base_offset <= row.next_offset:
        raise CatalogStateError(f"{_name(row.ref)}: offsets base {row.base_offset} next {row.next_offset} "
                                "are not 0 <= base <= next")
    if row.record_count > 0 and not row.base_offset <= row.last_offset < row.next_offset:
        raise CatalogStateError(f"{_name(row.ref)}: last offset {row.last_offset} is outside "
                                f"[{row.base_offset}, {row.next_offset})")
    if row.size_bytes < 0:
        raise CatalogStateError(f"{_name(row.ref)}: negative size {row.size_bytes}")
    for column in SIDECAR_SIZE_COLUMNS:
        if (size := getattr(row, column)) is not None and size < 0:
            raise CatalogStateError(f"{_name(row.ref)}: negative {column} {size}")


def plan_change(change: CatalogChange, current: Mapping[SegmentRef, SegmentRow]) -> PlannedChange:
    """Check `change` against `current` (every row of the affected partitions) and plan what is left."""
    planned = PlannedChange()
    for row in change.add:
        validate_row(row)
        existing = current.get(row.ref)
        if existing is None:
            planned.add.append(row)
        elif all(getattr(existing, f) == getattr(row, f) for f in _IDENTITY_FIELDS):
            planned.already_added += 1
        else:
            raise CatalogStateError(f"{_name(row.ref)} is already registered for another object "
                                    f"({existing.log_key}, {existing.size_bytes} bytes)")
    change_already_applied = not planned.add
    for ref in change.remove:
        existing = current.get(ref)
        if existing is None:
            if not change_already_applied:
                raise CatalogStateError(f"{_name(ref)} is no longer in the catalog; re-plan from a fresh read")
            planned.already_removed += 1
        elif existing.state not in change.remove_states:
            allowed = "/".join(sorted(change.remove_states))
            raise CatalogStateError(f"{_name(ref)} is {existing.state}; only {allowed} rows may be removed here")
        else:
            planned.remove.append(ref)
    for ref, target in change.transitions:
        existing = current.get(ref)
        if existing is None:
            raise CatalogStateError(f"{_name(ref)} is not in the catalog")
        source = SegmentState(existing.state)
        if source == target:
            planned.already_transitioned += 1
        elif target in ALLOWED_TRANSITIONS[source]:
            planned.transitions.append((ref, target))
        else:
            raise CatalogStateError(f"{_name(ref)} cannot move from {source} to {target}")
    _check_no_overlap(_rows_after(planned, current), {row.ref for row in planned.add})
    return planned


def _rows_after(planned: PlannedChange, current: Mapping[SegmentRef, SegmentRow]) -> list[SegmentRow]:
    removed = set(planned.remove)
    moved = dict(planned.transitions)
    after = [row.with_state(moved[ref]) if ref in moved else row
             for ref, row in current.items() if ref not in removed]
    return after + planned.add


def _check_no_overlap(rows: Iterable[SegmentRow], new: set[SegmentRef]) -> None:
    by_partition: dict[tuple[str, int], list[SegmentRow]] = {}
    for row in rows:
        if row.state in LIVE_STATES and row.next_offset > row.base_offset:
            by_partition.setdefault((row.topic, row.partition), []).append(row)
    for segments in by_partition.values():
        segments.sort(key=lambda r: r.base_offset)
        for before, after in zip(segments, segments[1:], strict=False):
            if after.base_offset < before.next_offset:
                first, second = (after, before) if after.ref in new else (before, after)
                raise CatalogStateError(
                    f"{_name(first.ref)} (offsets {_span(first)}) would overlap live {_name(second.ref)} "
                    f"(offsets {_span(second)})")


def _span(row: SegmentRow) -> str:
    return f"{row.base_offset}-{row.next_offset - 1}"


def _name(ref: SegmentRef) -> str:
    return f"segment {ref.topic}-{ref.partition}/{ref.segment_id}"
