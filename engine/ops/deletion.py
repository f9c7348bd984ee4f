"""The two-phase delete of segments (README, "Kafka compatibility"), shared by retention, truncation
and compaction: rows are marked DELETE_STARTED (they leave the live log at that commit), the objects
klake owns are deleted, then the rows are removed. A crash in between leaves DELETE_STARTED rows that
the next job on the partition finishes (`engine.ops.run`). Kafka-layout `.log` objects imported
in place belong to the broker copy and are left where they are (reported).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.catalog.schema import Layout, SegmentRow
from engine.ops.catalog_table import Catalog
from layouts.store import StorageOptions, delete_objects


@dataclass
class Cleanup:
    """What the delete phases did: objects deleted, objects left (not klake's), failures, commits."""

    deleted_objects: list[str] = field(default_factory=list)
    left_in_place: list[str] = field(default_factory=list)
    failed_deletes: dict[str, str] = field(default_factory=dict)
    commit_versions: list[int] = field(default_factory=list)

    def committed(self, version: int | None) -> None:
        if version is not None:
            self.commit_versions.append(version)


def _owned_keys(root: str, row: SegmentRow) -> tuple[list[str], list[str]]:
    """(keys klake may delete, keys it must leave): a Kafka-layout `.log` is the broker copy's."""
    keys = [row.log_key, row.index_key, row.timeindex_key]
    owned = [k for k in keys if row.layout == Layout.OBJECT or k.startswith(root + "/")]
    return owned, [k for k in keys if k not in owned]


def delete_and_forget(catalog: Catalog, root: str, rows: list[SegmentRow], options: StorageOptions | None,
                       job_id: str, cleanup: Cleanup) -> None:
    owned, kept = [], []
    for row in rows:
        mine, theirs = _owned_keys(root, row)
        owned += mine
        kept += theirs
    result = delete_objects(sorted(set(owned)), options)
    failed = {k: why for k, why in result.failed.items() if "NoSuchKey" not in why and "No such file" not in why}
    cleanup.deleted_objects += result.deleted
    cleanup.left_in_place += kept
    cleanup.failed_deletes.update(failed)
    gone = [r.ref for r in rows if not any(k in failed for k in _owned_keys(root, r)[0])]
    if gone:
        cleanup.committed(catalog.remove_deleted(gone, job_id).version)
