"""A sorted sidecar object (`.index`, `.timeindex`) searched a page at a time, for lookups that read what
Kafka's own lookup touches and little more: one no larger than a page is read whole; a larger one is
searched page by page, each probe a page centred on the slot found by interpolating the target between
the entries already known (one probe for evenly spread data), as a binary search would. Given the
object's size (the catalog row's), the first probe is the first read; without it, the first read is the
last page, Kafka's "warm section" (KAFKA-7283: recent lookups land there), plus a HEAD for the size if
the object is larger. The pages read are kept, so a next target near the same place costs no request.
A page that breaks the index's rules or is out of order with the others raises `Unpaged`: the caller
reads the sidecar whole (and checks it against the log).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.index.common import clamp
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from layouts.store.bound import Store

INDEX_PAGE_BYTES = 4096
"""A sidecar is read in pages of whole entries of at most this many bytes (an OS page, which is what
Kafka's memory-mapped index lookups touch)."""


class Unpaged(Exception):
    """A sidecar page did not check out: the sidecar is to be read whole (and checked against the log)."""


class PagedSidecar:
    """One `.index` or `.timeindex` object read a page at a time, as a sorted list of (key, value)
    entries: (relative offset, position) or (timestamp, relative offset).

    `parse` loads the bytes of whole entries with the index's own rules (`OffsetIndex.load`,
    `TimeIndex.load`) and returns its key and value columns, or raises `Unpaged` if they break them.
    `size` is the object's length from its catalog row (None if the row does not say); `low_key` and
    `high_key` bound the keys (no entry's key is below the first or at or above the second), for
    interpolating before the first and after the last entry known.
    """

    def __init__(self, uri: str, store: Store, entry_size: int,
                 parse: Callable[[bytes], tuple[np.ndarray, np.ndarray]], size: int | None, low_key: int,
                 high_key: int) -> None:
        self.uri, self.store, self.entry_size, self.parse = uri, store, entry_size, parse
        self.size, self.low_key, self.high_key = size, low_key, high_key
        self.page_entries = INDEX_PAGE_BYTES // entry_size
        self.entries: int | None = None
        self.blocks: list[tuple[int, np.ndarray, np.ndarray]] = []  # (first slot, keys, values), by slot

    def around(self, key: int, after: int) -> tuple[tuple[int, int] | None, list[tuple[int, int]]]:
        """The floor entry of `key` (the last entry with key <= `key`; None if none) and the `after`
        entries following it (fewer at the end of the file)."""
        _, floor, following = self.locate(key, after)
        return floor, following

    def locate(self, key: int, after: int) -> tuple[int, tuple[int, int] | None, list[tuple[int, int]]]:
        """`around`, with the floor entry's slot first (-1 if none)."""
        if self.entries is None:
            self._open()
        while True:
            low, high = self._bracket(key)
            if high == low + 1:
                break
            self._load_around(self._probe(key, low, high), low, high)
        wanted = range(max(low, 0), min(low + after + 1, self.entries))
        for slot in wanted:
            if self._entry(slot) is None:
                self._load_around(slot, slot - 1, self._next_known(slot))
        entries = [self._entry(slot) for slot in wanted]
        return low, (entries[0] if low >= 0 else None), entries[1 if low >= 0 else 0:]

    def _open(self) -> None:
        """Know the entry count. With the size from the row, a file larger than a page is not read yet
        (the search's first probe is its first read); else the last page is read, which is the whole
        file when it is no larger, and otherwise its size (one HEAD) places it."""
        span = self.page_entries * self.entry_size
        if self.size is not None and (self.size > span or self.size == 0):
            if self.size % self.entry_size:
                raise Unpaged
            self.entries = self.size // self.entry_size
            return
        tail = self.store.read(self.uri, -span)
        if len(tail) < span:
            self.entries = len(tail) // self.entry_size
            if len(tail) % self.entry_size:
                raise Unpaged
            self._add(0, tail)
            return
        info = self.store.info(self.uri)
        if info is None or info.size % self.entry_size:
            raise Unpaged
        self.entries = info.size // self.entry_size
        self._add(self.entries - self.page_entries, tail)

    def _load_around(self, slot: int, low: int, high: int) -> None:
        """Read a page of entries holding unread `slot`, centred on it, within the unread slots (low, high)."""
        first = max(low + 1, min(slot - self.page_entries // 2, high - self.page_entries))
        last = min(first + self.page_entries, high, self.entries)
        data = self.store.read(self.uri, first * self.entry_size, last * self.entry_size)
        if len(data) != (last - first) * self.entry_size:  # the object is shorter than its row says
            raise Unpaged
        self._add(first, data)

    def _next_known(self, slot: int) -> int:
        """The first read slot after `slot`, or the entry count."""
        return min([first for first, _, _ in self.blocks if first > slot], default=self.entries)

    def _add(self, first: int, data: bytes) -> None:
        """Keep a run of entries starting at slot `first`, if it is in order with every entry known."""
        keys, values = self.parse(data)
        if keys.shape[0] != len(data) // self.entry_size:
            raise Unpaged
        end = first + keys.shape[0]
        before = [b for b in self.blocks if b[0] + b[1].shape[0] <= first]
        after = [b for b in self.blocks if b[0] >= end]
        if keys.shape[0] and ((before and (before[-1][1][-1] >= keys[0] or before[-1][2][-1] > values[0]))
                              or (after and (after[0][1][0] <= keys[-1] or after[0][2][0] < values[-1]))):
            raise Unpaged
        self.blocks = sorted([*self.blocks, (first, keys, values)], key=lambda b: b[0])

    def _entry(self, slot: int) -> tuple[int, int] | None:
        for first, keys, values in self.blocks:
            if first <= slot < first + keys.shape[0]:
                return int(keys[slot - first]), int(values[slot - first])
        return None

    def _bracket(self, key: int) -> tuple[int, int]:
        """(the last known slot with key <= `key`, or -1; the first known slot with key > `key`, or the
        entry count): the floor lies in [low, high) and every slot strictly between is unread."""
        low, high = -1, self.entries
        for first, keys, _ in self.blocks:
            cut = int(np.searchsorted(keys, key, side="right"))
            if cut:
                low = max(low, first + cut - 1)
            if cut < keys.shape[0]:
                high = min(high, first + cut)
        return low, high

    def _probe(self, key: int, low: int, high: int) -> int:
        """An unread slot strictly between `low` and `high`, placed by interpolating `key` between them
        (the key bounds stand for the entries before the first slot and after the last)."""
        low_key = self._entry(low)[0] if low >= 0 else self.low_key
        high_key = self._entry(high)[0] if high < self.entries else self.high_key
        share = (key - low_key) / max(high_key - low_key, 1)
        return clamp(low + 1 + int(share * (high - low - 1)), low + 1, high - 1)


def offset_entries(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """A `.index` page's (relative offset, position) columns, by `OffsetIndex.load`'s rules."""
    loaded = OffsetIndex.load(data, 0)
    if not loaded.ok:
        raise Unpaged
    return loaded.index.relative_offsets, loaded.index.positions


def time_entries(floor: int) -> Callable[[bytes], tuple[np.ndarray, np.ndarray]]:
    """A `.timeindex` page's (timestamp, relative offset) columns, by `TimeIndex.load`'s rules (`floor`:
    the topic's `min_timestamp`)."""
    def parse(data: bytes) -> tuple[np.ndarray, np.ndarray]:
        loaded = TimeIndex.load(data, 0, min_timestamp=floor)
        if not loaded.ok:
            raise Unpaged
        return loaded.index.timestamps, loaded.index.relative_offsets
    return parse
