"""Write a new segment version: its objects under a fresh segment id (put-if-absent, never
overwriting), and the catalog row describing it, ready for the operation's single commit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from engine.catalog.schema import FORMAT_VERSION, Layout, SegmentRow, SegmentState
from engine.format.batch import BatchHeaders, scan_batches
from engine.index.batch_index import batch_index_bytes
from engine.log.summary import SegmentSummary, summarize_segment
from kernel.names import TopicPartition
from layouts.object_layout import (
    SegmentKeys,
    batch_index_key,
    new_segment_id,
    object_segment_keys,
    put_segment_objects,
)
from layouts.store import Parts, parts_of, size_of, whole
from layouts.store.bound import Store


def store_segment_version(store: Store, tp: TopicPartition, base_offset: int, log: bytes | Parts, index: bytes,
                          timeindex: bytes, state: SegmentState, job_id: str, created_at_ms: int | None,
                          *, log_start_offset: int = -1, cleaned: bool = False,
                          summary: SegmentSummary | None = None, extends: SegmentRow | None = None,
                          min_timestamp: int, upload: bool = True) -> SegmentRow:
    """Write the segment's objects and return its row (not committed); `upload=False` (a dry run) writes
    nothing and returns the row the version would have. `log` may be in parts (written
    without being joined: `layouts.store.Parts`). The `.batchindex` is written where it pays
    (`segment_batch_index`) and its length recorded in the row.

    `extends` is an earlier version of the same segment whose `.log` is a byte prefix of `log` (an
    append to the ACTIVE segment): the new `.log` is then built from that object in place, so only the
    appended bytes are sent (`put_extending`).
    """
    if extends is not None:
        _check_extends(extends, tp, base_offset, log)
    segment_id = new_segment_id()
    keys = object_segment_keys(store.root, tp, base_offset, segment_id)
    summary = summary or summarize_segment(whole(log), base_offset, keys.log, min_timestamp=min_timestamp)
    batchindex = segment_batch_index(log, timeindex, base_offset, summary.batch_count,
                                     min_timestamp=min_timestamp)
    if upload:
        put_segment_objects(keys, log, index, timeindex, store, batchindex=batchindex,
                      log_prefix_uri=extends.log_key if extends is not None else None,
                      log_prefix_size=extends.size_bytes if extends is not None else 0)
    row = segment_row(tp, segment_id, keys, Layout.OBJECT, summary, state, job_id, created_at_ms=created_at_ms,
                      index_size_bytes=len(index), timeindex_size_bytes=len(timeindex),
                      batchindex_size_bytes=None if batchindex is None else len(batchindex))
    return replace(row, log_start_offset=log_start_offset, cleaned=cleaned)


def segment_object_keys(row: SegmentRow) -> list[str]:
    """Every object `row` names: Kafka's three files, then its `.batchindex` if it has one."""
    keys = [row.log_key, row.index_key, row.timeindex_key]
    return keys + [batch_index_key(row.timeindex_key)] if row.batchindex_size_bytes is not None else keys


def _check_extends(extends: SegmentRow, tp: TopicPartition, base_offset: int, log: bytes | Parts) -> None:
    """Cheap checks that `extends` is an earlier version of this segment; its bytes are the caller's word
    (comparing them would mean reading the whole object, which is what extending avoids)."""
    if (extends.topic, extends.partition, extends.base_offset) != (tp.topic, tp.partition, base_offset):
        raise ValueError(f"segment {extends.log_key} is not a version of {tp} segment {base_offset}")
    if extends.size_bytes > size_of(log):
        raise ValueError(f"segment {extends.log_key} has {extends.size_bytes} bytes, more than the "
                         f"{size_of(log)} bytes of the version extending it")


def segment_row(tp: TopicPartition, segment_id: str, keys: SegmentKeys, layout: Layout, summary: SegmentSummary,
                state: SegmentState, job_id: str, created_at_ms: int | None = None, *,
                index_size_bytes: int | None, timeindex_size_bytes: int | None,
                batchindex_size_bytes: int | None = None) -> SegmentRow:
    """The catalog row of a segment version described by `summary`, whose sidecar objects (`keys.index`,
    `keys.timeindex`) hold the given numbers of bytes (None: unknown, read as a catalog written before these columns)
    and whose `keys.batchindex` holds `batchindex_size_bytes` (None: the segment has none);
    `created_at_ms` is klake's object-storage "mtime" (retention's fallback for segments without
    timestamps), default now."""
    return SegmentRow(
        topic=tp.topic, partition=tp.partition, segment_id=segment_id,
        log_key=keys.log, index_key=keys.index, timeindex_key=keys.timeindex,
        **summary.facts(), state=str(state),
        created_at_ms=time.time_ns() // 1_000_000 if created_at_ms is None else created_at_ms,
        job_id=job_id, format_version=FORMAT_VERSION, layout=str(layout),
        index_size_bytes=index_size_bytes, timeindex_size_bytes=timeindex_size_bytes,
        batchindex_size_bytes=batchindex_size_bytes)


def segment_batch_index(log: bytes | Parts, timeindex: bytes, base_offset: int, batch_count: int, *,
                        min_timestamp: int) -> bytes | None:
    """The `.batchindex` of a segment version (`engine.index.batch_index.batch_index_bytes`), or None where
    it does not pay. The log's batch headers are scanned only where it may pay (`log_headers`: a log in
    parts is never joined whole)."""
    return batch_index_bytes(batch_count, timeindex, base_offset, lambda: log_headers(log),
                             min_timestamp=min_timestamp)


def log_headers(log: bytes | Parts) -> BatchHeaders:
    """The headers of the valid batches of a log, whole or in parts (each holding whole batches), with
    positions in the whole log. Consecutive small parts (an append's are its batches) are scanned in runs
    of up to `SCAN_RUN_BYTES` joined: a bounded copy, never a second copy of the segment, and one scan per
    run rather than per batch (a scan's fixed cost is ~0.2 ms)."""
    scans, start = [], 0
    for run in _runs(parts_of(log)):
        scan = scan_batches(run, verify_crc=False, strict=False)
        headers = scan.headers.take(scan.headers.next_position <= scan.valid_bytes) if scan.problems else scan.headers
        headers.position = headers.position + np.int64(start)
        scans.append(headers)
        start += len(run)
        if scan.problems:
            break
    return BatchHeaders.concat(scans) if scans else scan_batches(b"").headers


SCAN_RUN_BYTES = 1 << 20


def _runs(parts: Parts) -> Iterator[bytes]:
    """`parts` as runs of consecutive parts: a part of `SCAN_RUN_BYTES` or more alone, smaller ones joined
    up to that size."""
    run: list[bytes] = []
    size = 0
    for part in parts:
        if run and size + len(part) > SCAN_RUN_BYTES:
            yield run[0] if len(run) == 1 else b"".join(run)
            run, size = [], 0
        run.append(part)
        size += len(part)
    if run:
        yield run[0] if len(run) == 1 else b"".join(run)
