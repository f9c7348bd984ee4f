"""The object layout: immutable, uniquely named segment objects (the default layout).

Keys are `{root}/{topic}-{partition}/{base_offset:020d}-{segment_id}.{log|index|timeindex}`, and
`.batchindex` for klake's own sidecar where a segment has one, beside its `.timeindex` (`batch_index_key`). A new
version of a segment (append, roll, compaction) gets a new `segment_id`, so no object is ever
overwritten; every object is created with put-if-absent (README, "Storage layouts").
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from kernel.names import TopicPartition, validate_segment_id
from layouts.extend import put_extending
from layouts.store import Parts, join
from layouts.store.bound import Store

SEGMENT_SUFFIXES = ("log", "index", "timeindex", "batchindex")
REJECTS_DIR = "_rejects"
"""`{root}/_rejects/{job id}/` holds an append job's rejected records, one Parquet file per partition."""
STAGING_DIR = "_staging"
"""`{root}/_staging/{job id}/{attempt}/` holds an append attempt's input rows on their way to the partitions'
tasks (`engine.ops.append_staging`), deleted when the attempt ends."""
_OBJECT_NAME_RE = re.compile(r"(?P<offset>[0-9]{20})-(?P<segment_id>[0-9a-z]{1,64})\.(?P<suffix>log|index|timeindex|batchindex)")


@dataclass(frozen=True)
class SegmentKeys:
    """The object URIs of one segment: Kafka's three files, and where its `.batchindex` goes if it has one
    (beside the `.timeindex` it was made for)."""

    log: str
    index: str
    timeindex: str

    @property
    def batchindex(self) -> str:
        return batch_index_key(self.timeindex)

    def all(self) -> tuple[str, str, str]:
        """Kafka's three files (`.log`, `.index`, `.timeindex`), in the commit protocol's order."""
        return (self.log, self.index, self.timeindex)


@dataclass(frozen=True)
class ObjectSegmentName:
    """What an object-layout file name says: base offset, segment id and suffix."""

    base_offset: int
    segment_id: str
    suffix: str


def new_segment_id() -> str:
    """A fresh random segment id (64 bits as 16 hex digits); put-if-absent catches the unlikely clash."""
    return uuid.uuid4().hex[:16]


def object_segment_keys(root: str, tp: TopicPartition, base_offset: int, segment_id: str) -> SegmentKeys:
    """Keys of segment `segment_id` of `tp` starting at `base_offset` in the object layout under `root`."""
    if base_offset < 0:
        raise ValueError(f"base offset must be >= 0, got {base_offset}")
    stem = join(root, tp.dir_name, f"{base_offset:020d}-{validate_segment_id(segment_id)}")
    return SegmentKeys(log=f"{stem}.log", index=f"{stem}.index", timeindex=f"{stem}.timeindex")


def batch_index_key(timeindex_key: str) -> str:
    """The klake `.batchindex` object beside the `.timeindex` whose spans it lists (`engine.index.batch_index`):
    it belongs to that `.timeindex`, so sidecars rebuilt under a new key get a new one, and a row whose
    `.timeindex` klake owns can have one whoever owns its `.log` (a broker's, imported in place)."""
    if not timeindex_key.endswith(".timeindex"):
        raise ValueError(f"{timeindex_key} is not a .timeindex key")
    return f"{timeindex_key.removesuffix('.timeindex')}.batchindex"


def batch_index_keys(timeindex_keys: pa.ChunkedArray, sizes: pa.ChunkedArray) -> pa.ChunkedArray:
    """`batch_index_key` of every row as a column (catalog rows as Arrow: `timeindex_key`,
    `batchindex_size_bytes`); null where the size is null (the row has no batch index) or the key is not a
    `.timeindex`'s."""
    keys = pc.if_else(pc.is_null(sizes), pa.scalar(None, pa.string()), timeindex_keys)
    return pc.if_else(pc.ends_with(keys, ".timeindex"),
                      pc.replace_substring_regex(keys, r"\.timeindex$", ".batchindex"), pa.scalar(None, pa.string()))


def parse_object_segment_name(name: str) -> ObjectSegmentName | None:
    """Parse `{base_offset:020d}-{segment_id}.{suffix}`; None for any other file name."""
    match = _OBJECT_NAME_RE.fullmatch(name)
    if match is None:
        return None
    return ObjectSegmentName(int(match["offset"]), match["segment_id"], match["suffix"])


def put_segment_objects(keys: SegmentKeys, log: bytes | Parts, index: bytes, timeindex: bytes,
                  store: Store, *, batchindex: bytes | None = None,
                  log_prefix_uri: str | None = None, log_prefix_size: int = 0) -> None:
    """Write `.log`, then `.index`, then `.timeindex`, then the `.batchindex` if there is one, each
    put-if-absent (the commit protocol's order: every object before the catalog commit).

    `log` may come in parts (its batches), written one after another without joining them. An object
    left by an interrupted earlier attempt is accepted if it holds the same bytes. With
    `log_prefix_uri` (an object holding `log[:log_prefix_size]`) the `.log` is built from it and only
    the tail is sent (`put_extending`).
    """
    if log_prefix_uri is None:
        store.ensure(keys.log, log)
    else:
        put_extending(keys.log, log, log_prefix_uri, log_prefix_size, store.options)
    for uri, data in ((keys.index, index), (keys.timeindex, timeindex)):
        store.ensure(uri, data)
    if batchindex is not None:
        store.ensure(keys.batchindex, batchindex)
