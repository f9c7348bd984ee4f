"""Migrating the keys of a catalog written before keys were relative to the root (issue 26).

Such a catalog stores every key absolute. Its rows migrate on the catalog's first write
(`Catalog.migrate_keys`), by this rule, for every key of every row:

- a key under the current root becomes relative to it: the root owns the object;
- a key under an *earlier root* of this catalog whose copy exists under the current root (same relative
  path, and the size the row records) is re-anchored: it becomes that relative path. An earlier root is
  the prefix of an object-layout row's `.log` key: klake always wrote those as
  `{root}/{topic}-{partition}/{file}`, so the prefix is the root the row was written at. A prefix other
  than the current root means the root was copied (`cp -r A B`, `aws s3 sync`) with its catalog, and the
  copy's catalog still names the original's objects; re-anchoring makes the copy read and delete its own
  objects, as a catalog written with relative keys would;
- any other key stays absolute and its row external: a segment imported in place from a broker's log dir,
  or an earlier root's object that has no identical copy here (a partial copy). No job deletes an
  external object unless its run opts in, so a copy never deletes its original's data, whatever the
  migration could not prove.

Only existence proves a copy: a key is never re-anchored on its name alone, since a missing copy would make
the row unreadable, and a catalog shared by roots that were never copies would otherwise delete another
root's objects. Each partition directory a candidate lies in is listed once.
"""

from __future__ import annotations

import re

import pyarrow as pa

from engine.catalog.schema import EXTERNAL_COLUMN, KEY_COLUMNS, Layout
from layouts.object_layout import batch_index_key
from layouts.root_keys import external, stored_keys, within_root
from layouts.store.bound import Store

MIGRATION_COLUMNS = ("topic", "partition", "segment_id", "layout", *KEY_COLUMNS, "size_bytes", "index_size_bytes",
                     "timeindex_size_bytes", "batchindex_size_bytes")
"""What the migration reads of a legacy row: its keys, and what proves a copy (layout, sizes)."""
_SIZES = {"log_key": "size_bytes", "index_key": "index_size_bytes", "timeindex_key": "timeindex_size_bytes"}
_OBJECT_KEY = re.compile(r"(?P<root>.+)/(?P<dir>[^/]+)/[^/]+")


def earlier_roots(legacy: pa.Table, root: str) -> set[str]:
    """The roots other than `root` that object-layout rows were written at: their `.log` key's prefix before
    `{topic}-{partition}/{file}`."""
    found = set()
    for layout, topic, partition, key in zip(*(legacy[c].to_pylist() for c in ("layout", "topic", "partition",
                                                                               "log_key")), strict=True):
        match = _OBJECT_KEY.fullmatch(key)
        if layout == Layout.OBJECT and match and match["dir"] == f"{topic}-{partition}" and match["root"] != root:
            found.add(match["root"])
    return found


class _Listing:
    """The objects of the directories asked about, each listed once: URI -> size."""

    def __init__(self, store: Store) -> None:
        self.store, self.sizes, self.listed = store, {}, set()

    def size(self, uri: str) -> int | None:
        directory = uri.rsplit("/", 1)[0]
        if directory not in self.listed:
            self.listed.add(directory)
            self.sizes.update((info.uri, info.size) for info in self.store.list_objects(directory))
        return self.sizes.get(uri)


def _re_anchored(uri: str, size: int | None, roots: set[str], root: str, listing: _Listing) -> str:
    """`uri` moved under `root` if it lies under an earlier root and its copy is there (of `size` bytes,
    when known); `uri` itself otherwise."""
    for earlier in roots:
        if uri.startswith(earlier + "/"):
            copy = root + uri[len(earlier):]
            found = listing.size(copy)
            if found is not None and (size is None or found == size):
                return copy
    return uri


def migrated_keys(legacy: pa.Table, store: Store) -> pa.Table:
    """For legacy rows (`MIGRATION_COLUMNS`, keys as stored: absolute), their reference, the keys to store
    (module docstring) and `external`, relative to `store`'s root."""
    root = store.root
    roots, listing = earlier_roots(legacy, root), _Listing(store)
    batch_sizes = legacy["batchindex_size_bytes"].to_pylist()
    columns = {}
    for column in KEY_COLUMNS:
        uris, sizes = legacy[column].to_pylist(), legacy[_SIZES[column]].to_pylist()
        owned = within_root(root, legacy[column]).to_pylist()
        moved = []
        for uri, size, mine, batch in zip(uris, sizes, owned, batch_sizes, strict=True):
            new = uri if mine or not roots else _re_anchored(uri, size, roots, root, listing)
            if column == "timeindex_key" and new != uri and batch is not None \
                    and listing.size(batch_index_key(new)) != batch:  # its `.batchindex` beside it must be copied too
                new = uri
            moved.append(new)
        columns[column] = pa.array(moved, pa.string())
    return pa.table({"topic": legacy["topic"], "partition": legacy["partition"], "segment_id": legacy["segment_id"],
                     **{c: stored_keys(root, columns[c]) for c in KEY_COLUMNS},
                     EXTERNAL_COLUMN: external(root, *columns.values())})
