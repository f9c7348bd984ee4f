"""The two-phase delete of segments (README, "Kafka compatibility"), shared by retention, truncation
and compaction: rows are marked DELETE_STARTED (they leave the live log at that commit), the objects
the root owns are deleted, then the rows are removed. A crash in between leaves DELETE_STARTED rows that
the next job on the partition finishes (`engine.ops.run`).

A root owns the objects under it and only those (issue 26, `layouts.root_keys`): an object outside it
(a Kafka-layout `.log` imported in place belongs to the broker's copy; a key of another root, left by a
copied root's catalog the migration could not re-anchor) is external. Its row still leaves the catalog,
but the object stays where it is and is reported (`Cleanup.left_in_place`), unless the run opts in
(`allow_external`: `--allow-external-deletes`), which is reported too (`Cleanup.external_deleted`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.schema import SegmentRef
from engine.ops.catalog_table import Catalog
from layouts.object_layout import batch_index_keys
from layouts.root_keys import within_root
from layouts.store.bound import Store


@dataclass
class Cleanup:
    """What the delete phases did: objects deleted (of which `external_deleted` outside the root, with the
    run's opt-in), external objects left in place, failures, commits."""

    deleted_objects: list[str] = field(default_factory=list)
    left_in_place: list[str] = field(default_factory=list)
    external_deleted: list[str] = field(default_factory=list)
    failed_deletes: dict[str, str] = field(default_factory=dict)
    commit_versions: list[int] = field(default_factory=list)

    def committed(self, version: int | None) -> None:
        if version is not None:
            self.commit_versions.append(version)


_KEYS = ("log_key", "index_key", "timeindex_key")
DELETE_COLUMNS = ("topic", "partition", "segment_id", "state", *_KEYS, "batchindex_size_bytes")
"""The catalog columns the two-phase delete reads of the rows it deletes (the state: which rows an earlier run
left DELETE_STARTED; the batch index size: whether a row has a `.batchindex` beside its `.timeindex`)."""


def delete_and_forget(catalog: Catalog, store: Store, rows: pa.Table, job_id: str, cleanup: Cleanup,
                      allow_external: bool = False) -> None:
    """Delete the objects of `rows` (DELETE_STARTED catalog rows, as Arrow) that the root owns (all of them
    with `allow_external`), then remove the rows whose deleted objects are all gone; a row with a failed
    delete stays DELETE_STARTED for the next run. A row's objects are Kafka's three files and its
    `.batchindex` if it has one (null key: none)."""
    keys = [rows[k] for k in _KEYS] + [batch_index_keys(rows["timeindex_key"], rows["batchindex_size_bytes"])]
    mine = [within_root(store.root, key) for key in keys]  # null where a row has no such key
    owned = [pc.or_(m, pc.is_valid(key)) if allow_external else m for key, m in zip(keys, mine, strict=True)]
    result = store.delete_many(sorted(set(_concat(key.filter(o) for key, o in zip(keys, owned, strict=True)))))
    failed = {k: why for k, why in result.failed.items() if "NoSuchKey" not in why and "No such file" not in why}
    outside = set(_concat(key.filter(pc.invert(m)) for key, m in zip(keys, mine, strict=True)))
    cleanup.deleted_objects += result.deleted
    cleanup.external_deleted += [uri for uri in result.deleted if uri in outside]
    cleanup.left_in_place += [] if allow_external else sorted(outside)
    cleanup.failed_deletes.update(failed)
    if failed:
        lost = pa.array(list(failed), pa.string())
        kept = [pc.fill_null(pc.and_(o, pc.is_in(key, value_set=lost)), False) for key, o in zip(keys, owned, strict=True)]
        rows = rows.filter(pc.invert(functools.reduce(pc.or_, kept)))
    if rows.num_rows:
        columns = (rows[c].to_pylist() for c in ("topic", "partition", "segment_id"))
        gone = [SegmentRef(*key) for key in zip(*columns, strict=True)]
        cleanup.committed(catalog.remove_deleted(gone, job_id).version)


def _concat(columns: Iterable[pa.ChunkedArray]) -> list[str]:
    return [key for column in columns for key in column.to_pylist()]
