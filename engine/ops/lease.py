"""Per-partition leases that serialize mutating jobs: `{root}/_leases/{topic}-{partition}.lease`.

A lease is a JSON object created with put-if-absent (of two racing jobs exactly one wins), holding the
owner, the job id, a random token and the expiry time in ms. Rules:

- acquiring fails with `LeaseHeldError`, naming the holder, while an unexpired lease of another job
  id exists; a lease of the SAME job id is taken over at once: its holder is a dead attempt of this
  job or this very job, and the job ledger (engine.ops.catalog_table) keeps a second attempt from committing
  twice what the first committed;
- a spent lease of another job is taken over at once as well: its job committed the partition (the job
  ledger says so) and its operation declared, in the lease, that it does no work after its commit, so the
  lease holds nothing any more (the rule and why: `engine.ops.run.lease_is_spent`); a job killed after its
  commit, before its release, then blocks no other job for the lease's TTL;
- an expired (or spent) lease is taken over through a takeover marker `{lease}.takeover-{token}`, itself created
  put-if-absent: of all takers that saw the same expired lease, only the one that created the marker
  may delete it and create a new lease. Without the marker, taker A could delete the expired lease and
  create its own, then taker B (which read the old one earlier) delete A's fresh lease, and both would
  believe they hold it. A marker whose taker died is ignored after `TAKEOVER_TIMEOUT_MS`, or at once
  by a taker of the marker's own job id: that taker was a dead attempt of this job (a re-run killed while
  taking its lease over), so a third attempt does not wait for it;
- the new lease is verified by re-reading it (its token must be ours);
- only the owner (token) may release, and only while the lease is unexpired by `RELEASE_MARGIN_MS`, so
  that a release never deletes a lease someone took over meanwhile.

The lease serializes well-behaved jobs; the catalog's commit conflicts remain the final guard.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields

from kernel.errors import KlakeError
from kernel.names import TopicPartition
from kernel.times import format_duration, format_time
from layouts.store.bound import Store

LEASE_DIR = "_leases"
DEFAULT_LEASE_TTL_MS = 3_600_000
"""How long a lease lasts unless `jobs.lease_ttl_ms` says otherwise: longer than any one job's run."""
TAKEOVER_TIMEOUT_MS = 60_000
RELEASE_MARGIN_MS = 1_000


class LeaseHeldError(KlakeError):
    """Another owner holds an unexpired lease on the partition."""


class LeaseLostError(KlakeError):
    """The lease is no longer ours (expired and taken over, or released)."""


@dataclass(frozen=True)
class Lease:
    """The content of a lease object, and where it lives."""

    uri: str
    topic: str
    partition: int
    owner: str
    job_id: str
    token: str
    acquired_at_ms: int
    expires_at_ms: int
    deletes_after_commit: bool = True
    """Its run deletes the segments it retired after its commit (`engine.ops.run`, step 7), so the lease
    still guards work once the ledger shows the commit. Declared by the operation; a lease written before
    the declaration existed says nothing and is taken to do so."""

    def describe(self, now: int | None = None) -> str:
        """Who holds the lease, until when, and how to take it over safely."""
        now = now_ms() if now is None else now
        left = format_duration(max(self.expires_at_ms - now, 0))
        return (f"{self.topic}-{self.partition} is leased by job {self.job_id!r} (owner {self.owner}) until "
                f"{format_time(self.expires_at_ms)} (in {left}); if that job is no longer running, re-run with "
                f"--job-id {self.job_id} to take the lease over at once and finish its work")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def lease_uri(store: Store, tp: TopicPartition) -> str:
    return store.uri(LEASE_DIR, f"{tp.dir_name}.lease")


def leased_partitions(store: Store, tps: Iterable[TopicPartition]) -> set[TopicPartition]:
    """Which of `tps` have a lease object now, held or left by a killed attempt (one LIST of the lease
    directory, however many partitions)."""
    present = {info.uri for info in store.list_objects(store.uri(LEASE_DIR))}
    return {tp for tp in tps if lease_uri(store, tp) in present}


def read_lease(store: Store, tp: TopicPartition) -> Lease | None:
    """The lease currently stored for `tp`, or None."""
    return _read(store, lease_uri(store, tp))


_LEASE_FIELDS = frozenset(f.name for f in fields(Lease)) - {"uri"}


def _read(store: Store, uri: str) -> Lease | None:
    try:
        content = json.loads(store.read(uri))
    except FileNotFoundError:
        return None
    # a lease a newer klake wrote may carry fields this one does not know: it holds the partition all the same
    return Lease(uri=uri, **{name: value for name, value in content.items() if name in _LEASE_FIELDS})


def _encode(lease: Lease) -> bytes:
    content = asdict(lease)
    del content["uri"]
    return json.dumps(content, sort_keys=True).encode()


def acquire_lease(store: Store, tp: TopicPartition, owner: str, job_id: str, ttl_ms: int,
                  clock: Callable[[], int] = now_ms, *, deletes_after_commit: bool = True,
                  spent: Callable[[Lease], bool] | None = None) -> Lease:
    """Take the lease on `tp` for `ttl_ms`, taking over an expired one, one of the same `job_id` or one
    `spent` (if given) says holds nothing (`engine.ops.run.lease_is_spent`); `LeaseHeldError` if another job
    holds it. `deletes_after_commit`: the taker's own declaration, stored in its lease."""
    if ttl_ms <= 0:
        raise ValueError(f"lease ttl must be positive, got {ttl_ms} ms")
    uri = lease_uri(store, tp)
    start = clock()
    mine = Lease(uri=uri, topic=tp.topic, partition=tp.partition, owner=owner, job_id=job_id,
                 token=uuid.uuid4().hex, acquired_at_ms=start, expires_at_ms=start + ttl_ms,
                 deletes_after_commit=deletes_after_commit)
    try:
        store.put_if_absent(uri, _encode(mine))
    except FileExistsError:
        current = _read(store, uri)
        if (current is not None and current.expires_at_ms > clock() and current.job_id != job_id
                and not (spent is not None and spent(current))):
            raise LeaseHeldError(current.describe(clock())) from None
        if current is not None:
            _take_over(store, current, job_id, clock)
        try:
            store.put_if_absent(uri, _encode(mine))
        except FileExistsError:
            holder = _read(store, uri)
            raise LeaseHeldError(holder.describe(clock()) if holder else f"{tp} lease changed hands; retry") from None
    stored = _read(store, uri)
    if stored is None or stored.token != mine.token:
        raise LeaseLostError(f"{tp}: lease written but not ours on re-read")
    return mine


def _take_over(store: Store, expired: Lease, job_id: str, clock: Callable[[], int]) -> None:
    """Delete `expired` (or a same-job or spent lease) if we win its takeover marker (as job `job_id`); raise
    `LeaseHeldError` if another taker does."""
    marker = f"{expired.uri}.takeover-{expired.token}"
    busy = LeaseHeldError(f"{expired.topic}-{expired.partition}: the lease of job {expired.job_id!r} is being "
                          "taken over by another job; retry in a minute")
    if not _claim(store, marker, job_id, clock):
        if not _is_stale(store, marker, job_id, clock):
            raise busy
        store.delete(marker)
        if not _claim(store, marker, job_id, clock):
            raise busy
    try:
        current = _read(store, expired.uri)
        if current is not None and current.token == expired.token:
            store.delete(expired.uri)
    finally:
        store.delete(marker)


def _claim(store: Store, marker: str, job_id: str, clock: Callable[[], int]) -> bool:
    try:
        store.put_if_absent(marker, json.dumps({"claimed_at_ms": clock(), "job_id": job_id}).encode())
    except FileExistsError:
        return False
    return True


def _is_stale(store: Store, marker: str, job_id: str, clock: Callable[[], int]) -> bool:
    """A marker left by a taker that died: older than `TAKEOVER_TIMEOUT_MS`, claimed by an attempt of
    `job_id` itself (a marker of an older klake names no job), or already gone."""
    try:
        claim = json.loads(store.read(marker))
    except FileNotFoundError:
        return True
    return claim.get("job_id") == job_id or clock() - claim["claimed_at_ms"] >= TAKEOVER_TIMEOUT_MS


def check_lease(store: Store, lease: Lease, clock: Callable[[], int] = now_ms) -> None:
    """Raise `LeaseLostError` unless `lease` is still stored, ours, and unexpired."""
    stored = _read(store, lease.uri)
    if stored is None or stored.token != lease.token:
        raise LeaseLostError(f"{lease.topic}-{lease.partition}: lease of job {lease.job_id!r} was taken over")
    if stored.expires_at_ms <= clock():
        raise LeaseLostError(f"{lease.topic}-{lease.partition}: lease of job {lease.job_id!r} expired")


def release_lease(store: Store, lease: Lease, clock: Callable[[], int] = now_ms) -> bool:
    """Delete our lease; True if deleted. An expired lease is left for a taker (see module docs)."""
    stored = _read(store, lease.uri)
    if stored is None or stored.token != lease.token:
        raise LeaseLostError(f"{lease.topic}-{lease.partition}: cannot release, the lease is not ours "
                             f"({stored.describe() if stored else 'no lease stored'})")
    if stored.expires_at_ms - RELEASE_MARGIN_MS <= clock():
        return False
    return store.delete(lease.uri)
