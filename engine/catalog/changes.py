"""Plan one catalog commit against the rows it touches, enforcing the catalog's rules.

A `CatalogChange` adds rows, removes rows and moves rows between states, all in one Delta commit.
`plan_change` checks it against a fresh read of the affected partitions and returns only what is left
to do, so that re-running a change that already committed (a retried job) is a no-op. Rules:

- states only move forward: ACTIVE -> ROLLED -> DELETE_STARTED, or ACTIVE -> DELETE_STARTED when a job
  retires the active segment in the same commit that adds its successor (two-phase delete);
- a removed row must be in one of the change's `remove_states`;
- an added row whose segment id is already registered must describe the same object (same log key,
  size and offsets), otherwise the change conflicts;
- an added row's transaction columns, when known, name a span inside its log (`txn_batch_count` 0 with no
  span, or > 0 with 0 <= start < end <= size): read_committed planning reads only that span (engine.ops.read);
- after the change, the live segments of a partition never overlap in offsets
  (spec 1.1: a segment's base offset is > every offset in earlier segments).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.schema import (
    ALLOWED_TRANSITIONS,
    CHECKED_COLUMNS,
    IDENTITY_COLUMNS,
    LIVE_STATES,
    SIDECAR_SIZE_COLUMNS,
    CatalogRows,
    CheckedRow,
    Layout,
    SegmentRef,
    SegmentRow,
    SegmentState,
    rows_to_table,
)
from kernel.errors import KlakeError
from kernel.names import validate_partition, validate_segment_id, validate_topic


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
    after: CatalogRows | None = None
    """The rows checked (every row of the change's partitions) as they are once the change is committed."""

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
    count, start, end = row.txn_batch_count, row.txn_start_position, row.txn_end_position
    if count is not None and (count < 0 or (count > 0) != (start is not None and end is not None)
                              or (count > 0 and not 0 <= start < end <= row.size_bytes)):
        raise CatalogStateError(f"{_name(row.ref)}: transaction columns {count} batches at bytes [{start}, {end}) "
                                f"do not describe a span of its {row.size_bytes} bytes")


def plan_change(change: CatalogChange, current: Mapping[SegmentRef, SegmentRow] | CatalogRows) -> PlannedChange:
    """Check `change` against `current` (every row of the affected partitions) and plan what is left.

    The rows the change leaves alone are checked as columns (`CatalogRows`, only `CHECKED_COLUMNS`): a
    commit that retires many segments of large partitions builds no object per row of them."""
    rows = current if isinstance(current, CatalogRows) else CatalogRows.of(current.values())
    planned = PlannedChange()
    for row, i in zip(change.add, rows.positions([row.ref for row in change.add]), strict=True):
        validate_row(row)
        existing = None if i < 0 else rows.row(i)
        if existing is None:
            planned.add.append(row)
        elif all(getattr(existing, f) == getattr(row, f) for f in IDENTITY_COLUMNS):
            planned.already_added += 1
        else:
            raise CatalogStateError(f"{_name(row.ref)} is already registered for another object "
                                    f"({existing.log_key}, {existing.size_bytes} bytes)")
    state = _state_codes(rows.table["state"])
    change_already_applied = not planned.add
    at = rows.positions(change.remove)
    absent = at < 0
    removable = np.isin(state[at], [_STATES.index(SegmentState(s)) for s in change.remove_states]) | absent
    if (bad := np.flatnonzero((absent & (not change_already_applied)) | ~removable)).size:
        ref = change.remove[bad[0]]
        if absent[bad[0]]:
            raise CatalogStateError(f"{_name(ref)} is no longer in the catalog; re-plan from a fresh read")
        allowed = "/".join(sorted(change.remove_states))
        raise CatalogStateError(f"{_name(ref)} is {_STATES[state[at[bad[0]]]]}; only {allowed} rows may be "
                                "removed here")
    planned.remove = [ref for ref, i in zip(change.remove, at, strict=True) if i >= 0]
    planned.already_removed = int(absent.sum())
    at = rows.positions([ref for ref, _ in change.transitions])
    source = state[at]
    target = np.array([_STATES.index(t) for _, t in change.transitions], np.int64)
    same = (source == target) & (at >= 0)
    moves = _ALLOWED[source, target] & (at >= 0)
    if (bad := np.flatnonzero(~(same | moves))).size:
        ref, goal = change.transitions[bad[0]]
        if at[bad[0]] < 0:
            raise CatalogStateError(f"{_name(ref)} is not in the catalog")
        raise CatalogStateError(f"{_name(ref)} cannot move from {_STATES[source[bad[0]]]} to {goal}")
    planned.transitions = [move for move, ok in zip(change.transitions, moves, strict=True) if ok]
    planned.already_transitioned = int(same.sum())
    state = state.copy()
    state[rows.positions(planned.remove)] = -1  # removed; every planned ref is in `rows`
    state[at[moves]] = target[moves]
    _check_no_overlap(rows, state, planned.add)
    planned.after = _rows_after(rows, state, planned.add)
    return planned


_STATES = list(SegmentState)
_LIVE = np.array([s in LIVE_STATES for s in _STATES] + [False])  # index -1: removed
_ALLOWED = np.array([[t in ALLOWED_TRANSITIONS[s] for t in _STATES] for s in [*_STATES, _STATES[0]]])  # row -1:
# an absent row, refused above


def _state_codes(states: pa.ChunkedArray) -> np.ndarray:
    """Each row's state as its index in `_STATES`, plus a last slot (-1) for a reference with no row."""
    encoded = pc.dictionary_encode(states.combine_chunks() if states.num_chunks else pa.array([], pa.string()))
    codes = np.array([_STATES.index(SegmentState(s)) for s in encoded.dictionary.to_pylist()], np.int64)
    return np.r_[codes[encoded.indices.to_numpy(zero_copy_only=False)], len(_STATES)].astype(np.int64)


def _rows_after(rows: CatalogRows, state: np.ndarray, added: list[SegmentRow]) -> CatalogRows:
    """`rows` with the change applied (`state`: each row's state after it, -1 if removed), then the added rows."""
    kept = state[:rows.table.num_rows] >= 0
    codes = pa.array(state[:rows.table.num_rows][kept].astype(np.int32))
    moved = pa.DictionaryArray.from_arrays(codes, pa.array([str(s) for s in _STATES], pa.string())).cast(pa.string())
    table = rows.table.filter(pa.array(kept))
    at = table.schema.get_field_index("state")
    table = table.set_column(at, table.schema.field(at), moved)
    return CatalogRows(pa.concat_tables([table, rows_to_table(added).select(list(CHECKED_COLUMNS))]))


def _check_no_overlap(rows: CatalogRows, state: np.ndarray, added: list[SegmentRow]) -> None:
    """After the change (`state`: each row's state after it, -1 if removed; `added`: the new rows), a
    partition's live segments never overlap in offsets (spec 1.1); the first overlap in partition order
    (as the rows come), then base-offset order, is the one reported."""
    table = rows.table
    topics = pc.dictionary_encode(pa.chunked_array([table["topic"].combine_chunks(),
                                                    pa.array([r.topic for r in added], pa.string())]).combine_chunks())
    topic = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    partition = np.r_[table["partition"].to_numpy(), [r.partition for r in added]].astype(np.int64)
    base = np.r_[table["base_offset"].to_numpy(), [r.base_offset for r in added]].astype(np.int64)
    nxt = np.r_[table["next_offset"].to_numpy(), [r.next_offset for r in added]].astype(np.int64)
    live = np.r_[_LIVE[state[:table.num_rows]], [r.state in LIVE_STATES for r in added]].astype(bool) & (nxt > base)
    where = np.flatnonzero(live)
    key = topic[where] << 32 | partition[where]
    first_seen = np.unique(key, return_index=True, return_inverse=True)
    order = np.lexsort((where, base[where], first_seen[1][first_seen[2]]))
    where, key = where[order], key[order]
    overlap = np.flatnonzero((key[1:] == key[:-1]) & (base[where[1:]] < nxt[where[:-1]]))
    if not overlap.size:
        return
    before, after = (int(where[overlap[0]]), int(where[overlap[0] + 1]))
    pick = [rows.row(i) if i < table.num_rows else added[i - table.num_rows] for i in (before, after)]
    first, second = (pick[1], pick[0]) if after >= table.num_rows else (pick[0], pick[1])
    raise CatalogStateError(f"{_name(first.ref)} (offsets {_span(first)}) would overlap live {_name(second.ref)} "
                            f"(offsets {_span(second)})")


def _span(row: SegmentRow | CheckedRow) -> str:
    return f"{row.base_offset}-{row.next_offset - 1}"


def _name(ref: SegmentRef) -> str:
    return f"segment {ref.topic}-{ref.partition}/{ref.segment_id}"
