"""The layout of Kafka's reference RemoteStorageManager, `LocalTieredStorage` (KIP-405 tiered storage).

A broker with remote storage enabled uploads each rolled segment of a `remote.storage.enable` topic
through its RemoteStorageManager. `LocalTieredStorage` (kafka-storage's test jar, the plugin Kafka's own
tiered-storage tests run) keeps one directory per partition, `{topic}-{partition}-{topicId}` (the topic id
is Kafka's 22-character URL-safe base64 `Uuid`), and in it one file set per upload:
`{startOffset}-{segmentUuid}.{log,index,timeindex,snapshot,leader_epoch_checkpoint,txnindex}`
(`RemoteLogSegmentFileset`: the offset zero-padded to 20 digits, `(\\d+-)([a-zA-Z0-9_-]{22})(\\.[a-z_]+)`;
an unpadded offset is read too). `.txnindex` is written only when the segment has aborted transactions.

A start offset may have several uploads: a copy retried after a failure, or by another leader, leaves
another `segmentUuid` beside the first (the broker's metadata topic says which one counts; the bucket
does not). `choose_uploads` keeps, per start offset, the complete upload whose offsets chain with the
next start offset, and sets the others aside with why. This module only lists and names: the bucket is
never written (klake's catalog lives in a root elsewhere).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.names import TopicPartition, validate_topic
from layouts.kafka_layout import KafkaFileKind, KafkaLogDir, KafkaPartitionDir, KafkaSegmentFiles
from layouts.store import ObjectInfo, StorageOptions, join, list_objects, normalize_uri

STORAGE_DIR = "kafka-tiered-storage"
"""The directory `LocalTieredStorage` makes under its `dir` setting; importing `dir` itself finds it too."""
_DIR_RE = re.compile(r"(?P<topic>.+)-(?P<partition>0|[1-9][0-9]*)-(?P<topic_id>[A-Za-z0-9_-]{22})")
_FILE_RE = re.compile(r"(?P<offset>[0-9]+)-(?P<uuid>[A-Za-z0-9_-]{22})\.(?P<suffix>[a-z_]+)")
REQUIRED = ("log", "index", "timeindex", "snapshot", "leader_epoch_checkpoint")
"""The files of every upload (`RemoteLogSegmentFileset` refuses a set missing one); `txnindex` is optional."""
OPTIONAL = ("txnindex",)
NOT_AN_UPLOAD_DIR = "not a {topic}-{partition}-{topicId} directory"


def parse_upload_dir(name: str) -> tuple[TopicPartition, str] | None:
    """The partition and topic id a `{topic}-{partition}-{topicId}` directory holds, or None."""
    match = _DIR_RE.fullmatch(name)
    if match is None:
        return None
    try:
        return TopicPartition(validate_topic(match["topic"]), int(match["partition"])), match["topic_id"]
    except ValueError:
        return None


@dataclass
class Upload:
    """One upload's file set: a start offset, the segment's uuid and the files found, by suffix."""

    start_offset: int
    uuid: str
    files: dict[str, ObjectInfo] = field(default_factory=dict)
    required: tuple[str, ...] = REQUIRED
    """The suffixes of a complete upload (another plugin's layout has its own)."""

    @property
    def missing(self) -> list[str]:
        """The required files this upload lacks (named as their objects would be)."""
        return [self.name(suffix) for suffix in self.required if suffix not in self.files]

    def name(self, suffix: str) -> str:
        """The object name of one of its files, as the broker writes it."""
        return f"{self.start_offset:020d}-{self.uuid}.{suffix}"

    def segment_files(self) -> KafkaSegmentFiles:
        return KafkaSegmentFiles(self.start_offset, self.files["log"], self.files.get("index"),
                                 self.files.get("timeindex"))


@dataclass
class UploadDir:
    """A partition directory of the bucket: its uploads by start offset, and files that are none."""

    tp: TopicPartition
    topic_id: str
    uri: str
    uploads: dict[int, list[Upload]] = field(default_factory=dict)
    other_files: list[ObjectInfo] = field(default_factory=list)


def group_uploads(tp: TopicPartition, topic_id: str, uri: str, files: list[ObjectInfo]) -> UploadDir:
    """Sort one partition directory's files into uploads (start offset, uuid), ordered by uuid."""
    result = UploadDir(tp, topic_id, uri)
    found: dict[tuple[int, str], Upload] = {}
    for info in files:
        match = _FILE_RE.fullmatch(info.name)
        if match is None or match["suffix"] not in (*REQUIRED, *OPTIONAL):
            result.other_files.append(info)
            continue
        key = (int(match["offset"]), match["uuid"])
        found.setdefault(key, Upload(*key)).files[match["suffix"]] = info
    for (offset, _), upload in sorted(found.items()):
        result.uploads.setdefault(offset, []).append(upload)
    return result


@dataclass
class Choice:
    """Per start offset, the upload kept (None: no complete one chains) and the ones set aside, with why."""

    kept: list[Upload] = field(default_factory=list)
    set_aside: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def choose_uploads(part: UploadDir, next_offset: Callable[[Upload], int | None]) -> Choice:
    """Keep one upload per start offset, in offset order: a complete one (its `required` files present) whose
    `next_offset` (the offset after its last batch; None: its `.log` does not read whole) is the next start
    offset, or, for the last start offset, the complete one reaching furthest. A single complete upload is
    kept without reading it (the importer reads it anyway and reports what is wrong with it). The others
    are set aside, by `.log` object, with why. A start offset with no upload to keep is a problem naming its
    objects, and the uploads after it are not kept: a gap would make a log that is no broker's."""
    choice = Choice()
    offsets = sorted(part.uploads)
    for i, offset in enumerate(offsets):
        following = offsets[i + 1] if i + 1 < len(offsets) else None
        candidates = part.uploads[offset]
        complete = [u for u in candidates if not u.missing]
        reasons = {u.name("log"): f"incomplete upload: {', '.join(u.missing)} missing" for u in candidates if u.missing}
        kept: Upload | None = None
        if len(complete) == 1 and len(candidates) == 1:
            kept = complete[0]
        else:
            reached = {u.uuid: next_offset(u) for u in complete}
            chaining = [u for u in complete if reached[u.uuid] is not None
                        and (following is None or reached[u.uuid] == following)]
            if chaining:
                kept = max(chaining, key=lambda u: reached[u.uuid] or 0)
            for u in complete:
                if u is not kept:
                    end = reached[u.uuid]
                    reasons[u.name("log")] = ("duplicate upload of the same start offset" if u in chaining else
                                              "its .log does not read whole" if end is None else
                                              f"ends before offset {end}, the next upload starts at {following}")
        if kept is None:
            names = "; ".join(f"{join(part.uri, name)}: {why}" for name, why in sorted(reasons.items()))
            choice.problems.append(f"{part.tp}: no complete upload at offset {offset} chains with its "
                                   f"neighbours: {names}")
            return choice
        choice.kept.append(kept)
        choice.set_aside.update({join(part.uri, name): why for name, why in reasons.items()})
    return choice


def scan_bucket(uri: str, options: StorageOptions | None = None) -> tuple[str, list[UploadDir], dict[str, str]]:
    """List a `LocalTieredStorage` directory (or bucket prefix) once, recursively: its normalised URI, its
    partition directories and the directories skipped (with why). `uri` is the storage directory itself
    or the `dir` setting above it (then its `kafka-tiered-storage/` is read)."""
    root = normalize_uri(uri)
    objects = list_objects(root, options)
    if root.rsplit("/", 1)[-1] != STORAGE_DIR and any(o.uri.startswith(join(root, STORAGE_DIR) + "/") for o in objects):
        root = join(root, STORAGE_DIR)
    by_dir: dict[str, list[ObjectInfo]] = {}
    for info in objects:
        if not info.uri.startswith(root + "/"):
            continue
        relative = info.uri[len(root) + 1:]
        if relative.count("/") == 1:
            dir_name, _ = relative.split("/", 1)
            by_dir.setdefault(dir_name, []).append(info)
    parts, skipped = [], {}
    for dir_name in sorted(by_dir):
        parsed = parse_upload_dir(dir_name)
        if parsed is None:
            skipped[dir_name] = NOT_AN_UPLOAD_DIR
            continue
        parts.append(group_uploads(*parsed, join(root, dir_name), by_dir[dir_name]))
    parts.sort(key=lambda p: p.tp)
    return root, parts, skipped


def as_log_dir(root: str, parts: list[UploadDir], choices: dict[TopicPartition, Choice],
               skipped: dict[str, str]) -> KafkaLogDir:
    """The kept uploads as the log dir the importer registers: per partition its segments in offset order;
    the uploads set aside and the other files are listed as files that are no segment."""
    log_dir = KafkaLogDir(uri=root, skipped_dirs=dict(skipped))
    for part in parts:
        choice = choices[part.tp]
        kept = {id(u) for u in choice.kept}
        others = [info for uploads in part.uploads.values() for u in uploads if id(u) not in kept
                  for info in u.files.values()]
        extra = [info for u in choice.kept for suffix, info in u.files.items() if suffix not in ("log", "index", "timeindex")]
        log_dir.partitions.append(KafkaPartitionDir(
            tp=part.tp, uri=part.uri, segments=[u.segment_files() for u in choice.kept],
            other_files={KafkaFileKind.UNKNOWN: part.other_files + others, KafkaFileKind.METADATA: extra},
            set_aside=dict(choice.set_aside),
            present=frozenset(u.files["log"].uri for uploads in part.uploads.values() for u in uploads
                              if "log" in u.files)))
    return log_dir
