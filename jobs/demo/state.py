"""The demo's record of its runs, kept on its store beside the data (demo-state.json): the plan it ran,
which lets a re-run go on and refuses a store holding anything else, and every segment's fate (the
timeline's bars), merged across runs since a re-run sees only the survivors."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict

from engine.catalog.schema import SegmentRow
from jobs.demo.generator import DemoPlan
from jobs.demo.pipeline import Snapshots, Storage
from jobs.demo.timeline import COMPACTED, KEPT, OUTPUT, RETENTION, SegmentBar
from kernel.errors import KlakeError
from layouts.store.bound import Store


def segment_bars(snaps: Snapshots, held: Sequence[SegmentRow]) -> list[SegmentBar]:
    """Each segment of the log before retention by fate, plus what compaction wrote (by object key)."""
    after_retention = {r.log_key for r in snaps.after_retention}
    after_compaction = {r.log_key for r in snaps.after_compaction}
    held_keys = {r.log_key for r in held}

    def bar(row: SegmentRow, fate: str) -> SegmentBar:
        return SegmentBar(f"{row.topic}-{row.partition}", row.log_key, row.base_offset, row.next_offset,
                          row.base_timestamp, row.largest_timestamp, fate, row.log_key in held_keys)

    def fate(row: SegmentRow) -> str:
        if row.log_key not in after_retention:
            return RETENTION
        return KEPT if row.log_key in after_compaction else COMPACTED

    bars = [bar(row, fate(row)) for row in snaps.before_retention]
    known = {r.log_key for r in snaps.before_retention}
    bars += [bar(row, OUTPUT) for row in snaps.after_compaction if row.log_key not in known]
    return [b for b in bars if b.first_ms >= 0]


def merge_bars(previous: Sequence[SegmentBar], current: Sequence[SegmentBar]) -> list[SegmentBar]:
    """An earlier run's fates stay (a re-run sees only the survivors) unless this run changed them."""
    merged = {b.log_key: b for b in previous}
    for bar in current:
        if bar.log_key not in merged or bar.fate != KEPT:
            merged[bar.log_key] = bar
    return sorted(merged.values(), key=lambda b: (b.partition, b.base_offset, b.fate == OUTPUT))


def claim_store(storage: Storage, store: Store, plan: DemoPlan) -> list[SegmentBar] | None:
    """The segments an earlier run of this demo recorded (None on a fresh store), after recording this
    run's plan first, so that a run that dies half-way is re-run rather than refused; a store holding
    anything else is refused (the demo would mix its data in); `store` reaches `storage` with its settings."""
    if store.info(storage.state_uri) is not None:
        state = json.loads(store.read(storage.state_uri))
        if state.get("plan") != asdict(plan):
            raise KlakeError(f"{storage.base} holds a demo run with other settings {state.get('plan')}; "
                             "remove it or choose another --out")
        previous = [SegmentBar(**b) for b in state.get("bars", [])]
    elif store.list_objects(storage.base):
        raise KlakeError(f"{storage.base} holds data this demo did not write; remove it or choose another --out")
    else:
        previous = None
    save_state(storage, store, plan, previous or [])
    return previous


def save_state(storage: Storage, store: Store, plan: DemoPlan, bars: Sequence[SegmentBar]) -> None:
    store.write(storage.state_uri, json.dumps({"plan": asdict(plan), "bars": [asdict(b) for b in bars]},
                                              indent=1).encode())
