"""Check a segment's `.index` / `.timeindex` against its log, and rebuild them when they fail.

Kafka trusts whatever index files it finds (KAFKA-7283, KAFKA-10207); klake loads each with its
longest valid prefix, reports a missing file or garbage, and checks every entry against the log's
batches. An active segment legitimately lacks the final time-index entry until it rolls (spec 2.6).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.format.batch import BatchHeaders
from engine.index.common import DEFAULT_INDEX_INTERVAL_BYTES, INT64_MIN
from engine.index.offset_index import ENTRY_SIZE as OFFSET_ENTRY_SIZE
from engine.index.offset_index import OffsetIndex
from engine.index.rebuild import build_indexes
from engine.index.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE
from engine.index.time_index import TimeIndex


def sidecar_names(source: str) -> tuple[str, str]:
    """`.index` and `.timeindex` names for a segment named by its `.log` path (or stem)."""
    stem = source[:-4] if source.endswith(".log") else source
    return f"{stem}.index", f"{stem}.timeindex"


def check_indexes(headers: BatchHeaders, offset_index: OffsetIndex, time_index: TimeIndex, source: str,
                  active: bool = False) -> list[str]:
    """Problems that make the sidecars disagree with the log (for `klake verify`).

    `source` names the segment's `.log`; problems name the `.index` / `.timeindex` file, the entry
    and its byte position. An entry is consistent iff Kafka's lookups through it give the right
    answer and it says what Kafka says it says:
    - offset entry `(K, P)`: P > 0 is the start of a batch, the batch before P ends below K (else
      lookups of K would skip it) and K is within the log;
    - time entry `(T, O)`: O is within the log, the batch holding O has max timestamp T and no
      earlier batch reaches T (spec 1.10; else timestamp lookups skip records, spec 5.2);
    - unless `active`, the last time entry is the segment's max timestamp: without that final entry
      (spec 2.6) Kafka under-estimates the segment's largest timestamp (retention, lookups; 7.3).
    """
    index_name, time_name = sidecar_names(source)
    if offset_index.base_offset != time_index.base_offset:
        return [f"{index_name}: base offset {offset_index.base_offset} differs from {time_name}'s "
                f"{time_index.base_offset}"]
    problems = offset_index.problems(index_name) + time_index.problems(time_name)
    problems += _offset_entry_problems(headers, offset_index, index_name)
    problems += _time_entry_problems(headers, time_index, time_name)
    if not active:
        problems += _final_entry_problems(headers, time_index, time_name)
    return problems


def _entry_label(name: str, entry_size: int, i: int, a: int, b: int) -> str:
    return f"{name}: byte {i * entry_size}: entry {i} ({a}, {b})"


def _offset_entry_problems(headers: BatchHeaders, index: OffsetIndex, name: str) -> list[str]:
    k = index.offsets
    p = index.positions.astype(np.int64)
    n = len(headers)
    if n == 0:
        return [f"{_entry_label(name, OFFSET_ENTRY_SIZE, i, int(k[i]), int(p[i]))}: the log is empty"
                for i in range(len(index))]
    pos, last = headers.position, headers.last_offset
    row = np.searchsorted(pos, p, side="left")
    is_start = (row < n) & (pos[np.minimum(row, n - 1)] == p)
    prev_last = np.where(row > 0, last[np.maximum(row - 1, 0)], INT64_MIN)
    log_last = int(last[-1])
    problems = []
    for i in np.flatnonzero(~is_start | (prev_last >= k) | (k > log_last) | (p <= 0)).tolist():
        ki, pi = int(k[i]), int(p[i])
        where = _entry_label(name, OFFSET_ENTRY_SIZE, i, ki, pi)
        if ki > log_last:
            problems.append(f"{where}: offset {ki} is beyond the log's last offset {log_last}")
        elif pi <= 0:
            problems.append(f"{where}: position 0 is never indexed (a segment's first append has no entry)")
        elif not is_start[i]:
            problems.append(f"{where}: position {pi} is not the start of a batch")
        else:
            problems.append(f"{where}: the batch before position {pi} ends at offset {int(prev_last[i])} >= {ki}, "
                            f"so offset lookups from {ki} would skip it")
    return problems


def _time_entry_problems(headers: BatchHeaders, index: TimeIndex, name: str) -> list[str]:
    t = index.timestamps
    o = index.offsets
    n = len(headers)
    if n == 0:
        return [f"{_entry_label(name, TIME_ENTRY_SIZE, i, int(t[i]), int(o[i]))}: the log is empty"
                for i in range(len(index))]
    no_ts = index.no_timestamp
    max_ts = headers.max_timestamp
    batch = np.searchsorted(headers.last_offset, o, side="left")
    inside = batch < n
    at = np.minimum(batch, n - 1)
    running = np.concatenate(([no_ts], np.maximum.accumulate(np.maximum(max_ts, no_ts))))
    earlier = running[np.where(inside, batch, 0)]
    carried = max_ts[at]
    problems = []
    for i in np.flatnonzero(~inside | (earlier >= t) | (carried != t)).tolist():
        ti, oi = int(t[i]), int(o[i])
        where = _entry_label(name, TIME_ENTRY_SIZE, i, ti, oi)
        if not inside[i]:
            problems.append(f"{where}: offset {oi} is beyond the log's last offset {int(headers.last_offset[-1])}")
            continue
        if earlier[i] >= ti:
            problems.append(f"{where}: an earlier batch already has max timestamp {int(earlier[i])} >= {ti}, "
                            f"so timestamp lookups from {ti} would skip it")
        if carried[i] != ti:
            problems.append(f"{where}: the batch at byte {int(headers.position[at[i]])} holding offset {oi} has "
                            f"max timestamp {int(carried[i])}, not {ti}")
    return problems


def _final_entry_problems(headers: BatchHeaders, index: TimeIndex, name: str) -> list[str]:
    if not len(headers):
        return []
    no_ts = index.no_timestamp
    ts = np.maximum(headers.max_timestamp, no_ts)
    seg_max = int(ts.max())
    last_t, _ = index.last_entry()
    if seg_max == no_ts or last_t >= seg_max:
        return []
    seg_offset = int(headers.last_offset[int(np.argmax(ts))])
    return [f"{name}: byte {len(index) * TIME_ENTRY_SIZE}: final entry missing: the last entry's timestamp is "
            f"{last_t} but the segment's max timestamp is {seg_max} (offset {seg_offset}), so Kafka would "
            f"under-estimate the segment's largest timestamp (spec 2.6, 7.3)"]


@dataclass
class SidecarCheck:
    """The loaded indexes (valid prefixes; None when missing) and every problem found."""

    offset_index: OffsetIndex | None
    time_index: TimeIndex | None
    problems: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems and self.offset_index is not None and self.time_index is not None


def check_sidecars(headers: BatchHeaders, base_offset: int, index: bytes | None, timeindex: bytes | None,
                   source: str, active: bool = False, *, min_timestamp: int) -> SidecarCheck:
    """Load both sidecars of the segment `source` (its `.log` name) and check them against `headers`;
    `min_timestamp` is the topic's (`engine.log.topic_config.min_timestamp`)."""
    index_name, timeindex_name = sidecar_names(source)
    problems: list[str] = []
    offsets = times = None
    if index is None:
        problems.append(f"{index_name}: missing")
    else:
        loaded = OffsetIndex.load(index, base_offset, index_name)
        problems += loaded.problems
        offsets = loaded.index
    if timeindex is None:
        problems.append(f"{timeindex_name}: missing")
    else:
        loaded_t = TimeIndex.load(timeindex, base_offset, timeindex_name, min_timestamp=min_timestamp)
        problems += loaded_t.problems
        times = loaded_t.index
    if offsets is not None and times is not None and not problems:
        problems += check_indexes(headers, offsets, times, source, active=active)
    return SidecarCheck(offsets, times, problems)


def settle_indexes(headers: BatchHeaders, base_offset: int, index: bytes | None, timeindex: bytes | None,
                   source: str, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES, active: bool = False,
                   *, min_timestamp: int) -> tuple[OffsetIndex, TimeIndex, SidecarCheck]:
    """Indexes to use for the segment: its own when they check out, else rebuilt by Kafka's recovery
    rule (spec 7.2). The check says what was wrong (empty problems = the files were used)."""
    check = check_sidecars(headers, base_offset, index, timeindex, source, active,
                           min_timestamp=min_timestamp)
    if check.valid:
        return check.offset_index, check.time_index, check
    offsets, times = build_indexes(headers, base_offset, index_interval_bytes, min_timestamp=min_timestamp)
    return offsets, times, check
