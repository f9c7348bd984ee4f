"""The Kafka layout: a broker's log dir as copied to a bucket or a local directory.

A partition directory `<topic>-<partition>` holds `{base_offset:020d}.{log|index|timeindex}` per
segment (spec 1.1). Everything else a broker leaves there is recognised and never taken for a
segment: `.txnindex`, `.snapshot`, `leader-epoch-checkpoint`, `partition.metadata`, files with the
temporary suffixes `.deleted`/`.cleaned`/`.swap`, and `-delete`/`-future`/`-stray` directories.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

from engine.names import (
    LEADER_EPOCH_CHECKPOINT,
    NON_LIVE_DIR_SUFFIXES,
    PARTITION_METADATA,
    TopicPartition,
    parse_partition_dir,
)
from layouts.object_layout import SegmentKeys
from layouts.store import ObjectInfo, StorageOptions, join, list_objects, normalize_uri

_KAFKA_FILE_RE = re.compile(r"(?P<offset>[0-9]{20})\.(?P<suffix>log|index|timeindex|txnindex|snapshot)")
TEMPORARY_SUFFIXES = (".deleted", ".cleaned", ".swap")
METADATA_FILES = frozenset({LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA})
NON_LIVE_DIR = "scheduled for deletion, moving or stray"
NOT_A_PARTITION_DIR = "not a <topic>-<partition> directory"


class KafkaFileKind(StrEnum):
    LOG = "log"
    INDEX = "index"
    TIMEINDEX = "timeindex"
    TXNINDEX = "txnindex"
    SNAPSHOT = "snapshot"
    TEMPORARY = "temporary"
    METADATA = "metadata"
    UNKNOWN = "unknown"


def classify_kafka_file(name: str) -> tuple[KafkaFileKind, int | None]:
    """The kind of a file in a partition directory and, for segment files, its base offset."""
    if name.endswith(TEMPORARY_SUFFIXES):
        return KafkaFileKind.TEMPORARY, None
    if name in METADATA_FILES:
        return KafkaFileKind.METADATA, None
    match = _KAFKA_FILE_RE.fullmatch(name)
    if match is None:
        return KafkaFileKind.UNKNOWN, None
    return KafkaFileKind(match["suffix"]), int(match["offset"])


def kafka_segment_keys(root: str, tp: TopicPartition, base_offset: int) -> SegmentKeys:
    """Keys of the segment of `tp` starting at `base_offset` in the Kafka layout under `root`."""
    if base_offset < 0:
        raise ValueError(f"base offset must be >= 0, got {base_offset}")
    stem = join(root, tp.dir_name, f"{base_offset:020d}")
    return SegmentKeys(log=f"{stem}.log", index=f"{stem}.index", timeindex=f"{stem}.timeindex")


def txn_index_key(log_key: str) -> str:
    """The `.txnindex` beside a segment's `.log` (`TransactionIndex`: the segment's aborted transactions)."""
    if not log_key.endswith(".log"):
        raise ValueError(f"{log_key} is not a .log key")
    return f"{log_key.removesuffix('.log')}.{KafkaFileKind.TXNINDEX}"


@dataclass
class KafkaSegmentFiles:
    """One segment found in a partition directory; the indexes may be missing."""

    base_offset: int
    log: ObjectInfo
    index: ObjectInfo | None = None
    timeindex: ObjectInfo | None = None


@dataclass
class KafkaPartitionDir:
    """A partition directory: its segments in offset order and the files that are not segments."""

    tp: TopicPartition
    uri: str
    segments: list[KafkaSegmentFiles] = field(default_factory=list)
    orphan_indexes: list[ObjectInfo] = field(default_factory=list)
    other_files: dict[KafkaFileKind, list[ObjectInfo]] = field(default_factory=dict)
    set_aside: dict[str, str] = field(default_factory=dict)
    """Objects another layout's rules set aside, with why (a tiered-storage bucket's duplicate uploads)."""
    error: str | None = None
    """What stops this partition's import after its segments (a gap between a bucket's uploads)."""
    present: frozenset[str] | None = None
    """The `.log` keys, as rows name them, a tiered-storage bucket still holds for this partition (uploads kept
    or set aside); None where gone segments are not forgotten (a broker's log dir)."""


@dataclass
class KafkaLogDir:
    """What a log dir holds: its partition directories and the directories skipped (with why)."""

    uri: str
    partitions: list[KafkaPartitionDir] = field(default_factory=list)
    skipped_dirs: dict[str, str] = field(default_factory=dict)

    @property
    def invalid_dirs(self) -> list[str]:
        """Directories that are neither a partition of a valid topic nor one of Kafka's non-live
        directories: a broker refuses to load a log dir holding them."""
        return sorted(name for name, reason in self.skipped_dirs.items() if reason == NOT_A_PARTITION_DIR)


def group_partition_files(tp: TopicPartition, uri: str, files: list[ObjectInfo]) -> KafkaPartitionDir:
    """Sort the files of one partition directory into segments, orphan indexes and other files."""
    result = KafkaPartitionDir(tp=tp, uri=uri)
    logs: dict[int, ObjectInfo] = {}
    indexes: dict[tuple[int, KafkaFileKind], ObjectInfo] = {}
    for info in files:
        kind, offset = classify_kafka_file(info.name)
        if kind is KafkaFileKind.LOG and offset is not None:
            logs[offset] = info
        elif kind in (KafkaFileKind.INDEX, KafkaFileKind.TIMEINDEX) and offset is not None:
            indexes[(offset, kind)] = info
        else:
            result.other_files.setdefault(kind, []).append(info)
    for offset in sorted(logs):
        result.segments.append(KafkaSegmentFiles(
            base_offset=offset, log=logs[offset],
            index=indexes.pop((offset, KafkaFileKind.INDEX), None),
            timeindex=indexes.pop((offset, KafkaFileKind.TIMEINDEX), None)))
    result.orphan_indexes = sorted(indexes.values(), key=lambda info: info.uri)
    return result


def scan_log_dir(uri: str, options: StorageOptions | None = None) -> KafkaLogDir:
    """List a log dir once (recursively) and group its objects by partition directory.

    Only direct children `<topic>-<partition>` of `uri` are partitions; files at the top level
    (checkpoint files, `.kafka_cleanshutdown`) and deeper nesting are not part of any partition.
    """
    root = normalize_uri(uri)
    by_dir: dict[str, list[ObjectInfo]] = {}
    for info in list_objects(root, options):
        relative = info.uri[len(root) + 1:]
        if "/" not in relative:
            continue
        dir_name, rest = relative.split("/", 1)
        if "/" not in rest:
            by_dir.setdefault(dir_name, []).append(info)
    log_dir = KafkaLogDir(uri=root)
    for dir_name in sorted(by_dir):
        tp = parse_partition_dir(dir_name)
        if tp is None:
            log_dir.skipped_dirs[dir_name] = (NON_LIVE_DIR if dir_name.endswith(NON_LIVE_DIR_SUFFIXES)
                                              else NOT_A_PARTITION_DIR)
            continue
        log_dir.partitions.append(group_partition_files(tp, join(root, dir_name), by_dir[dir_name]))
    log_dir.partitions.sort(key=lambda p: p.tp)
    return log_dir
