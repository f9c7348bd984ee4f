"""The scrubber: reconcile the object store with the catalog.

It finds (1) orphans: object-layout segment objects under the root that no live catalog row
references, older than a grace period, (2) live rows whose objects are missing or of another size
than the row records (the `.log`'s, and the sidecars' where the row has them, its `.batchindex` where it
has one), and (3) debris of killed jobs older than the grace period: every temporary file a killed
local writer left anywhere under the root (`layouts.store.TEMPORARY_NAME`: under `_topics/`, `_mirror/`,
`_leases/`, ...), takeover markers under `_leases/`, rejects files under `_rejects/{job id}/` of partitions the job ledger says that job id never
committed (a later attempt writes its own), and an append attempt's staged input rows under
`_staging/` (read only while that attempt runs, and deleted when it ends). It reports all three and deletes orphans and debris
(README, "The jobs": a killed job leaves at worst unreferenced objects, which scrub removes; it never
leaves a live row without its objects). Rules that keep it from deleting anything it should not:

- only names klake itself writes are candidates: `{topic}-{partition}/{base:020d}-{id}.{log|index|timeindex|batchindex}`
  and their local put-if-absent temporaries; Kafka-layout files, leases and the catalog never are;
- the store is listed BEFORE the catalog is read, and the catalog is read again right before deleting,
  so an object committed meanwhile is seen as referenced; the grace period must exceed the longest
  time between a job's object write and its catalog commit;
- only objects under the root are listed, so only they can be deleted: a root never deletes another's
  (issue 26); a catalog written before keys were relative is migrated first (`Catalog.migrate_keys`), so
  that a copied root's objects are seen as its own rows' and not as orphans;
- on S3, deletes go out as DeleteObjects requests of at most 1,000 keys.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.schema import LIVE_STATES
from engine.ops.catalog_table import Catalog
from kernel.names import TopicPartition, parse_partition_dir
from layouts.object_layout import REJECTS_DIR, STAGING_DIR, batch_index_keys, parse_object_segment_name
from layouts.root_keys import within_root
from layouts.store import TEMPORARY_NAME, ObjectInfo
from layouts.store.bound import Store

DEFAULT_GRACE_MS = 3_600_000
_FINDINGS = {"finding": pa.dictionary(pa.int8(), pa.string()), "kind": pa.string(), "segment": pa.string(),
             "uri": pa.string(), "object_size": pa.int64(), "catalog_size": pa.int64(), "age_ms": pa.int64(),
             "deleted": pa.bool_(), "delete_error": pa.string()}
_TAKEOVER_RE = re.compile(r"[^/]+\.lease\.takeover-[0-9a-f]{32}")
_REJECTS_RE = re.compile(r"(?P<job>[^/]+)/(?P<partition>[^/]+)\.parquet")


@dataclass
class Orphan:
    uri: str
    size: int
    age_ms: int


@dataclass
class Debris:
    uri: str
    kind: str  # lease-temporary | temporary | superseded-rejects | append-staging
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
    kind: str  # log | index | timeindex | batchindex


@dataclass
class ScrubReport:
    """Everything one scrub found and did: `totals` for the JSON report, `side_files` for every finding."""

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

    def totals(self) -> dict[str, Any]:
        """The JSON report's part: what was checked, and counts and bytes by finding (the side file,
        `side_files`, lists every one)."""
        def count(items: list[Debris] | list[MissingObject] | list[SizeMismatch]) -> dict[str, Any]:
            return {"count": len(items), "by_kind": dict(sorted(Counter(item.kind for item in items).items()))}

        return {"root": self.root, "catalog": self.catalog, "dry_run": self.dry_run, "grace_ms": self.grace_ms,
                "objects_listed": self.objects_listed, "live_segments": self.live_segments,
                "orphans": {"count": len(self.orphans), "bytes": sum(o.size for o in self.orphans)},
                "orphans_within_grace": self.orphans_within_grace,
                "debris": count(self.debris) | {"bytes": sum(d.size for d in self.debris)},
                "missing": count(self.missing), "size_mismatches": count(self.size_mismatches),
                "deleted": len(self.deleted), "delete_failed": len(self.delete_failed),
                "delete_requests": self.delete_requests}

    def side_files(self) -> dict[str, pa.Table]:
        """The run report's Parquet side file: one row per finding (orphan, debris, missing,
        size-mismatch) with its object, segment, sizes, age and, for what scrub deletes, the outcome."""
        deleted, failed = set(self.deleted), self.delete_failed
        rows = ([("orphan", None, None, o.uri, o.size, None, o.age_ms, o.uri in deleted, failed.get(o.uri))
                 for o in self.orphans]
                + [("debris", d.kind, None, d.uri, d.size, None, d.age_ms, d.uri in deleted, failed.get(d.uri))
                   for d in self.debris]
                + [("missing", m.kind, m.segment, m.key, None, None, None, False, None) for m in self.missing]
                + [("size-mismatch", b.kind, b.segment, b.key, b.object_size, b.catalog_size, None, False, None)
                   for b in self.size_mismatches])
        columns = list(zip(*rows, strict=True)) or [()] * len(_FINDINGS)
        return {"findings": pa.table([pa.array(values, type) for values, type in zip(columns, _FINDINGS.values(),
                                                                                      strict=True)],
                                     names=list(_FINDINGS))}


def is_klake_object(root: str, info: ObjectInfo) -> bool:
    """True for objects klake writes under `root`: object-layout segment files (and their temporaries)."""
    relative = info.uri[len(root) + 1:]
    parts = relative.split("/")
    if len(parts) != 2 or parse_partition_dir(parts[0]) is None:
        return False
    temporary = TEMPORARY_NAME.fullmatch(parts[1])
    name = temporary["name"] if temporary else parts[1]
    return parse_object_segment_name(name) is not None


def _debris(root: str, old: list[ObjectInfo], catalog: Catalog, now: int) -> list[Debris]:
    """Of unreferenced objects past the grace period: lease temporaries and takeover markers, any other
    temporary file of a killed writer (a topic's settings, a mirror's replica marker or offset map), rejects
    files of partitions their job id never committed (the attempt that wrote them died before its
    commit; the job ledger is asked once per job id), and staged append rows (their attempt is over: the
    grace period exceeds any job's run)."""
    found: list[Debris] = []
    rejects: dict[str, list[tuple[TopicPartition, ObjectInfo]]] = {}
    for info in old:
        folder, _, rest = info.uri[len(root) + 1:].partition("/")
        if folder == "_leases" and (_TAKEOVER_RE.fullmatch(rest) or TEMPORARY_NAME.fullmatch(rest)):
            found.append(Debris(info.uri, "lease-temporary", info.size, now - info.mtime_ms))
        elif TEMPORARY_NAME.fullmatch(info.name):
            found.append(Debris(info.uri, "temporary", info.size, now - info.mtime_ms))
        elif folder == STAGING_DIR:
            found.append(Debris(info.uri, "append-staging", info.size, now - info.mtime_ms))
        elif (folder == REJECTS_DIR and (match := _REJECTS_RE.fullmatch(rest))
              and (tp := parse_partition_dir(match["partition"])) is not None):
            rejects.setdefault(match["job"], []).append((tp, info))
    for job, files in rejects.items():
        committed = catalog.committed_partitions(job, [tp for tp, _ in files])
        found += [Debris(info.uri, "superseded-rejects", info.size, now - info.mtime_ms)
                  for tp, info in files if tp not in committed]
    return found


_KINDS = (("log", "log_key", "size_bytes"), ("index", "index_key", "index_size_bytes"),
          ("timeindex", "timeindex_key", "timeindex_size_bytes"),
          ("batchindex", "batchindex_key", "batchindex_size_bytes"))
_KEY_COLUMNS = ("topic", "partition", "segment_id",
                *(c for kind in _KINDS for c in kind[1:] if c != "batchindex_key"))


def _live_keys(catalog: Catalog) -> pa.Table:
    """The live rows' object keys and recorded sizes, as Arrow (only the columns scrub reads); a row's
    `batchindex_key` is null where it has no batch index."""
    tps = [(tp.topic, tp.partition) for tp in catalog.partitions()]
    live = catalog.rows_table(tps, LIVE_STATES, _KEY_COLUMNS)
    return live.append_column("batchindex_key", batch_index_keys(live["timeindex_key"], live["batchindex_size_bytes"]))


def _referenced(live: pa.Table) -> pa.Array:
    """Every object key a live row references, as one string column (three or four per row)."""
    return pc.drop_null(pa.concat_arrays([live[column].combine_chunks() for _, column, _ in _KINDS]))


def _outside_listing(referenced: pa.Array, store: Store) -> list[ObjectInfo]:
    """Objects referenced from outside the store's root (e.g. Kafka-layout imports), listed once per directory."""
    outside = referenced.filter(pc.invert(within_root(store.root, referenced)))
    dirs = pc.unique(pc.replace_substring_regex(outside, r"/[^/]*$", "")).to_pylist()
    return [info for d in sorted(dirs) for info in store.list_objects(d)]


def _check_rows(live: pa.Table, uris: pa.Array, sizes: pa.Array, report: ScrubReport) -> None:
    """Live rows whose objects are missing, or whose size is not the row's (a row of an older catalog records
    no sidecar size: null, not compared): a set lookup per key column over the listing (Arrow); objects are
    built only for the rows at fault, in row order."""
    found = {column: pc.index_in(live[column], value_set=uris) for _, column, _ in _KINDS}
    bad = None
    for _, column, size in _KINDS:
        missing = pc.and_(pc.is_null(found[column]), pc.is_valid(live[column]))
        differs = pc.fill_null(pc.not_equal(pc.take(sizes, found[column]), live[size]), False)
        bad = pc.or_(missing, differs) if bad is None else pc.or_(bad, pc.or_(missing, differs))
    faulty = np.flatnonzero(np.asarray(bad.to_numpy(zero_copy_only=False)))
    rows = live.take(faulty).to_pylist()
    at = {column: found[column].take(faulty).to_pylist() for _, column, _ in _KINDS}
    for i, row in enumerate(rows):
        name = f"{row['topic']}-{row['partition']}/{row['segment_id']}"
        for kind, column, size in _KINDS:
            key, where, expected = row[column], at[column][i], row[size]
            if key is None:
                continue
            if where is None:
                report.missing.append(MissingObject(segment=name, kind=kind, key=key))
            elif expected is not None and sizes[where].as_py() != expected:
                report.size_mismatches.append(SizeMismatch(segment=name, key=key, catalog_size=expected,
                                                           object_size=sizes[where].as_py(), kind=kind))


def scrub(store: Store, catalog: Catalog, grace_ms: int = DEFAULT_GRACE_MS, dry_run: bool = False,
          now: int | None = None) -> ScrubReport:
    """Find orphans and broken rows under the store's root; delete the orphans unless `dry_run`."""
    if grace_ms < 0:
        raise ValueError(f"grace period must be >= 0 ms, got {grace_ms}")
    root = store.root
    report = ScrubReport(root=root, catalog=catalog.uri, dry_run=dry_run, grace_ms=grace_ms)
    if not dry_run:
        catalog.migrate_keys()
    listed = store.list_objects()
    now = time.time_ns() // 1_000_000 if now is None else now
    report.objects_listed = len(listed)
    live = _live_keys(catalog)
    report.live_segments = live.num_rows
    referenced = _referenced(live)
    objects = listed + _outside_listing(referenced, store)
    uris = pa.array([info.uri for info in objects], pa.string())
    _check_rows(live, uris, pa.array([info.size for info in objects], pa.int64()), report)
    unreferenced = np.flatnonzero(~np.asarray(pc.is_in(uris.slice(0, len(listed)), value_set=referenced)
                                              .to_numpy(zero_copy_only=False)))
    old_others = []
    for i in unreferenced.tolist():
        info = listed[i]
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
    referenced_now = _referenced(_live_keys(catalog))
    still = pc.is_in(pa.array([o.uri for o in report.orphans], pa.string()), value_set=referenced_now).to_pylist()
    report.orphans = [o for o, taken in zip(report.orphans, still, strict=True) if not taken]
    result = store.delete_many([o.uri for o in report.orphans] + [d.uri for d in report.debris])
    report.deleted, report.delete_failed, report.delete_requests = result.deleted, result.failed, result.requests
    return report
