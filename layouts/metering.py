"""Per-run metering of object-store traffic: requests by verb and bytes moved.

A `Meter` counts only what its own block does (`with metered() as meter:`), in this thread and the
asyncio tasks it starts, never another run's traffic in the same process: the active meters live in a
context variable, not in process-global counters, so two runs in one process (Spark local mode, a
library user's threads) each see their own figures. Nested blocks all count, so a job's total and a
task's share can be measured at once.

Verbs: GET, HEAD, LIST, PUT, DELETE, and S3's multipart calls by operation name (e.g. UploadPartCopy).
Bytes: `read` (GET bodies) and `written` (PUT and UploadPart bodies). Traffic that happened in another
process (a Spark task) comes back as counts and is added with `add_counted`. The catalog's own
requests (delta-rs, in Rust) are not seen here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass
class Meter:
    """The requests made and bytes moved inside one `metered()` block."""

    requests: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)


_ACTIVE: ContextVar[tuple[Meter, ...]] = ContextVar("klake_active_meters", default=())


@contextmanager
def metered() -> Iterator[Meter]:
    """Count the object-store traffic of the block into a fresh `Meter`.

    The meter is removed by identity on exit (not by resetting the variable), so blocks that end out of
    order, as generator-held blocks can, never drop each other's meters.
    """
    meter = Meter()
    _ACTIVE.set((*_ACTIVE.get(), meter))
    try:
        yield meter
    finally:
        _ACTIVE.set(tuple(m for m in _ACTIVE.get() if m is not meter))


def active_meters() -> tuple[Meter, ...]:
    """The meters counting right now, to hand to work that runs outside this context (fsspec's event
    loop thread runs coroutines in its own context)."""
    return _ACTIVE.get()


@contextmanager
def counting_into(meters: Sequence[Meter]) -> Iterator[None]:
    """Count the block's traffic into `meters` (from `active_meters()`), whichever thread runs it: for
    callbacks from threads that do not share the caller's context (pyarrow's I/O threads)."""
    token = _ACTIVE.set(tuple(meters))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def record(verb: str, read: int = 0, written: int = 0, meters: Sequence[Meter] | None = None,
           requests: int = 1) -> None:
    """Count `requests` requests of `verb` (one by default; and their body bytes) into `meters`, by default
    the active ones."""
    for meter in _ACTIVE.get() if meters is None else meters:
        meter.requests[verb] += requests
        if read:
            meter.bytes["read"] += read
        if written:
            meter.bytes["written"] += written


def add_counted(requests: Mapping[str, int], moved: Mapping[str, int]) -> None:
    """Add traffic counted elsewhere (a task in another process measured it) to the active meters."""
    for meter in _ACTIVE.get():
        meter.requests.update(requests)
        meter.bytes.update(moved)
