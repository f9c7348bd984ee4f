"""Scrub's columnar reconciliation (referenced keys from Arrow columns, set lookups over the listing) against
a per-row brute force on generated catalogs and stores: live rows with objects present, missing or of
the wrong size, rows that are not live, and stray segment files."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.catalog.schema import SegmentRow, SegmentState
from engine.ops.catalog_table import Catalog
from engine.ops.scrub import scrub
from kernel.names import TopicPartition
from layouts.object_layout import object_segment_keys
from layouts.store import list_objects
from layouts.store.bound import Store
from tests.catalog_rows import add_segments, make_row, transition

FUTURE = 2**62  # every object is past any grace period

_OBJECTS = st.sampled_from(["all", "all", "no-log", "no-index", "no-timeindex", "short-log", "none"])


@st.composite
def stores(draw: st.DrawFn) -> list[tuple[SegmentRow, str, bool]]:
    """Rows of two partitions with what is stored of each, and whether the row stays live."""
    out = []
    for topic, partition in (("a", 0), ("b", 1)):
        base = 0
        for k in range(draw(st.integers(0, 5))):
            out.append((make_row(topic, partition, base, base + 10, segment_id=f"{partition:02x}{k:014x}",
                                 size=draw(st.integers(1, 50))), draw(_OBJECTS), draw(st.booleans())))
            base += 10
    return out


def brute_force(rows: list[tuple[SegmentRow, str, bool]], root: str) -> dict[str, set]:
    """Per row, by hand: what is referenced, missing, mis-sized; what under the root is an orphan."""
    listing = {info.uri: info.size for info in list_objects(root)}
    referenced = set()
    missing, sizes = set(), set()
    for row, _, live in rows:
        if not live:
            continue
        name = f"{row.topic}-{row.partition}/{row.segment_id}"
        for kind, key in (("log", row.log_key), ("index", row.index_key), ("timeindex", row.timeindex_key)):
            referenced.add(key)
            if key not in listing:
                missing.add((name, kind, key))
            elif kind == "log" and listing[key] != row.size_bytes:
                sizes.add((name, key, row.size_bytes, listing[key]))
    return {"orphans": {uri for uri in listing if uri not in referenced}, "missing": missing, "sizes": sizes,
            "live": sum(live for _, _, live in rows)}


@settings(max_examples=25, deadline=None)
@given(stores(), st.integers(0, 3))
def test_scrub_matches_a_per_row_brute_force(rows: list[tuple[SegmentRow, str, bool]], strays: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = str(Path(tmp) / "root")
        catalog = Catalog.create(Store(str(Path(tmp) / "catalog")))
        placed = []
        for row, stored, live in rows:
            keys = object_segment_keys(root, TopicPartition(row.topic, row.partition), row.base_offset, row.segment_id)
            row = replace(row, log_key=keys.log, index_key=keys.index, timeindex_key=keys.timeindex)
            placed.append((row, stored, live))
            for kind, key in (("log", keys.log), ("index", keys.index), ("timeindex", keys.timeindex)):
                if stored == "none" or stored == f"no-{kind}":
                    continue
                Path(key).parent.mkdir(parents=True, exist_ok=True)
                Path(key).write_bytes(b"x" * (row.size_bytes - (stored == "short-log") if kind == "log" else 8))
        for k in range(strays):
            keys = object_segment_keys(root, TopicPartition("a", 0), 1_000 + k, f"ff{k:014x}")
            Path(keys.log).parent.mkdir(parents=True, exist_ok=True)
            Path(keys.log).write_bytes(b"stray")
        Path(root).mkdir(parents=True, exist_ok=True)
        if placed:
            add_segments(catalog, [row for row, _, _ in placed])
            gone = [row.ref for row, _, live in placed if not live]
            if gone:
                transition(catalog, gone, SegmentState.DELETE_STARTED)
        expected = brute_force(placed, root)
        report = scrub(Store(root), catalog, grace_ms=0, dry_run=True, now=FUTURE)
        assert report.live_segments == expected["live"]
        assert {o.uri for o in report.orphans} == expected["orphans"]
        assert {(m.segment, m.kind, m.key) for m in report.missing} == expected["missing"]
        assert {(s.segment, s.key, s.catalog_size, s.object_size) for s in report.size_mismatches} == expected["sizes"]
