"""Validated names: topics, partitions, partition directories and segment ids.

Nothing a user types becomes a storage key without passing through here. Topic names follow Kafka's
rule (`Topic.validate`: characters `[a-zA-Z0-9._-]`, 1-249 of them, not `.` or `..`); partitions are
non-negative int32 values; a partition directory is `<topic>-<partition>` (spec 1.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernel.errors import KlakeError

TOPIC_MAX_LENGTH = 249
PARTITION_MAX = 2**31 - 1
_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION_DIR_RE = re.compile(r"(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>[0-9]+)")
_SEGMENT_ID_RE = re.compile(r"[0-9a-z]{1,64}")

# Kafka renames a partition directory `<topic>-<partition>.<uuid><suffix>` when it is scheduled for
# deletion, is the target of an alter-log-dirs move, or is a stray left by KRaft (spec 1.1).
NON_LIVE_DIR_SUFFIXES = ("-delete", "-future", "-stray")

# The files a broker keeps beside the segments: in each partition directory, and at the top of a log dir
# (their formats: `engine.log.kafka_files`).
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"


class InvalidNameError(KlakeError, ValueError):
    """A topic, partition or segment id that may not become part of a storage key."""


def validate_topic(topic: str) -> str:
    """Return `topic` if Kafka would accept it as a topic name; raise `InvalidNameError` otherwise.

    Every message starts "invalid topic name", whoever typed the name (`--topic`, a config key, an
    input's `topic` column, an imported directory)."""
    if not isinstance(topic, str) or not topic:
        raise InvalidNameError(f"invalid topic name {topic!r}: it must be a non-empty string")
    if topic in (".", ".."):
        raise InvalidNameError(f"invalid topic name {topic!r}: '.' and '..' are not allowed")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidNameError(f"invalid topic name: {len(topic)} characters long, the maximum is {TOPIC_MAX_LENGTH}")
    if not _TOPIC_RE.fullmatch(topic):
        raise InvalidNameError(f"invalid topic name {topic!r}: characters outside [a-zA-Z0-9._-]")
    return topic


def validate_partition(partition: int) -> int:
    """Return `partition` if it is an int in [0, 2^31 - 1]; raise `InvalidNameError` otherwise."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise InvalidNameError(f"partition must be an int, got {partition!r}")
    if not 0 <= partition <= PARTITION_MAX:
        raise InvalidNameError(f"partition {partition} is outside [0, {PARTITION_MAX}]")
    return partition


def validate_segment_id(segment_id: str) -> str:
    """Segment ids are 1-64 characters of `[0-9a-z]`, so that they never split a key."""
    if not isinstance(segment_id, str) or not _SEGMENT_ID_RE.fullmatch(segment_id):
        raise InvalidNameError(f"segment id {segment_id!r} is not 1-64 characters of [0-9a-z]")
    return segment_id


@dataclass(frozen=True, order=True)
class TopicPartition:
    """A validated (topic, partition) pair; `dir_name` is its `<topic>-<partition>` directory."""

    topic: str
    partition: int

    def __post_init__(self) -> None:
        validate_topic(self.topic)
        validate_partition(self.partition)

    @property
    def dir_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def __str__(self) -> str:
        return self.dir_name


def parse_partition_dir(name: str) -> TopicPartition | None:
    """The partition a `<topic>-<partition>` directory name holds, or None if it names no live partition.

    Directories with a `-delete`, `-future` or `-stray` suffix and names that are not valid Kafka
    partition directories give None.
    """
    if name.endswith(NON_LIVE_DIR_SUFFIXES):
        return None
    match = _PARTITION_DIR_RE.fullmatch(name)
    if match is None:
        return None
    try:
        return TopicPartition(match["topic"], int(match["partition"]))
    except InvalidNameError:
        return None
