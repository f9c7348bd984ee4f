"""The files a broker keeps beside its segments, as bytes (pure rules; `engine.ops.export` writes them).

- Checkpoint files (Kafka's `CheckpointFile`): a version line (`0`), a count line, then one entry a
  line, every line ending in `\\n`. `OffsetCheckpointFile` entries are `topic partition offset`
  (the log dir's `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
  `replication-offset-checkpoint`); `LeaderEpochCheckpointFile` entries are `epoch start_offset`
  (the partition directory's `leader-epoch-checkpoint`).
- `partition.metadata` (`PartitionMetadataFile`): `version: 0\\ntopic_id: <id>`, no final newline,
  where the id is Kafka's `Uuid.toString()`: the 16 bytes in URL-safe base64 without padding.
- The leader epoch cache (`LeaderEpochFileCache`) as a broker builds it while appending: every v2
  batch assigns (its partition leader epoch, its base offset) when the epoch differs from the latest
  entry's (entries it contradicts are dropped); a legacy batch clears the cache; raising the log start
  offset (`truncateFromStart`) drops the entries starting at or below it and restarts the last of them
  at the log start offset.
- Cutting a segment to an offset range at batch boundaries.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from engine.format.batch import BatchHeaders
from kernel.errors import KlakeError
from kernel.names import TopicPartition, validate_partition, validate_topic

CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0
_ZERO_UUID = bytes(16)
_METADATA_TOPIC_UUID = bytes(15) + b"\x01"  # Kafka's Uuid.METADATA_TOPIC_ID (0, 1)


class KafkaFileError(KlakeError):
    """A checkpoint or metadata file that does not follow Kafka's format; the message names file and line."""


# --- checkpoint files ----------------------------------------------------------------------------


def format_checkpoint(entries: Sequence[str]) -> bytes:
    """`CheckpointFile.write`: version, count, then one entry a line."""
    return "".join(f"{line}\n" for line in (str(CHECKPOINT_VERSION), str(len(entries)), *entries)).encode()


def parse_checkpoint(data: bytes, source: str, fields: int) -> list[list[str]]:
    """`CheckpointFile.read`: the entries, each split into its `fields` space-separated fields."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2 or lines[0] != str(CHECKPOINT_VERSION):
        raise KafkaFileError(f"{source}: line 1: expected version {CHECKPOINT_VERSION}, got "
                             f"{lines[0] if lines else 'nothing'!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise KafkaFileError(f"{source}: line 2: expected the entry count, got {lines[1]!r}") from None
    if count != len(lines) - 2:
        raise KafkaFileError(f"{source}: line 2: declares {count} entries but {len(lines) - 2} follow")
    entries = []
    for number, line in enumerate(lines[2:], start=3):
        parts = line.split(" ")
        if len(parts) != fields:
            raise KafkaFileError(f"{source}: line {number}: expected {fields} space-separated fields, got {line!r}")
        entries.append(parts)
    return entries


def offset_checkpoint(offsets: Mapping[TopicPartition, int]) -> bytes:
    """An `OffsetCheckpointFile` (recovery point, log start, high watermark) for every partition of a log dir."""
    return format_checkpoint([f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())])


def parse_offset_checkpoint(data: bytes, source: str) -> dict[TopicPartition, int]:
    """The entries of an `OffsetCheckpointFile`."""
    found = {}
    for number, (topic, partition, offset) in enumerate(parse_checkpoint(data, source, 3), start=3):
        try:
            found[TopicPartition(validate_topic(topic), validate_partition(int(partition)))] = int(offset)
        except (ValueError, KlakeError) as exc:
            raise KafkaFileError(f"{source}: line {number}: {exc}") from None
    return found


@dataclass(frozen=True)
class EpochEntry:
    """One leader epoch and the first offset its leader appended."""

    epoch: int
    start_offset: int


def leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    """A `LeaderEpochCheckpointFile`."""
    return format_checkpoint([f"{e.epoch} {e.start_offset}" for e in entries])


class LeaderEpochCache:
    """`LeaderEpochFileCache` fed with a partition's batches in offset order (see the module docstring)."""

    def __init__(self) -> None:
        self.entries: list[EpochEntry] = []

    def append(self, headers: BatchHeaders) -> None:
        """Assign every batch's epoch, as `UnifiedLog.append` does; only batches that change something are
        looked at (a legacy batch, or an epoch different from the batch before it)."""
        epochs = headers.partition_leader_epoch.astype(np.int64)
        legacy = headers.magic < 2
        previous = np.concatenate(([np.iinfo(np.int64).min], epochs[:-1]))
        for row in np.flatnonzero(legacy | (epochs != previous)).tolist():
            if legacy[row]:
                self.entries.clear()
            elif epochs[row] >= 0:
                self._assign(EpochEntry(int(epochs[row]), int(headers.base_offset[row])))

    def _assign(self, entry: EpochEntry) -> None:
        latest = self.entries[-1] if self.entries else None
        if latest is not None and entry.epoch == latest.epoch and entry.start_offset >= latest.start_offset:
            return
        self.entries = [e for e in self.entries if e.epoch < entry.epoch and e.start_offset < entry.start_offset]
        self.entries.append(entry)

    def truncate_from_start(self, log_start_offset: int) -> None:
        """`truncateFromStart`: the entries starting at or below the log start offset go, the last of them
        coming back with the log start offset as its start."""
        below = [e for e in self.entries if e.start_offset <= log_start_offset]
        if below:
            self.entries = [EpochEntry(below[-1].epoch, log_start_offset)] + self.entries[len(below):]


# --- partition.metadata --------------------------------------------------------------------------


def partition_metadata(topic_id: str) -> bytes:
    """`PartitionMetadataFile`'s content for a topic id (`Uuid.toString()` form)."""
    return f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {topic_id}".encode()


def parse_topic_id(text: str) -> str:
    """A topic id as Kafka's `Uuid.fromString` accepts it (22 URL-safe base64 characters, 16 bytes),
    neither the zero id nor the metadata topic's."""
    try:
        raw = base64.urlsafe_b64decode(text + "==") if len(text) == 22 else b""
    except ValueError:
        raw = b""
    if len(raw) != 16 or _uuid_string(raw) != text:
        raise KafkaFileError(f"topic id {text!r} is not a Kafka Uuid (22 URL-safe base64 characters)")
    if raw in (_ZERO_UUID, _METADATA_TOPIC_UUID):
        raise KafkaFileError(f"topic id {text!r} is reserved by Kafka")
    return text


def derived_topic_id(topic: str) -> str:
    """A stable topic id for a topic klake knows no id of: SHA-256 of its name, redrawn as Kafka's
    `Uuid.randomUuid` redraws (never the zero or metadata id, never a string starting with '-')."""
    digest = hashlib.sha256(f"klake topic id\x00{topic}".encode()).digest()
    while (raw := digest[:16]) in (_ZERO_UUID, _METADATA_TOPIC_UUID) or _uuid_string(raw).startswith("-"):
        digest = hashlib.sha256(digest).digest()
    return _uuid_string(raw)


def _uuid_string(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


# --- cutting a segment at batch boundaries -------------------------------------------------------


@dataclass(frozen=True)
class BatchCut:
    """The batches of a segment that hold offsets in [from, to): rows [first, end) of its headers,
    bytes [start, stop) of its log, and the base offset the cut segment is named by: the segment's
    own when no batch before the range is dropped, else the first offset of its first batch."""

    first: int
    end: int
    start: int
    stop: int
    base_offset: int

    @property
    def empty(self) -> bool:
        return self.first >= self.end


def first_offsets(headers: BatchHeaders, base_offset: int) -> np.ndarray:
    """Each batch's first offset: a v2 batch's base offset; a legacy batch's shallow view does not know
    it (a compressed wrapper carries its last offset), so the offset after the batch before it (the
    segment's base for the first batch) stands in, which no offset of the batch is below."""
    after_previous = np.concatenate(([base_offset], headers.last_offset[:-1] + 1)).astype(np.int64)
    return np.where(headers.magic == 2, headers.base_offset, after_previous).astype(np.int64)


def cut_at_batches(headers: BatchHeaders, base_offset: int, from_offset: int | None,
                   to_offset: int | None) -> BatchCut:
    """Every batch that holds an offset in [from_offset, to_offset) (None leaves a side open): a batch is
    kept or dropped whole, so the cut may hold a few offsets on either side of the range."""
    n = len(headers)
    starts = first_offsets(headers, base_offset)
    first = 0 if from_offset is None else int(np.searchsorted(headers.last_offset, from_offset, side="left"))
    end = n if to_offset is None else int(np.searchsorted(starts, to_offset, side="left"))
    if first >= end:
        return BatchCut(first, first, 0, 0, base_offset)
    base = base_offset if first == 0 else int(starts[first])
    return BatchCut(first, end, int(headers.position[first]), int(headers.next_position[end - 1]), base)
