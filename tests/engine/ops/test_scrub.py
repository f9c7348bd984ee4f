"""`klake scrub` on a local directory and on moto S3, with planted orphans, missing and truncated objects."""

from __future__ import annotations

import json
import time
from dataclasses import replace

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import SegmentState
from engine.ops.catalog_table import Catalog
from engine.ops.importer import import_log_dir
from engine.ops.scrub import scrub
from jobs.cli.main import main as klake
from kernel.names import TopicPartition
from layouts.object_layout import object_segment_keys, put_segment_objects
from layouts.store import filesystem, list_objects, object_info
from layouts.store.bound import Store
from tests.catalog_rows import add_segments, make_row, transition
from tests.scrub_findings import scrub_findings

SMALL_PARTITIONS = ("_confluent-command-0", "docker-connect-status-0")


def _imported(backend, kafka_fixtures, copy: bool, catalog_at: str = "catalog") -> Catalog:
    for name in SMALL_PARTITIONS:
        backend.upload_tree(kafka_fixtures / "broker" / name, backend.uri("src", name))
    catalog = Catalog.create(Store(backend.uri(catalog_at), backend.options))
    report = import_log_dir(backend.store("src"), backend.store("root"), catalog, copy=copy)
    assert report.rows_added == 2
    return catalog


def _listing(backend) -> dict[str, int]:
    return {o.uri: o.size for o in list_objects(backend.uri("root"), backend.options)}


def _plant(backend, catalog: Catalog) -> dict[str, set[str]]:
    """Plant orphans, keep-outs, a missing and a truncated object; return what scrub must find."""
    tp = TopicPartition("docker-connect-status", 0)
    stray = object_segment_keys(backend.uri("root"), tp, 135, "deadbeef00000000")
    put_segment_objects(stray, b"L" * 10, b"", b"", backend.store())
    deleting_keys = object_segment_keys(backend.uri("root"), tp, 500, "feedface00000000")
    put_segment_objects(deleting_keys, b"L" * 100, b"I" * 8, b"T" * 12, backend.store())
    deleting_row = replace(make_row("docker-connect-status", 0, 500, 510, segment_id="feedface00000000"),
                           log_key=deleting_keys.log, index_key=deleting_keys.index,
                           timeindex_key=deleting_keys.timeindex)
    add_segments(catalog, [deleting_row])
    transition(catalog, [deleting_row.ref], SegmentState.DELETE_STARTED)
    temporary = backend.uri("root", "docker-connect-status-0",
                            f".00000000000000000135-deadbeef00000001.log.tmp-{'0' * 32}")
    backend.put(temporary, b"partial")
    keep_out = [backend.uri("root", "notes.txt"),
                backend.uri("root", "docker-connect-status-0", "00000000000000000000.log"),
                backend.uri("root", "junk", "00000000000000000000-abc.log"),
                backend.uri("root", "_leases", "other-0.lease")]
    for uri in keep_out:
        backend.put(uri, b"not klake's")
    command = catalog.live_segments("_confluent-command", 0)[0]
    assert backend.store().delete(command.timeindex_key)
    status = catalog.live_segments("docker-connect-status", 0)[0]
    fs, path = filesystem(status.log_key, backend.options)
    backend.put(status.log_key, fs.cat_file(path)[:1000])
    return {
        "orphans": set(stray.all()) | set(deleting_keys.all()) | {temporary},
        "missing": {command.timeindex_key},
        "truncated": {status.log_key},
        "keep_out": set(keep_out),
    }


def test_scrub_reports_everything_and_deletes_only_orphans(backend, kafka_fixtures, capsys, tmp_path) -> None:
    catalog = _imported(backend, kafka_fixtures, copy=True)
    planted = _plant(backend, catalog)
    before = _listing(backend)
    report = tmp_path / "scrub.json"
    argv = ["scrub", "--root", backend.uri("root"), "--catalog", backend.uri("catalog"), "--grace-ms", "0",
            "--report", str(report)]

    def scrubbed() -> tuple[dict, dict]:
        """The JSON report's counts, and every finding from its side file."""
        written = json.loads(report.read_text())
        return written["results"]["scrub"], scrub_findings(written)

    capsys.readouterr()
    assert klake([*argv, "--dry-run"]) == 1
    counts, dry = scrubbed()
    assert {o["uri"] for o in dry["orphan"]} == planted["orphans"]
    assert {(m["kind"], m["uri"]) for m in dry["missing"]} == {("timeindex", k) for k in planted["missing"]}
    assert [(s["uri"], s["object_size"]) for s in dry["size-mismatch"]] == [(k, 1000) for k in planted["truncated"]]
    assert dry["size-mismatch"][0]["catalog_size"] == (kafka_fixtures / "broker" / "docker-connect-status-0" /
                                                       "00000000000000000000.log").stat().st_size
    assert dry["deleted"] == [] and _listing(backend) == before
    assert counts["orphans"]["count"] == len(planted["orphans"]) and counts["deleted"] == 0
    assert counts["missing"] == {"count": 1, "by_kind": {"timeindex": 1}}
    assert counts["size_mismatches"] == {"count": 1, "by_kind": {"log": 1}}

    assert klake(argv) == 1
    counts, done = scrubbed()
    assert set(done["deleted"]) == planted["orphans"] and done["delete_failed"] == {}
    assert counts["deleted"] == len(planted["orphans"]) and counts["delete_failed"] == 0
    after = _listing(backend)
    assert after == {uri: size for uri, size in before.items() if uri not in planted["orphans"]}
    assert planted["keep_out"] <= set(after) and planted["truncated"] <= set(after)
    for row in catalog.live_segments("docker-connect-status", 0) + catalog.live_segments("_confluent-command", 0):
        assert {k for k in (row.log_key, row.index_key, row.timeindex_key)} - planted["missing"] <= set(after)

    capsys.readouterr()
    assert klake(argv) == 1
    assert "MISSING timeindex of _confluent-command-0/" in capsys.readouterr().out


def test_young_orphans_are_kept_for_the_grace_period(backend, kafka_fixtures) -> None:
    catalog = _imported(backend, kafka_fixtures, copy=True, catalog_at="root/_catalog")
    stray = object_segment_keys(backend.uri("root"), TopicPartition("_confluent-command", 0), 2, "0123456789abcdef")
    put_segment_objects(stray, b"L", b"", b"", backend.store())
    now = time.time_ns() // 1_000_000
    young = scrub(Store(backend.uri("root"), backend.options), catalog, grace_ms=3_600_000, now=now)
    assert young.orphans == [] and young.orphans_within_grace == 3 and young.clean
    assert all(object_info(k, backend.options) for k in stray.all())
    before = _listing(backend)
    later = scrub(Store(backend.uri("root"), backend.options), catalog, grace_ms=3_600_000, now=now + 7_200_000)
    assert sorted(later.deleted) == sorted(stray.all())
    assert _listing(backend) == {uri: size for uri, size in before.items() if uri not in stray.all()}
    assert Catalog.open(Store(backend.uri("root", "_catalog"), backend.options)).all_rows().num_rows == 2


def test_scrub_checks_rows_that_point_outside_the_root_and_never_deletes_there(backend, kafka_fixtures) -> None:
    catalog = _imported(backend, kafka_fixtures, copy=False)
    command = catalog.live_segments("_confluent-command", 0)[0]
    assert command.log_key.startswith(backend.uri("src") + "/")
    assert backend.store().delete(command.log_key)
    source_before = {o.uri for o in list_objects(backend.uri("src"), backend.options)}
    report = scrub(Store(backend.uri("root"), backend.options), catalog, grace_ms=0)
    assert [(m.kind, m.key) for m in report.missing] == [("log", command.log_key)]
    assert report.orphans == [] and report.size_mismatches == []
    assert {o.uri for o in list_objects(backend.uri("src"), backend.options)} == source_before


def test_scrub_reclaims_lease_temporaries_and_rejects_of_partitions_their_job_never_committed(backend,
                                                                                             kafka_fixtures) -> None:
    """Debris of killed jobs (issue: crash-safe re-runs): a lease temporary or takeover marker, a rejects
    file whose (job id, partition) is not in the job ledger, a killed append's staged rows, and a local
    writer's temporary under `_topics/`, `_mirror/` or `_rejects/` (issue 26) go once older than the grace
    period; a live lease, the rejects of a committed partition, the unplaced rejects, the files the
    temporaries were for, and a name klake does not write stay."""
    catalog = _imported(backend, kafka_fixtures, copy=True, catalog_at="root/_catalog")
    committed = TopicPartition("_confluent-command", 0)
    catalog.apply(CatalogChange(), operation="append", job_id="job-1", finished=[committed])
    debris = {backend.uri("root", "_leases", f".orders-0.lease.tmp-{'a' * 32}"): "lease-temporary",
              backend.uri("root", "_leases", f"orders-0.lease.takeover-{'b' * 32}"): "lease-temporary",
              backend.uri("root", "_rejects", "job-1", "docker-connect-status-0.parquet"): "superseded-rejects",
              backend.uri("root", "_staging", "job-2", "c" * 32, f"{'d' * 32}.arrow"): "append-staging",
              # issue 26: every temporary a killed local writer leaves (`publish_local`), wherever it wrote
              backend.uri("root", "_topics", "orders", f".config-00000001.json.tmp-{'e' * 32}"): "temporary",
              backend.uri("root", "_mirror", "orders-0", f".replica.tmp-{'f' * 32}"): "temporary",
              backend.uri("root", "_mirror", "orders-0", f".{0:020d}.parquet.tmp-{'0' * 32}"): "temporary",
              backend.uri("root", "_rejects", "job-1", f".orders-0.parquet.tmp-{'1' * 32}"): "temporary"}
    kept = [backend.uri("root", "_leases", "orders-1.lease"),
            backend.uri("root", "_rejects", "job-1", "_confluent-command-0.parquet"),
            backend.uri("root", "_rejects", "job-1", "unplaced", "orders-7.parquet"),
            backend.uri("root", "_topics", "orders", "config-00000001.json"),
            backend.uri("root", "_mirror", "orders-0", "replica"),
            backend.uri("root", "_mirror", "orders-0", f".replica.tmp-{'f' * 31}")]  # not klake's name
    for uri in [*debris, *kept]:
        backend.put(uri, b"x")
    now = time.time_ns() // 1_000_000
    young = scrub(Store(backend.uri("root"), backend.options), catalog, grace_ms=3_600_000, now=now)
    assert young.debris == [] and young.deleted == []
    report = scrub(Store(backend.uri("root"), backend.options), catalog, grace_ms=0, now=now + 1)
    assert {d.uri: d.kind for d in report.debris} == debris and sorted(report.deleted) == sorted(debris)
    assert all(object_info(uri, backend.options) is None for uri in debris)
    assert all(object_info(uri, backend.options) is not None for uri in kept)


def test_scrub_reports_a_sidecar_of_another_size_than_its_row_records(backend, kafka_fixtures) -> None:
    """The sidecar sizes a row records are checked like its `.log` size; a row of an older catalog
    (sizes null) has none to disagree with."""
    catalog = _imported(backend, kafka_fixtures, copy=True)
    command, status = (catalog.live_segments(t, 0)[0] for t in ("_confluent-command", "docker-connect-status"))
    size = object_info(command.timeindex_key, backend.options).size
    assert command.timeindex_size_bytes == size
    change = CatalogChange(add=(replace(command, segment_id="c0ffee0000000000", timeindex_size_bytes=size + 12),
                                replace(status, segment_id="c0ffee0000000001", index_size_bytes=None,
                                        timeindex_size_bytes=None)),
                           remove=(command.ref, status.ref))
    catalog.apply(change)
    report = scrub(Store(backend.uri("root"), backend.options), catalog, grace_ms=10**9, dry_run=True)
    assert [(m.segment, m.key, m.catalog_size, m.object_size) for m in report.size_mismatches] == [
        ("_confluent-command-0/c0ffee0000000000", command.timeindex_key, size + 12, size)]
    assert report.missing == []
