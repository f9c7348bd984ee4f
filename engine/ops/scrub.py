"""The scrubber: reconcile the object store with the catalog.

It finds (1) orphans: object-layout segment objects under the root that no live catalog row
references, older than a grace period, (2) live rows whose objects are missing or of another size
than the row records (the `.log`'s, and the sidecars' where the row has them), and (3) debris of
killed jobs older than the grace period: lease temporaries and takeover markers under `_leases/`,
and rejects files under `_rejects/{job id}/` of partitions the job ledger says that job id never
committed (a later attempt writes its own). It reports all three and deletes orphans and debris
(README, "The jobs": a killed job leaves at worst unreferenced objects, which scrub removes; it never
leaves a live row without its objects). Rules that keep it from deleting anything it should not:

- only names klake itself writes are candidates: `{topic}-{partition}/{base:020d}-{id}.{log|index|timeindex}`
  and their local put-if-absent temporaries; Kafka-layout files, leases and the catalog never are;
- the store is listed BEFORE the catalog is read, and the catalog is read again right before deleting,
  so an object committed meanwhile is seen as referenced; the grace period must exceed the longest
  time between a job's object write and its catalog commit;
- on S3, deletes go out as DeleteObjects requests of at most 1,000 keys.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field

from engine.catalog.schema import SegmentRow, table_to_rows
from engine.names import TopicPartition, parse_partition_dir
from engine.ops.catalog_table import Catalog
from layouts.object_layout import REJECTS_DIR, parse_object_segment_name
from layouts.store import ObjectInfo, StorageOptions, delete_objects, list_objects, normalize_uri

DEFAULT_GRACE_MS = 3_600_000
_TEMPORARY_RE = re.compile(r"\.(?P<name>.+)\.tmp-[0-9a-f]{32}")
_LEASE_DEBRIS_RE = re.compile(r"\.[^/]+\.lease\.tmp-[0-9a-f]{32}|[^/]+\.lease\.takeover-[0-9a-f]{32}")
_REJECTS_RE = re.compile(r"(?P<job>[^/]+)/(?P<partition>[^/]+)\.parquet")


@dataclass
class Orphan:
    uri: str
    size: int
    age_ms: int


@dataclass
class Debris:
    uri: str
    kind: str  # lease-temporary | superseded-rejects
    size: int
    age_ms: int


@dataclass
class MissingObject:
    segment: str
    kind: str
    key: str


@dataclass
class SizeMismatch:
    segment: str
    key: str
    catalog_size: int
    object_size: int


@dataclass
class ScrubReport:
    """Everything one scrub found and did; `to_dict` is the JSON report."""

    root: str
    catalog: str
    dry_run: bool
    grace_ms: int
    objects_listed: int = 0
    live_segments: int = 0
    orphans: list[Orphan] = field(default_factory=list)
    orphans_within_grace: int = 0
    debris: list[Debris] = field(default_factory=list)
    missing: list[MissingObject] = field(default_factory=list)
    size_mismatches: list[SizeMismatch] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    delete_failed: dict[str, str] = field(default_factory=dict)
    delete_requests: int = 0

    @property
    def clean(self) -> bool:
        return not (self.orphans or self.debris or self.missing or self.size_mismatches or self.delete_failed)

    def to_dict(self) -> dict:
        return asdict(self)


def is_klake_object(root: str, info: ObjectInfo) -> bool:
    """True for objects klake writes under `root`: object-layout segment files (and their temporaries)."""
    relative = info.uri[len(root) + 1:]
    parts = relative.split("/")
    if len(parts) != 2 or parse_partition_dir(parts[0]) is None:
        return False
    temporary = _TEMPORARY_RE.fullmatch(parts[1])
    name = temporary["name"] if temporary else parts[1]
    return parse_object_segment_name(name) is not None


def _debris(root: str, old: list[ObjectInfo], catalog: Catalog, now: int) -> list[Debris]:
    """Of unreferenced objects past the grace period: lease temporaries and takeover markers, and rejects
    files of partitions their job id never committed (the attempt that wrote them died before its
    commit); the job ledger is asked once per job id."""
    found: list[Debris] = []
    rejects: dict[str, list[tuple[TopicPartition, ObjectInfo]]] = {}
    for info in old:
        folder, _, rest = info.uri[len(root) + 1:].partition("/")
        if folder == "_leases" and _LEASE_DEBRIS_RE.fullmatch(rest):
            found.append(Debris(info.uri, "lease-temporary", info.size, now - info.mtime_ms))
        elif (folder == REJECTS_DIR and (match := _REJECTS_RE.fullmatch(rest))
              and (tp := parse_partition_dir(match["partition"])) is not None):
            rejects.setdefault(match["job"], []).append((tp, info))
    for job, files in rejects.items():
        committed = catalog.committed_partitions(job, [tp for tp, _ in files])
        found += [Debris(info.uri, "superseded-rejects", info.size, now - info.mtime_ms)
                  for tp, info in files if tp not in committed]
    return found


def _referenced(rows: list[SegmentRow]) -> set[str]:
    return {key for row in rows for key in (row.log_key, row.index_key, row.timeindex_key)}


def _live_rows(catalog: Catalog) -> list[SegmentRow]:
    return table_to_rows(catalog.segments())


def _outside_listing(rows: list[SegmentRow], root: str, options: StorageOptions | None) -> dict[str, ObjectInfo]:
    """Objects referenced from outside `root` (e.g. Kafka-layout imports), listed once per directory."""
    dirs = {key.rsplit("/", 1)[0] for key in _referenced(rows) if not key.startswith(root + "/")}
    return {info.uri: info for d in sorted(dirs) for info in list_objects(d, options)}


def _check_rows(rows: list[SegmentRow], objects: dict[str, ObjectInfo], report: ScrubReport) -> None:
    for row in rows:
        name = f"{row.topic}-{row.partition}/{row.segment_id}"
        for kind, key, size in (("log", row.log_key, row.size_bytes), ("index", row.index_key, row.index_size_bytes),
                                ("timeindex", row.timeindex_key, row.timeindex_size_bytes)):
            info = objects.get(key)
            if info is None:
                report.missing.append(MissingObject(segment=name, kind=kind, key=key))
            elif size is not None and info.size != size:  # an older catalog's row records no sidecar size
                report.size_mismatches.append(SizeMismatch(segment=name, key=key, catalog_size=size,
                                                           object_size=info.size))


def scrub(root: str, catalog: Catalog, grace_ms: int = DEFAULT_GRACE_MS, dry_run: bool = False,
          options: StorageOptions | None = None, now: int | None = None) -> ScrubReport:
    """Find orphans and broken rows under `root`; delete the orphans unless `dry_run`."""
    if grace_ms < 0:
        raise ValueError(f"grace period must be >= 0 ms, got {grace_ms}")
    root = normalize_uri(root)
    report = ScrubReport(root=root, catalog=catalog.uri, dry_run=dry_run, grace_ms=grace_ms)
    listed = list_objects(root, options)
    now = time.time_ns() // 1_000_000 if now is None else now
    report.objects_listed = len(listed)
    rows = _live_rows(catalog)
    report.live_segments = len(rows)
    objects = {info.uri: info for info in listed} | _outside_listing(rows, root, options)
    _check_rows(rows, objects, report)
    referenced = _referenced(rows)
    old_others = []
    for info in listed:
        if info.uri in referenced:
            continue
        age = now - info.mtime_ms
        if not is_klake_object(root, info):
            if age >= grace_ms:
                old_others.append(info)
            continue
        if age < grace_ms:
            report.orphans_within_grace += 1
        else:
            report.orphans.append(Orphan(uri=info.uri, size=info.size, age_ms=age))
    report.debris = _debris(root, old_others, catalog, now)
    if dry_run or not (report.orphans or report.debris):
        return report
    referenced_now = _referenced(_live_rows(catalog))
    report.orphans = [o for o in report.orphans if o.uri not in referenced_now]
    result = delete_objects([o.uri for o in report.orphans] + [d.uri for d in report.debris], options)
    report.deleted, report.delete_failed, report.delete_requests = result.deleted, result.failed, result.requests
    return report
