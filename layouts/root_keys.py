"""Object keys relative to a root: the one rule for how the catalog names a segment's objects (issue 26).

A root owns the objects under it. The catalog stores the key of such an object relative to the root
(`payments-0/00000000000000000000-ab12.log`), as Delta Lake stores its data files relative to the table,
so that a root copied whole (`cp -r`, `aws s3 sync`) is a root of its own: its catalog names its own
objects, never the original's. An object outside the root (a segment imported in place from a broker's
log dir) keeps its absolute key and is *external*: no job deletes it unless its run opts in
(`--allow-external-deletes`, `engine.ops.deletion`). Stored keys become URIs here and nowhere else
(`engine.ops.catalog_table` applies it to every row it reads and writes).
"""

from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.compute as pc

from layouts.store import normalize_uri

Keys = pa.Array | pa.ChunkedArray
_ABSOLUTE = r"^(/|[A-Za-z][A-Za-z0-9+.-]*://)"


def within_root(root: str, uris: Keys) -> Keys:
    """Whether each URI lies under `root` (null where a URI is null): the objects the root owns."""
    return pc.starts_with(uris, normalize_uri(root) + "/")


def stored_keys(root: str, uris: Keys) -> Keys:
    """The keys the catalog stores for object URIs: relative to `root` for an object under it, the URI
    itself for an external one."""
    root = normalize_uri(root)
    return pc.if_else(within_root(root, uris), pc.utf8_slice_codeunits(uris, len(root) + 1), uris)


def resolved_keys(root: str, keys: Keys) -> Keys:
    """The URIs of stored keys: a relative key under `root`, an absolute one (external, or written before
    keys were relative) as it is. A column of one kind (the common case) is not chosen row by row. The root
    is prefixed as a compute option, not a Python string argument: pyarrow converts such an argument to a
    scalar and that conversion imports pandas (~0.5 s), which the streaming source's driver process, started
    afresh for each query, would otherwise pay on its first catalog read (issue 29's benchmark)."""
    absolute = pc.match_substring_regex(keys, _ABSOLUTE)
    count = pc.sum(absolute).as_py() or 0
    if count == len(keys) - keys.null_count:
        return keys
    prefix = (normalize_uri(root) + "/").replace("\\", "\\\\")  # a literal RE2 replacement
    resolved = pc.replace_substring_regex(keys, "^", prefix, max_replacements=1)
    return resolved if count == 0 else pc.if_else(absolute, keys, resolved)


def external(root: str, *uris: Keys) -> Keys:
    """Whether a row whose objects are at `uris` (one column per kind of object, none null) references an
    object outside `root`: its keys stay absolute, and no job deletes that object unless its run opts in."""
    owned = [within_root(root, column) for column in uris]
    return pc.invert(functools.reduce(pc.and_, owned))
