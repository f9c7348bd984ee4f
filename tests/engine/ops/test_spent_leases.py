"""The spent-lease rule of the driver protocol (`engine.ops.run.lease_is_spent`): a lease left by a job killed
after its commit, before its release, is taken over at once by another job when the job ledger shows the commit
and the job's operation does no work after it (append); a retention killed with its deletes pending keeps its
lease, and so does a job killed before its commit; a re-run of the same job takes its own lease over, as always.

A kill is simulated in process: the run's release of its leases is a no-op (the process died before it), and a
kill at a point of the run raises `Killed` there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import numpy as np
import pyarrow as pa
import pytest

from engine.catalog.schema import SegmentState
from engine.log.topic_config import TopicConfig
from engine.ops import run as run_module
from engine.ops.append import prepare_append
from engine.ops.catalog_table import Catalog
from engine.ops.lease import LeaseHeldError, lease_uri, read_lease
from engine.ops.retention import RetentionPlanner, prepare_retention
from engine.ops.run import JobRun, run_single_partition
from jobs.runtime.report import RunReport
from kernel.names import TopicPartition
from layouts.store.bound import Store
from tests.conftest import Backend

TP = TopicPartition("events", 0)
NOW = 1_790_000_000_000
CONFIG = TopicConfig.from_mapping({"segment.bytes": 2000, "retention.bytes": 1, "retention.ms": -1})


class Killed(BaseException):
    """The process died here."""


def _records(n: int, start: int = 0) -> pa.Table:
    ts = NOW - 3_600_000 + np.arange(n, dtype=np.int64)
    return pa.table({"key": pa.array([b"k%d" % i for i in range(start, start + n)], pa.binary()),
                     "value": pa.array([b"value-%05d" % i for i in range(start, start + n)], pa.binary()),
                     "timestamp": pa.array(ts, pa.int64())})


def _append(backend: Backend, catalog: Catalog, job_id: str, records: pa.Table) -> JobRun:
    store = Store(backend.uri("root"), backend.options)
    prepare = partial(prepare_append, records=records, store=store, now_ms=NOW, append_id=job_id)
    return run_single_partition(catalog, store, TP, CONFIG, prepare, operation="append", job_id=job_id,
                                ledger_idle=True)


def _retention(backend: Backend, catalog: Catalog, job_id: str) -> JobRun:
    store = Store(backend.uri("root"), backend.options)
    prepare = partial(prepare_retention, store=store, now_ms=NOW, job_id=job_id)
    return run_single_partition(catalog, store, TP, CONFIG, prepare, operation="retention", job_id=job_id,
                                planner=RetentionPlanner(NOW), deletes_after_commit=True)


@contextmanager
def _killed(monkeypatch: pytest.MonkeyPatch, at: str | None = None) -> Iterator[None]:
    """A run that dies before releasing its leases and, with `at` ("commit": before the catalog commit,
    "deletes": after it, before the deletes of what it retired), at that point."""
    def die(*args: object, **kwargs: object) -> None:
        raise Killed(at)

    with monkeypatch.context() as patch:
        patch.setattr(run_module._Leases, "_release", lambda self, lease: None)
        if at == "commit":
            patch.setattr(run_module, "_commit", die)
        elif at == "deletes":
            patch.setattr(run_module, "delete_and_forget", die)
        yield


@pytest.fixture
def catalog(backend: Backend) -> Catalog:
    return Catalog.create(Store(backend.uri("catalog"), backend.options))


def _offsets(catalog: Catalog) -> tuple[int, int]:
    live = catalog.live_segments(TP.topic, TP.partition)
    return live[0].base_offset, live[-1].next_offset


def test_an_append_killed_after_its_commit_leaves_a_spent_lease_another_job_takes_over(backend, catalog,
                                                                                       monkeypatch) -> None:
    with _killed(monkeypatch):
        _append(backend, catalog, "append-a", _records(50))
    store = Store(backend.uri("root"), backend.options)
    left = read_lease(store, TP)
    assert left.job_id == "append-a" and not left.deletes_after_commit  # held for an hour, unexpired
    assert catalog.committed_partitions("append-a", [TP]) == {TP}

    run = _append(backend, catalog, "append-b", _records(30, 50))
    assert run.spent_leases == {"events-0": "append-a"}
    assert _offsets(catalog) == (0, 80) and read_lease(store, TP) is None  # appended, then released
    report = RunReport("append", "append-b", False, NOW)
    report.add_run(run)
    assert any("took over the lease of job append-a" in line for line in report.summary), report.summary


def test_a_lease_that_declares_nothing_an_older_klake_wrote_is_not_taken_as_spent(backend, catalog,
                                                                               monkeypatch) -> None:
    with _killed(monkeypatch):
        _append(backend, catalog, "append-a", _records(50))
    store = Store(backend.uri("root"), backend.options)
    content = json.loads(store.read(lease_uri(store, TP)))
    del content["deletes_after_commit"]
    backend.put(lease_uri(store, TP), json.dumps(content).encode())
    with pytest.raises(LeaseHeldError, match="append-a"):
        _append(backend, catalog, "append-b", _records(30, 50))


def test_a_retention_killed_after_its_commit_with_its_deletes_pending_keeps_its_lease(backend, catalog,
                                                                                      monkeypatch) -> None:
    _append(backend, catalog, "fill", _records(200))
    retired = len(catalog.live_segments(TP.topic, TP.partition)) - 1  # retention.bytes=1: all but the active
    assert retired >= 2
    with _killed(monkeypatch, "deletes"), pytest.raises(Killed):
        _retention(backend, catalog, "retention-r")
    assert catalog.committed_partitions("retention-r", [TP]) == {TP}
    assert catalog.segments(states=[SegmentState.DELETE_STARTED]).num_rows == retired  # its deletes pending
    assert read_lease(Store(backend.uri("root"), backend.options), TP).deletes_after_commit

    with pytest.raises(LeaseHeldError, match="retention-r"):
        _append(backend, catalog, "append-b", _records(10, 200))
    again = _retention(backend, catalog, "retention-r")  # its own re-run takes it over and finishes the deletes
    assert again.committed_earlier == [TP] and again.spent_leases == {}
    assert again.finished_from_earlier_run == {"events-0": retired}
    assert catalog.segments(states=[SegmentState.DELETE_STARTED]).num_rows == 0


def test_a_job_killed_before_its_commit_keeps_its_lease_until_its_own_rerun(backend, catalog, monkeypatch) -> None:
    with _killed(monkeypatch, "commit"), pytest.raises(Killed):
        _append(backend, catalog, "append-a", _records(50))
    assert not catalog.committed_partitions("append-a", [TP])
    assert not read_lease(Store(backend.uri("root"), backend.options), TP).deletes_after_commit

    with pytest.raises(LeaseHeldError, match="append-a"):
        _append(backend, catalog, "append-b", _records(30, 50))
    rerun = _append(backend, catalog, "append-a", _records(50))
    assert rerun.spent_leases == {} and rerun.committed_earlier == []
    assert _offsets(catalog) == (0, 50)


def test_a_rerun_of_the_same_job_takes_its_own_lease_over_and_skips_what_it_committed(backend, catalog,
                                                                                       monkeypatch) -> None:
    with _killed(monkeypatch):
        _append(backend, catalog, "append-a", _records(50))
    rerun = _append(backend, catalog, "append-a", _records(50))
    assert rerun.committed_earlier == [TP] and rerun.spent_leases == {}
    assert _offsets(catalog) == (0, 50) and read_lease(Store(backend.uri("root"), backend.options), TP) is None


def test_an_operation_that_retires_without_declaring_it_fails_before_its_commit(backend, catalog) -> None:
    _append(backend, catalog, "fill", _records(200))
    before = catalog.version()
    store = Store(backend.uri("root"), backend.options)
    prepare = partial(prepare_retention, store=store, now_ms=NOW, job_id="undeclared")
    with pytest.raises(ValueError, match="deletes_after_commit"):
        run_single_partition(catalog, store, TP, CONFIG, prepare, operation="retention", job_id="undeclared",
                             planner=RetentionPlanner(NOW))
    assert catalog.version() == before and read_lease(store, TP) is None
