"""The object layout of Aiven's tiered-storage plugin for Apache Kafka (KIP-405's RemoteStorageManager).

`ObjectKeyFactory` names every upload `{prefix}{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentUuid}`
with the suffixes `.log` (the segment, chunked and maybe compressed and encrypted), `.indexes` (its
indexes) and `.rsm-manifest` (`layouts.aiven_manifest`); `key.prefix` is the plugin's setting, the import
source is the bucket URI with it. An upload lacking one of the three is incomplete (the plugin writes the
manifest last, and deletes what it wrote when a copy fails); several uploads of a start offset are chosen
between as for `LocalTieredStorage` (`choose_uploads`), by the end offset their manifest records.

The kept uploads become a log dir of `aiven+` names (`layouts.store.aiven_file_io`): the importer reads
them as Kafka segment files. Nothing is written into the bucket.
"""

from __future__ import annotations

import re

from engine.names import TopicPartition, validate_topic
from layouts.aiven_manifest import AivenObjectError, SegmentManifest
from layouts.kafka_layout import KafkaFileKind, KafkaLogDir, KafkaPartitionDir, KafkaSegmentFiles
from layouts.kafka_rsm_layout import Choice, Upload, UploadDir
from layouts.store import ObjectInfo, StorageOptions, file_io, join, list_objects, normalize_uri
from layouts.store.aiven_file_io import AivenFileIO, aiven_uri

REQUIRED = ("log", "indexes", "rsm-manifest")
_TOPIC_DIR_RE = re.compile(r"(?P<topic>.+)-(?P<topic_id>[A-Za-z0-9_-]{22})")
_PARTITION_RE = re.compile(r"0|[1-9][0-9]*")
_FILE_RE = re.compile(r"(?P<offset>[0-9]{20})-(?P<uuid>[A-Za-z0-9_-]{22})\.(?P<suffix>log|indexes|rsm-manifest)")
NOT_A_TOPIC_DIR = "not a {topic}-{topicId}/{partition} directory"


def parse_partition_dir(topic_dir: str, partition: str) -> tuple[TopicPartition, str] | None:
    """The partition and topic id of a `{topic}-{topicId}/{partition}` directory, or None."""
    match = _TOPIC_DIR_RE.fullmatch(topic_dir)
    if match is None or _PARTITION_RE.fullmatch(partition) is None:
        return None
    try:
        return TopicPartition(validate_topic(match["topic"]), int(partition)), match["topic_id"]
    except ValueError:
        return None


def scan_bucket(uri: str, options: StorageOptions | None = None) -> tuple[str, list[UploadDir], dict[str, str]]:
    """List the bucket prefix once, recursively: its normalised URI, its partition directories (uploads by
    start offset) and the directories skipped, with why."""
    root = normalize_uri(uri)
    by_dir: dict[tuple[str, str], list[ObjectInfo]] = {}
    for info in list_objects(root, options):
        relative = info.uri[len(root) + 1:]
        if relative.count("/") == 2:
            topic_dir, partition, _ = relative.split("/")
            by_dir.setdefault((topic_dir, partition), []).append(info)
    parts, skipped = [], {}
    for topic_dir, partition in sorted(by_dir):
        parsed = parse_partition_dir(topic_dir, partition)
        if parsed is None:
            skipped[f"{topic_dir}/{partition}"] = NOT_A_TOPIC_DIR
            continue
        part = UploadDir(*parsed, join(root, topic_dir, partition))
        found: dict[tuple[int, str], Upload] = {}
        for info in by_dir[(topic_dir, partition)]:
            match = _FILE_RE.fullmatch(info.name)
            if match is None:
                part.other_files.append(info)
                continue
            key = (int(match["offset"]), match["uuid"])
            found.setdefault(key, Upload(*key, required=REQUIRED)).files[match["suffix"]] = info
        for (offset, _), upload in sorted(found.items()):
            part.uploads.setdefault(offset, []).append(upload)
        parts.append(part)
    parts.sort(key=lambda p: p.tp)
    return root, parts, skipped


def stem(part: UploadDir, upload: Upload) -> str:
    """The bucket URI of an upload without its suffix."""
    return join(part.uri, f"{upload.start_offset:020d}-{upload.uuid}")


def read_manifest(part: UploadDir, upload: Upload, options: StorageOptions | None = None) -> SegmentManifest:
    """The upload's manifest (read once per process)."""
    where = stem(part, upload)
    return AivenFileIO(file_io(where, options)).manifest(where)


def segment_files(part: UploadDir, upload: Upload, manifest: SegmentManifest) -> KafkaSegmentFiles:
    """An upload as a Kafka segment's files: `aiven+` names, with the sizes the broker's files had."""
    name, mtime = aiven_uri(stem(part, upload)), upload.files["log"].mtime_ms
    return KafkaSegmentFiles(upload.start_offset,
                             ObjectInfo(f"{name}.log", manifest.chunk_index.original_file_size, mtime),
                             ObjectInfo(f"{name}.index", manifest.original_index_size("offset"), mtime),
                             ObjectInfo(f"{name}.timeindex", manifest.original_index_size("timestamp"), mtime))


def as_log_dir(root: str, parts: list[UploadDir], choices: dict[TopicPartition, Choice],
               skipped: dict[str, str], options: StorageOptions | None = None) -> KafkaLogDir:
    """The kept uploads as the log dir the importer registers, in offset order; a manifest that cannot be
    read stops its partition there (its error names the object). The uploads set aside and other files
    are listed as files that are no segment."""
    log_dir = KafkaLogDir(uri=root, skipped_dirs=dict(skipped))
    for part in parts:
        choice = choices[part.tp]
        kept = {id(u) for u in choice.kept}
        others = [info for uploads in part.uploads.values() for u in uploads if id(u) not in kept
                  for info in u.files.values()]
        segments, error = [], choice.problems[0] if choice.problems else None
        for upload in choice.kept:
            try:
                segments.append(segment_files(part, upload, read_manifest(part, upload, options)))
            except AivenObjectError as exc:
                error = f"{part.tp}: offset {upload.start_offset}: {exc}"
                break
        metadata = [info for u in choice.kept for suffix, info in u.files.items() if suffix != "log"]
        log_dir.partitions.append(KafkaPartitionDir(
            tp=part.tp, uri=part.uri, segments=segments,
            other_files={KafkaFileKind.UNKNOWN: part.other_files + others, KafkaFileKind.METADATA: metadata},
            set_aside=dict(choice.set_aside), error=error,
            present=frozenset(f"{aiven_uri(stem(part, u))}.log" for uploads in part.uploads.values()
                              for u in uploads if "log" in u.files)))
    return log_dir
