"""Per-partition leases on a local directory and on moto S3: exclusion, expiry, takeover races, release."""

from __future__ import annotations

import json
import threading

import pytest

from engine.ops.lease import (
    TAKEOVER_TIMEOUT_MS,
    LeaseHeldError,
    LeaseLostError,
    acquire_lease,
    check_lease,
    lease_uri,
    read_lease,
    release_lease,
)
from kernel.names import TopicPartition
from layouts.store import list_objects

TP = TopicPartition("orders", 3)


class Clock:
    """A settable clock in ms, so that expiry is tested without sleeping."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_a_held_lease_excludes_others_and_names_its_holder(backend) -> None:
    clock = Clock()
    lease = acquire_lease(backend.store(), TP, "host-a:1", "job-a", 60_000, clock)
    assert lease.uri == backend.uri("_leases", "orders-3.lease")
    stored = read_lease(backend.store(), TP)
    assert (stored.owner, stored.job_id, stored.token, stored.expires_at_ms) == (
        "host-a:1", "job-a", lease.token, 1_060_000)
    clock.now += 6_000
    with pytest.raises(LeaseHeldError) as held:
        acquire_lease(backend.store(), TP, "host-b:2", "job-b", 60_000, clock)
    assert str(held.value) == (  # expiry 1,060,000 ms after the epoch, 54 s after the clock
        "orders-3 is leased by job 'job-a' (owner host-a:1) until 1970-01-01T00:17:40Z (in 54 seconds); if that "
        "job is no longer running, re-run with --job-id job-a to take the lease over at once and finish its work")
    other = acquire_lease(backend.store(), TopicPartition("orders", 4), "host-b:2", "job-b", 60_000, clock)
    assert other.token != lease.token
    assert release_lease(backend.store(), lease, clock) is True
    assert read_lease(backend.store(), TP) is None
    again = acquire_lease(backend.store(), TP, "host-b:2", "job-b", 60_000, clock)
    assert read_lease(backend.store(), TP).token == again.token


def test_the_same_job_id_takes_its_lease_over_at_once_and_the_dead_attempt_learns_it(backend) -> None:
    """A re-run of a killed job (same job id) must not wait for the dead attempt's lease to expire."""
    clock = Clock()
    dead = acquire_lease(backend.store(), TP, "host-a:1", "job-a", 3_600_000, clock)
    rerun = acquire_lease(backend.store(), TP, "host-b:2", "job-a", 3_600_000, clock)
    assert rerun.token != dead.token and read_lease(backend.store(), TP).token == rerun.token
    with pytest.raises(LeaseLostError, match="taken over"):
        check_lease(backend.store(), dead, clock)
    with pytest.raises(LeaseHeldError, match="job 'job-a'"):
        acquire_lease(backend.store(), TP, "host-c:3", "job-c", 60_000, clock)
    assert release_lease(backend.store(), rerun, clock) is True
    assert list_objects(backend.uri("_leases"), backend.options) == []


def test_only_the_owner_releases(backend) -> None:
    clock = Clock()
    lease = acquire_lease(backend.store(), TP, "a", "job-a", 60_000, clock)
    impostor = type(lease)(**{**lease.__dict__, "token": "0" * 32, "owner": "b"})
    with pytest.raises(LeaseLostError, match="not ours"):
        release_lease(backend.store(), impostor, clock)
    assert read_lease(backend.store(), TP).token == lease.token


def test_an_expired_lease_is_taken_over_and_its_old_owner_learns_it(backend) -> None:
    clock = Clock()
    old = acquire_lease(backend.store(), TP, "a", "job-a", 1_000, clock)
    clock.now += 1_001
    with pytest.raises(LeaseLostError, match="expired"):
        check_lease(backend.store(), old, clock)
    new = acquire_lease(backend.store(), TP, "b", "job-b", 60_000, clock)
    check_lease(backend.store(), new, clock)
    with pytest.raises(LeaseLostError, match="taken over"):
        check_lease(backend.store(), old, clock)
    with pytest.raises(LeaseLostError):
        release_lease(backend.store(), old, clock)
    assert read_lease(backend.store(), TP).owner == "b"
    assert [o.name for o in list_objects(backend.uri("_leases"), backend.options)] == ["orders-3.lease"]


def test_racing_takers_of_an_expired_lease_have_exactly_one_winner(backend) -> None:
    clock = Clock()
    acquire_lease(backend.store(), TP, "dead", "job-dead", 1_000, clock)
    clock.now += 5_000
    barrier = threading.Barrier(6)
    won, refused = [], []

    def take(i: int) -> None:
        barrier.wait()
        try:
            won.append(acquire_lease(backend.store(), TP, f"taker-{i}", f"job-{i}", 60_000, clock))
        except (LeaseHeldError, LeaseLostError) as exc:
            refused.append(exc)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 5, (won, refused)
    assert read_lease(backend.store(), TP).token == won[0].token
    check_lease(backend.store(), won[0], clock)


def test_a_takeover_marker_left_by_a_dead_taker_expires(backend) -> None:
    clock = Clock()
    expired = acquire_lease(backend.store(), TP, "a", "job-a", 1_000, clock)
    clock.now += 2_000
    marker = f"{lease_uri(backend.store(), TP)}.takeover-{expired.token}"
    backend.store().put_if_absent(marker, json.dumps({"claimed_at_ms": clock.now}).encode())
    with pytest.raises(LeaseHeldError, match="being taken over by another job"):
        acquire_lease(backend.store(), TP, "b", "job-b", 60_000, clock)
    clock.now += TAKEOVER_TIMEOUT_MS
    lease = acquire_lease(backend.store(), TP, "b", "job-b", 60_000, clock)
    assert read_lease(backend.store(), TP).token == lease.token
    assert [o.name for o in list_objects(backend.uri("_leases"), backend.options)] == ["orders-3.lease"]


class Killed(BaseException):
    """The process dying at a storage call (not an Exception: nothing catches it)."""


def test_a_rerun_after_a_double_crash_takes_its_own_lease_over_at_once(backend, monkeypatch) -> None:
    """Issue 26: attempt 1 of a job dies holding the lease; attempt 2 (same job id) dies while taking it
    over, after claiming the takeover marker; attempt 3 must take over at once, not wait out
    `TAKEOVER_TIMEOUT_MS`, and leave only its own lease."""
    from layouts.store.bound import Store

    clock = Clock()
    acquire_lease(backend.store(), TP, "attempt-1", "job-x", 3_600_000, clock)

    def killed(*args: object, **kwargs: object) -> bool:
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(Store, "delete", killed)  # attempt 2 dies at its first delete
        with pytest.raises(Killed):
            acquire_lease(backend.store(), TP, "attempt-2", "job-x", 3_600_000, clock)
    names = sorted(o.name for o in list_objects(backend.uri("_leases"), backend.options))
    assert len(names) == 2 and names[0] == "orders-3.lease" and ".takeover-" in names[1], names
    clock.now += 1_000
    third = acquire_lease(backend.store(), TP, "attempt-3", "job-x", 3_600_000, clock)
    assert read_lease(backend.store(), TP).token == third.token
    assert [o.name for o in list_objects(backend.uri("_leases"), backend.options)] == ["orders-3.lease"]
    with pytest.raises(LeaseHeldError):  # the marker rule did not open the lease to other jobs
        acquire_lease(backend.store(), TP, "other", "job-y", 60_000, clock)


def test_a_lease_written_with_fields_this_klake_does_not_know_still_holds_and_expires(backend) -> None:
    """A newer klake's lease (a field added, as `deletes_after_commit` once was): read as held, named, and
    taken over only once expired."""
    clock = Clock()
    store = backend.store()
    lease = acquire_lease(store, TP, "host-a:1", "job-a", 60_000, clock)
    content = json.loads(store.read(lease.uri))
    store.write(lease.uri, json.dumps({**content, "written_by": "klake 9", "fencing_epoch": 7}).encode())
    assert read_lease(store, TP) == lease
    with pytest.raises(LeaseHeldError, match="leased by job 'job-a'"):
        acquire_lease(store, TP, "host-b:2", "job-b", 60_000, clock)
    clock.now += 61_000
    taken = acquire_lease(store, TP, "host-b:2", "job-b", 60_000, clock)
    assert read_lease(store, TP) == taken
