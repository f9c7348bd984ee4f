"""Check a segment's `.index` / `.timeindex` against its log, and rebuild them when they fail.

Kafka trusts whatever index files it finds (KAFKA-7283, KAFKA-10207); klake loads each with its
longest valid prefix, reports a missing file or garbage, and checks every entry against the log's
batches. An active segment legitimately lacks the final time-index entry until it rolls (spec 2.6).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.batch import BatchHeaders
from engine.index_builder import build_indexes, check_indexes, sidecar_names
from engine.index_common import DEFAULT_INDEX_INTERVAL_BYTES
from engine.offset_index import OffsetIndex
from engine.time_index import TimeIndex


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
                   source: str, active: bool = False) -> SidecarCheck:
    """Load both sidecars of the segment `source` (its `.log` name) and check them against `headers`."""
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
        loaded_t = TimeIndex.load(timeindex, base_offset, timeindex_name)
        problems += loaded_t.problems
        times = loaded_t.index
    if offsets is not None and times is not None and not problems:
        problems += check_indexes(headers, offsets, times, source, active=active)
    return SidecarCheck(offsets, times, problems)


def settle_indexes(headers: BatchHeaders, base_offset: int, index: bytes | None, timeindex: bytes | None,
                   source: str, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES, active: bool = False
                   ) -> tuple[OffsetIndex, TimeIndex, SidecarCheck]:
    """Indexes to use for the segment: its own when they check out, else rebuilt by Kafka's recovery
    rule (spec 7.2). The check says what was wrong (empty problems = the files were used)."""
    check = check_sidecars(headers, base_offset, index, timeindex, source, active)
    if check.valid:
        return check.offset_index, check.time_index, check
    offsets, times = build_indexes(headers, base_offset, index_interval_bytes)
    return offsets, times, check
