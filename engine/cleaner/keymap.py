"""The cleaner's key -> latest offset map over the dirty range (spec 8.2, `Cleaner.buildOffsetMap`).

Kafka hashes keys with MD5 into a `SkimpyOffsetMap`, so two keys with the same MD5 are one key. klake
compares keys exactly: all keys are dictionary-encoded by Arrow's hash table (exact byte equality)
into integer codes, and the map is a numpy array `latest[code]`, filled with one `maximum.at`.

What is mapped: records with a key and offset >= first dirty offset, in data batches (never control
batches) that are not aborted, in the dirty segments. `latest_offset` is Kafka's `map.latestOffset`:
each dirty segment ends it at the next dirty segment's base - 1, the last one at the round end - 1
(this tolerates offset gaps, KAFKA-8764). Kafka's map is bounded (`log.cleaner.dedupe.buffer.size`,
partial clean, KAFKA-3894); klake's is unbounded unless `max_entries` is given, in which case it stops
before the first batch holding a record it cannot put (`map.size < max` checked per record), so a
partial round always ends at a batch boundary (Kafka may end mid-batch, KAFKA-9826), and it always
maps at least one batch with keys so that a round makes progress.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def key_codes(keys: Sequence[pa.Array]) -> np.ndarray:
    """Exact integer identity of each key across all `keys` arrays (in order); -1 for a null key."""
    if not keys:
        return np.zeros(0, np.int64)
    joined = pa.concat_arrays([k.cast(pa.large_binary()) for k in keys])
    if len(joined) == 0:
        return np.zeros(0, np.int64)
    encoded = pc.dictionary_encode(joined)
    return encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


@dataclass(frozen=True)
class OffsetMap:
    """`latest[code]` for every mapped key (-1 when not mapped), the map's latest offset, and whether
    the map filled up (a partial round)."""

    latest: np.ndarray
    latest_offset: int
    full: bool
    entries: int

    def lookup(self, codes: np.ndarray) -> np.ndarray:
        """map.get(key) per record: the latest offset of its key, -1 for absent or null keys."""
        return np.where(codes >= 0, self.latest[np.maximum(codes, 0)] if self.latest.size else -1, -1)


def build_offset_map(codes: np.ndarray, offsets: np.ndarray, record_batch: np.ndarray,
                     batch_last_offset: np.ndarray, batch_segment: np.ndarray, batch_mappable: np.ndarray,
                     dirty_segments: Sequence[int], segment_bases: Sequence[int], first_dirty: int,
                     round_end: int, max_entries: int | None = None) -> OffsetMap:
    """Map the dirty range. Batches are rows in log order; `batch_mappable` marks data batches that are
    not aborted; `segment_bases[s]` is the base of segment s (row order = segment order)."""
    n_codes = int(codes.max()) + 1 if codes.size else 0
    latest = np.full(n_codes, -1, np.int64)
    if not dirty_segments:
        return OffsetMap(latest, -1, False, 0)
    dirty = np.zeros(len(segment_bases), bool)
    dirty[list(dirty_segments)] = True
    in_dirty = dirty[batch_segment] if batch_segment.size else np.zeros(0, bool)
    candidate = (codes >= 0) & (offsets >= first_dirty) & (batch_mappable & in_dirty)[record_batch]
    latest_offset, full = round_end - 1, False
    stop = _stop_batch(codes, candidate, record_batch, max_entries)
    if stop is not None:
        full = True
        candidate &= record_batch < stop
        latest_offset = _partial_latest_offset(stop, batch_last_offset, batch_segment, in_dirty,
                                               dirty_segments, segment_bases, first_dirty)
    np.maximum.at(latest, codes[candidate], offsets[candidate])
    return OffsetMap(latest, latest_offset, full, int(np.count_nonzero(latest >= 0)))


def _stop_batch(codes: np.ndarray, candidate: np.ndarray, record_batch: np.ndarray,
                max_entries: int | None) -> int | None:
    """The first batch that cannot be mapped whole, or None when everything fits."""
    if max_entries is None:
        return None
    rows = np.flatnonzero(candidate)
    if rows.size == 0:
        return None
    _, first_seen = np.unique(codes[rows], return_index=True)
    new_key = np.zeros(rows.size, np.int64)
    new_key[first_seen] = 1
    distinct_before = np.cumsum(new_key) - new_key
    over = np.flatnonzero(distinct_before >= max_entries)
    if over.size == 0:
        return None
    batches = record_batch[rows]
    stop = int(batches[over[0]])
    if stop == int(batches[0]):  # map at least one batch, so that the round makes progress
        later = np.flatnonzero(batches > stop)
        return int(batches[later[0]]) if later.size else None
    return stop


def _partial_latest_offset(stop: int, batch_last_offset: np.ndarray, batch_segment: np.ndarray,
                           in_dirty: np.ndarray, dirty_segments: Sequence[int], segment_bases: Sequence[int],
                           first_dirty: int) -> int:
    """map.latestOffset when mapping stopped before batch `stop`: the last mapped batch's last offset in
    that segment, or the end of the previous (fully mapped) dirty segment."""
    segment = int(batch_segment[stop])
    latest = segment_bases[segment] - 1 if segment != dirty_segments[0] else -1
    before = np.flatnonzero((batch_segment[:stop] == segment) & in_dirty[:stop]
                            & (batch_last_offset[:stop] >= first_dirty))
    if before.size:
        latest = max(latest, int(batch_last_offset[before[-1]]))
    return latest
