"""Times for people: the one place klake reads a time a person typed and writes a time or a duration
for a person to read.

Inside klake (records, indexes, catalog rows, JSON reports) a time is int64 epoch milliseconds, as in
Kafka. At the edges:
- `parse_time`: what a person types for a time (`--now`, `--from`, `--to`, `--timestamp`, the
  data source's options): epoch milliseconds or ISO-8601. An ISO time without a zone is UTC, never
  the machine's zone, so one command gives one answer wherever it runs. Before 1970 a time is
  negative; whether a topic accepts it is `engine.log.topic_config.min_timestamp`'s rule (KIP-228).
- `format_time`: ISO-8601 UTC, `2026-11-02T00:00:00Z`, with milliseconds only when non-zero.
- `format_duration`: humanize's words, "16 minutes"; `precise=True` down to the millisecond
  ("7 days and 1 millisecond") where a boundary is being explained.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import humanize

from kernel.errors import KlakeError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INT64 = range(-(2**63), 2**63)
_ONE_MS = timedelta(milliseconds=1)


class InvalidTimeError(KlakeError, ValueError):
    """Text that is neither epoch milliseconds nor an ISO-8601 time."""


def parse_time(text: str) -> int:
    """Epoch milliseconds from `text`: an integer (ms since 1970-01-01T00:00:00Z, negative before it)
    or ISO-8601 (`2026-11-02`, `2026-11-02T10:00:00.250Z`, `2026-11-02T05:00:00-05:00`; no zone = UTC).
    Digits below the millisecond are dropped (floor), as Kafka keeps milliseconds."""
    text = text.strip()
    try:
        ms = int(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidTimeError(f"{text!r} is not a time: expected epoch milliseconds (e.g. 1793613600000) "
                                   "or ISO-8601 (e.g. 2026-11-02T10:00:00Z; without a zone it is UTC)") from None
        ms = (moment.replace(tzinfo=moment.tzinfo or UTC) - EPOCH) // _ONE_MS
    if ms not in _INT64:
        raise InvalidTimeError(f"{text!r} is not a time: {ms} ms is outside int64")
    return ms


def format_time(ms: int) -> str:
    """`2026-11-02T00:00:00Z` (`.250Z` when the milliseconds are not zero); the plain number when it is
    beyond datetime's years 1-9999 (e.g. a timestamp in nanoseconds taken for milliseconds)."""
    try:
        moment = EPOCH + ms * _ONE_MS
    except OverflowError:
        return str(ms)
    return moment.isoformat(timespec="seconds")[:19] + (f".{ms % 1000:03d}Z" if ms % 1000 else "Z")


def format_duration(ms: int, precise: bool = False) -> str:
    """A duration in words: "16 minutes" (humanize's natural rounding), or with `precise` every unit
    down to milliseconds, "7 days and 1 millisecond"; beyond timedelta's range, "N ms"."""
    try:
        delta = abs(ms) * _ONE_MS
    except OverflowError:
        return f"{ms} ms"
    if precise:
        words = humanize.precisedelta(delta, minimum_unit="milliseconds")
    else:
        words = humanize.naturaldelta(delta)
    return f"-{words}" if ms < 0 else words
