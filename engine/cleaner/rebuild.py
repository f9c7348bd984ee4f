"""Write the batches a cleaning round changes (spec 8.5).

- `rebuild_v2`: `MemoryRecords.buildRetainedRecordsInto` for magic 2: the retained records in a batch
  with the original magic, codec, timestamp type, producer id/epoch, base sequence, transactional and
  control flags, partition leader epoch, base offset and lastOffsetDelta (`overrideLastOffset`).
  baseTimestamp = the delete horizon when one is set (the flag is set), else the first retained
  record's timestamp; record deltas are recomputed against it, so record timestamps do not change.
  maxTimestamp: CreateTime = max of the retained records (may go down), LogAppendTime = the original
  append time (whose records already read as that time). All records of all rebuilt batches of a
  segment are encoded in one vectorized `encode_records` pass; each batch is a slice of it, finished by
  the builder's own attribute packing and header writer (`batch_attributes`, `assemble_batch`), so a rebuilt
  batch is byte-identical to what `encode_batch` writes for the same records.
- `empty_header`: `DefaultRecordBatch.writeEmptyHeader` for RETAIN_EMPTY: no records, codec none,
  baseTimestamp -1, the previous maxTimestamp, no delete horizon.
- legacy wrappers: `cleaner_legacy.rebuild_wrapper`.
"""

from __future__ import annotations

import numpy as np

from engine.cleaner.legacy import rebuild_wrapper
from engine.format import compression
from engine.format.batch import LOG_APPEND_TIME, NO_TIMESTAMP, BatchHeaders
from engine.format.builder import assemble_batch, batch_attributes, encode_batch, encode_records
from engine.format.records import RecordTable


def _header_fields(h: BatchHeaders, row: int) -> dict:
    return dict(base_offset=int(h.base_offset[row]), timestamp_type=int(h.timestamp_type[row]),
                producer_id=int(h.producer_id[row]), producer_epoch=int(h.producer_epoch[row]),
                base_sequence=int(h.base_sequence[row]), partition_leader_epoch=int(h.partition_leader_epoch[row]),
                transactional=bool(h.is_transactional[row]), control=bool(h.is_control[row]),
                last_offset_delta=int(h.last_offset[row] - h.base_offset[row]))


def empty_header(h: BatchHeaders, row: int) -> bytes:
    """The header-only batch Kafka keeps for RETAIN_EMPTY (v2 only)."""
    return encode_batch([], [], [], codec=compression.NONE, max_timestamp=int(h.max_timestamp[row]),
                        **_header_fields(h, row))


def rebuild_v2(h: BatchHeaders, rows: np.ndarray, kept: RecordTable, horizons: np.ndarray,
               negative_timestamps: bool = False) -> list[bytes]:
    """Rebuild v2 batches `rows` (ascending) from `kept`, their retained records in log order (each row
    has at least one); `horizons[j]` is the delete horizon of batch `rows[j]`, -1 for none. With
    `negative_timestamps` (KIP-228 opt-in) the CreateTime max is not raised to -1."""
    if rows.size == 0:
        return []
    counts = np.bincount(np.searchsorted(rows, kept.batch_index), minlength=rows.size)
    first = np.cumsum(counts) - counts
    ts = kept.timestamp
    base_ts = np.where(horizons >= 0, horizons, ts[first])
    log_append = h.timestamp_type[rows] == LOG_APPEND_TIME
    create_max = np.maximum.reduceat(ts, first)
    if not negative_timestamps:
        create_max = np.maximum(create_max, NO_TIMESTAMP)
    max_ts = np.where(log_append, h.max_timestamp[rows], create_max)
    offsets, data = encode_records(kept.key, kept.value, ts - np.repeat(base_ts, counts),
                                   kept.offset - np.repeat(h.base_offset[rows], counts), kept.headers)
    view = memoryview(data)
    out = []
    for j, row in enumerate(rows.tolist()):
        f = _header_fields(h, row)
        start, stop = int(first[j]), int(first[j] + counts[j])
        attributes = batch_attributes(int(h.codec[row]), f["timestamp_type"], f["transactional"], f["control"],
                                 bool(horizons[j] >= 0))
        out.append(assemble_batch(view[offsets[start]:offsets[stop]], int(h.codec[row]), f["base_offset"],
                             f["partition_leader_epoch"], attributes, f["last_offset_delta"], int(base_ts[j]),
                             int(max_ts[j]), f["producer_id"], f["producer_epoch"], f["base_sequence"],
                             int(counts[j])))
    return out


def rebuild_legacy(h: BatchHeaders, row: int, kept: RecordTable) -> bytes:
    """A compressed legacy wrapper with the retained records, in its own magic and codec."""
    log_append_time = int(h.max_timestamp[row]) if int(h.timestamp_type[row]) == LOG_APPEND_TIME else None
    return rebuild_wrapper(int(h.magic[row]), int(h.codec[row]), log_append_time, kept.offset.tolist(),
                           kept.timestamp.tolist(), kept.key.to_pylist(), kept.value.to_pylist())
