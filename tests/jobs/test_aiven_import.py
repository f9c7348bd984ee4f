"""`import --layout aiven` (issue 31): buckets of Aiven's tiered-storage plugin, written by the test-only
writer (`tests/aiven_uploads.py`) from the broker segments of `tests/fixtures/kafka/broker/timeindex_test-0`,
catalogued in place and read by the reading jobs, whose answers are checked against the broker's own bytes
and the fixture's golden lookups; a lookup reads only the manifest and the chunks holding its answer; bad
buckets (a missing manifest, a truncated chunk, a wrong key) fail on one line naming the object, with
nothing written into the bucket. Local and moto S3. Data keys are wrapped by the writer, or by BouncyCastle, the
plugin's own provider (`tests/oracles/jvm/BcWrapKeys.java`).
"""

from __future__ import annotations

import base64
import io
import json
import os
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from Crypto.PublicKey import RSA

from engine.format.batch import scan_batches
from engine.ops import read as range_read
from engine.ops.catalog_table import Catalog
from jobs import import_log
from jobs.runtime.job_runner import main
from layouts.aiven_manifest import KEY_RING_ENV
from layouts.metering import metered
from layouts.store import StorageOptions, aiven_file_io, file_io, list_objects, read_bytes
from layouts.store.bound import Store
from tests.aiven_uploads import KeyPair, bouncycastle_wrapped_keys, bucket_from_log_dir, key_ring
from tests.conftest import PROJECT_ROOT, Backend

PAIR = KeyPair("key-pair-1", RSA.generate(2048))
CHUNK = 64 * 1024
SOURCE = PROJECT_ROOT / "tests" / "fixtures" / "kafka" / "broker" / "timeindex_test-0"
SEGMENTS = [0, 7729, 15363, 22964]


@pytest.fixture
def key_ring_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    ring = key_ring(tmp_path / "ring", PAIR)
    monkeypatch.setenv("KLAKE_AIVEN_KEY_RING", str(ring))
    return ring


def make_bucket(tmp_path: Path, backend: Backend, **transforms: object) -> tuple[str, Path]:
    """The fixture partition as zstd-compressed, encrypted uploads (unless `transforms` says otherwise) under
    the plugin's `key.prefix` `tiered/`; the bucket prefix to import and the local copy's partition dir."""
    made = tmp_path / "made"
    part = bucket_from_log_dir(SOURCE, made, chunk_size=CHUNK, **({"compression": True, "pair": PAIR} | transforms))
    return backend.upload_tree(made, backend.uri("bucket"), skip_suffixes=()) + "/tiered", part


def stored_state(uri: str, backend: Backend) -> dict[str, tuple[int, bytes]]:
    return {o.uri: (o.size, read_bytes(o.uri, backend.options)) for o in list_objects(uri, backend.options)}


def run(spec: object, argv: list[str]) -> tuple[int, str, str]:
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = main(spec, argv)  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


def run_import(tmp_path: Path, bucket: str, root: str) -> tuple[int, str, dict]:
    report = tmp_path / "report.json"
    code, _, err = run(import_log.SPEC, [bucket, "--root", root, "--layout", "aiven", "--no-progress", "--report",
                                         str(report)])
    return code, err, json.loads(report.read_text()) if report.exists() else {}


def test_an_aiven_bucket_is_catalogued_in_place_and_read_jobs_answer_like_the_broker(
        tmp_path: Path, backend: Backend, key_ring_env: Path) -> None:
    from jobs import offsets_for_times, retention

    bucket, _ = make_bucket(tmp_path, backend)
    before = stored_state(bucket, backend)
    root = backend.uri("klake")
    code, err, report = run_import(tmp_path, bucket, root)
    assert code == 0, err
    rows = Catalog.open(Store(f"{root}/_catalog", backend.options)).live_segments("timeindex_test", 0)
    assert [r.base_offset for r in rows] == SEGMENTS and rows[-1].next_offset == 30565
    assert all(r.layout == "aiven" and r.log_key.startswith("aiven+") for r in rows)
    assert [r.size_bytes for r in rows] == [(SOURCE / f"{b:020d}.log").stat().st_size for b in SEGMENTS]
    for row in rows:  # the encrypted index regions of .indexes read as the broker's sidecars
        name = row.log_key.removesuffix(".log")
        for suffix in ("index", "timeindex"):
            assert read_bytes(f"{name}.{suffix}", backend.options) == (SOURCE / f"{row.base_offset:020d}.{suffix}").read_bytes()

    golden = [json.loads(line) for line in (SOURCE.parent / "timeindex_test-0.lookups.golden.jsonl").read_text().splitlines()]
    targets = golden[::7]
    answers = tmp_path / "answers.jsonl"
    code, _, err = run(offsets_for_times.SPEC, ["--root", root, "--topic", "timeindex_test", "--no-progress",
                                                "--output", str(answers),
                                                *[f"--timestamp={g['target']}" for g in targets]])
    assert code == 0, err
    got = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [(a["target"], a["offset"], a["timestamp"]) for a in got if a["found"]] == [
        (g["target"], g["offset"], g["timestamp"]) for g in targets if g["offset"] is not None]

    code, _, err = run(retention.SPEC, ["--root", root, "--topic", "timeindex_test", "--dry-run", "--no-progress"])
    assert code == 2 and len(err.splitlines()) == 1 and "--layout aiven, read-only" in err, err
    assert stored_state(bucket, backend) == before  # nothing written into the bucket


def test_uploads_whose_data_keys_bouncycastle_wrapped_import_and_read_as_the_brokers_segments(
        tmp_path: Path, key_ring_env: Path) -> None:
    keys = bouncycastle_wrapped_keys(PAIR, len(SEGMENTS), tmp_path / "bc")
    local = Backend("local", str(tmp_path / "store"), StorageOptions())
    bucket, part = make_bucket(tmp_path, local, wrapped_keys=keys)
    assert [json.loads(m.read_text())["encryption"]["dataKey"] for m in sorted(part.glob("*.rsm-manifest"))] == [
        f"{PAIR.key_id}:{base64.b64encode(k.wrapped).decode()}" for k in keys]
    root = str(tmp_path / "klake")
    code, err, _ = run_import(tmp_path, bucket, root)
    assert code == 0, err
    rows = Catalog.open(Store(f"{root}/_catalog", local.options)).live_segments("timeindex_test", 0)
    assert [r.base_offset for r in rows] == SEGMENTS
    for row in rows:
        assert read_bytes(row.log_key) == (SOURCE / f"{row.base_offset:020d}.log").read_bytes(), row.base_offset


@pytest.mark.spark
def test_export_restores_the_brokers_segments_from_the_bucket(spark, tmp_path: Path) -> None:
    """Export's tasks decrypt in the shared session's workers, which read the key ring its environment named
    when it started (tests/conftest.py): the ring is written there."""
    from jobs import export

    key_ring(Path(os.environ[KEY_RING_ENV]).parent, PAIR)

    local = Backend("local", str(tmp_path / "store"), StorageOptions())
    bucket, _ = make_bucket(tmp_path, local)
    root = str(tmp_path / "klake")
    assert run_import(tmp_path, bucket, root)[0] == 0
    code, _, err = run(export.SPEC, ["--root", root, "--topic", "timeindex_test", "--output", str(tmp_path / "out"),
                                     "--no-progress"])
    assert code == 0, err
    for base in SEGMENTS:
        name = f"{base:020d}.log"
        assert (tmp_path / "out" / "timeindex_test-0" / name).read_bytes() == (SOURCE / name).read_bytes(), name


@pytest.fixture
def bucket_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int | None, int | None]]]:
    """Every object read from an Aiven bucket (URI, range), and an empty manifest cache to start from."""
    reads: list[tuple[str, int | None, int | None]] = []
    real = aiven_file_io.AivenFileIO._get

    def spy(self: aiven_file_io.AivenFileIO, uri: str, start: int | None, end: int | None, what: str) -> bytes:
        reads.append((uri, start, end))
        return real(self, uri, start, end, what)

    monkeypatch.setattr(aiven_file_io.AivenFileIO, "_get", spy)
    aiven_file_io._manifests.clear()
    yield reads


def test_a_lookup_reads_the_manifest_and_the_chunks_holding_its_answer(
        tmp_path: Path, backend: Backend, key_ring_env: Path, bucket_reads: list) -> None:
    bucket, part = make_bucket(tmp_path, backend)
    root = backend.uri("klake")
    assert run_import(tmp_path, bucket, root)[0] == 0
    rows = Catalog.open(Store(f"{root}/_catalog", backend.options)).live_segments("timeindex_test", 0)
    for row, target in ((rows[1], 9000), (rows[2], 15363), (rows[3], 30000)):
        aiven_file_io._manifests.clear()
        bucket_reads.clear()
        item = range_read.WorkItem(row, None, row.size_bytes, range_read.ReadRange(from_offset=target,
                                                                                    to_offset=target + 1, floor=0))
        with metered() as meter:
            (batch,) = list(range_read.read_item(item, backend.store()))
        assert batch.column("offset").to_pylist() == [target]
        reads = list(bucket_reads)
        stem = row.log_key.removeprefix("aiven+").removeprefix("file://").removesuffix(".log")
        manifest_reads = [r for r in reads if r[0] == f"{stem}.rsm-manifest"]
        log_reads = [r for r in reads if r[0] == f"{stem}.log"]
        assert len(manifest_reads) == 1 and len(log_reads) == 1 and len(reads) <= 3, reads
        # the .log range is whole transformed chunks, and they hold the answer's batch
        manifest = file_io(row.log_key, backend.options).manifest(stem)  # type: ignore[attr-defined]
        index = manifest.chunk_index
        _, start, end = log_reads[0]
        first = next(c for c in map(index.chunk, range(len(index.transformed_sizes))) if c.transformed_position == start)
        chunks = [c for c in map(index.chunk, range(first.number, len(index.transformed_sizes)))
                  if c.transformed_position < end]
        assert chunks[-1].transformed_position + chunks[-1].transformed_size == end
        headers = scan_batches((SOURCE / f"{row.base_offset:020d}.log").read_bytes()).headers
        k = int((headers.last_offset >= target).argmax())
        at, size = int(headers.position[k]), int(headers.size[k])
        assert chunks[0].original_position <= at and at + size <= chunks[-1].original_position + chunks[-1].original_size
        assert len(chunks) <= 2, chunks  # a 4 KiB index interval of a 64 KiB chunk: one, or two at a boundary
        # every request of the lookup: the bucket's (manifest, chunks; indexes unless the root holds copies)
        # and at most the three sidecars the import copied under the root
        assert meter.requests["GET"] <= len(reads) + 3 and set(meter.requests) == {"GET"}, meter


@pytest.mark.parametrize("fault", ["missing manifest", "truncated chunk", "wrong key"])
def test_a_bad_bucket_fails_on_one_line_naming_the_object_and_writes_nothing_there(
        tmp_path: Path, backend: Backend, key_ring_env: Path, fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    made = tmp_path / "made"
    part = bucket_from_log_dir(SOURCE, made, chunk_size=CHUNK, compression=True, pair=PAIR)
    if fault == "missing manifest":
        bad = next(part.glob("*15363-*.rsm-manifest"))
        bad.unlink()
        expected = [bad.name, "missing"]
    elif fault == "truncated chunk":
        bad = next(part.glob("*22964-*.log"))
        bad.write_bytes(bad.read_bytes()[:-100])  # the last chunk cut short
        expected = [bad.name, "chunk", "truncated"]
    else:
        other = KeyPair("key-pair-1", RSA.generate(2048))  # same id, another key: the unwrap fails
        monkeypatch.setenv("KLAKE_AIVEN_KEY_RING", str(key_ring(tmp_path / "other", other)))
        expected = ["00000000000000000000-", ".rsm-manifest", "does not unwrap with key pair 'key-pair-1'", "wrong key"]
    bucket = backend.upload_tree(made, backend.uri("bucket"), skip_suffixes=()) + "/tiered"
    before = stored_state(bucket, backend)
    code, err, report = run_import(tmp_path, bucket, backend.uri("klake"))
    assert code == 1, err
    error = report["failures"][0]["error"]
    assert all(word in error for word in expected) and "\n" not in error, error
    assert stored_state(bucket, backend) == before


def test_the_hand_checked_upload_imports_and_reads_as_the_golden_records(tmp_path: Path) -> None:
    from jobs.cli.main import main as klake_main

    bucket = PROJECT_ROOT / "tests" / "fixtures" / "aiven" / "bucket"
    root = str(tmp_path / "klake")
    code, err, report = run_import(tmp_path, str(bucket), root)
    assert code == 0, err
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        assert klake_main(["consume", "--root", root, "--topic", "_confluent-command", "--format", "json"]) == 0
    golden = [json.loads(line) for line in (PROJECT_ROOT / "tests" / "fixtures" / "kafka" / "broker" / "_confluent-command-0"
                                           / "00000000000000000000.log.golden.jsonl").read_text().splitlines()]
    got = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(g["offset"], g["timestamp"]) for g in got] == [(g["offset"], g["timestamp"]) for g in golden]


@pytest.mark.spark
def test_spark_jobs_read_mirror_and_the_data_source_run_on_an_aiven_root(spark, tmp_path: Path) -> None:
    """The Spark side (tasks read the uploads in their own processes): a compressed bucket, since the shared
    session's workers were started before this test's key ring (a job's own session passes it on)."""
    import pyarrow.parquet as pq

    from jobs import klake_source, mirror
    from jobs import read as read_job
    from tests.kafka.runs import run_job

    local = Backend("local", str(tmp_path / "store"), StorageOptions())
    bucket, _ = make_bucket(tmp_path, local, pair=None)
    root = str(tmp_path / "klake")
    assert run_import(tmp_path, bucket, root)[0] == 0
    run_job(read_job.SPEC, tmp_path, "--root", root, "--topic", "timeindex_test", "--from-offset", "7000",
            "--to-offset", "16000", "--output", str(tmp_path / "read"))
    assert sorted(pq.read_table(tmp_path / "read", columns=["offset"]).column("offset").to_pylist()) == list(
        range(7000, 16000))
    klake_source.register(spark)
    frame = spark.read.format("klake").option("root", root).option("topic", "timeindex_test") \
        .option("startingOffset", "22900").option("endingOffset", "23100").load()
    assert sorted(r["offset"] for r in frame.select("offset").collect()) == list(range(22900, 23100))
    replica = str(tmp_path / "replica")
    run_job(mirror.SPEC, tmp_path, root, "--root", replica, "--topic", "timeindex_test")
    rows = Catalog.open(Store(f"{replica}/_catalog")).live_segments("timeindex_test", 0)
    assert [r.layout for r in rows] == ["object"] * 4  # a root of its own, holding the broker's bytes
    for row in rows:
        assert read_bytes(row.log_key) == (SOURCE / f"{row.base_offset:020d}.log").read_bytes()


def test_duplicate_uploads_are_chosen_by_the_end_offset_their_manifests_record_and_a_rerun_adds_nothing(
        tmp_path: Path, key_ring_env: Path) -> None:
    from tests.aiven_uploads import write_upload

    local = Backend("local", str(tmp_path / "store"), StorageOptions())
    made = tmp_path / "made"
    part = bucket_from_log_dir(SOURCE, made, chunk_size=CHUNK, compression=True, pair=PAIR)
    data = (SOURCE / f"{7729:020d}.log").read_bytes()
    headers = scan_batches(data).headers
    half = len(headers.size) // 2
    sidecars = {"offset": b"", "timestamp": b"", "producerSnapshot": b"", "leaderEpoch": b""}
    write_upload(part, 7729, "AAAAAAAAAAAAAAAAAAAAAA", data[:int(headers.position[half])], sidecars,
                 chunk_size=CHUNK, pair=PAIR)  # a retried copy that ends early
    write_upload(part, 15363, "zzzzzzzzzzzzzzzzzzzzzz", (SOURCE / f"{15363:020d}.log").read_bytes(), sidecars,
                 chunk_size=CHUNK)  # the same segment uploaded twice
    bucket = local.upload_tree(made, local.uri("bucket"), skip_suffixes=()) + "/tiered"
    root = str(tmp_path / "klake")
    code, err, report = run_import(tmp_path, bucket, root)
    assert code == 0, err
    aside = report["results"]["import"]["partitions"][0]["set_aside"]
    assert {uri.rsplit("/", 1)[1]: why for uri, why in aside.items()} == {
        f"{7729:020d}-AAAAAAAAAAAAAAAAAAAAAA.log":
            f"ends before offset {int(headers.last_offset[half - 1]) + 1}, the next upload starts at 15363",
        f"{15363:020d}-zzzzzzzzzzzzzzzzzzzzzz.log": "duplicate upload of the same start offset"}
    rows = Catalog.open(Store(f"{root}/_catalog")).live_segments("timeindex_test", 0)
    assert [r.base_offset for r in rows] == SEGMENTS and rows[-1].next_offset == 30565
    code, err, report = run_import(tmp_path, bucket, root)
    assert code == 0, err
    assert {s["status"] for s in report["results"]["import"]["partitions"][0]["segments"]} == {"already-registered"}
    assert len(Catalog.open(Store(f"{root}/_catalog")).live_segments("timeindex_test", 0)) == 4


def test_a_reimport_forgets_the_uploads_the_brokers_remote_retention_deleted(tmp_path: Path, key_ring_env: Path) -> None:
    local = Backend("local", str(tmp_path / "store"), StorageOptions())
    bucket, _ = make_bucket(tmp_path, local)
    root = str(tmp_path / "klake")
    assert run_import(tmp_path, bucket, root)[0] == 0
    oldest = sorted(Path(bucket).rglob("00000000000000000000-*"))
    assert len(oldest) == 3
    for f in oldest:
        f.unlink()
    code, err, report = run_import(tmp_path, bucket, root)
    assert code == 0, err
    (log,) = [f for f in oldest if f.suffix == ".log"]
    assert report["results"]["import"]["partitions"][0]["forgotten"] == [f"aiven+file://{log}"]
    assert [r.base_offset for r in Catalog.open(Store(f"{root}/_catalog")).live_segments("timeindex_test", 0)] == SEGMENTS[1:]


def test_scrub_checks_an_aiven_roots_rows_against_the_bucket_and_deletes_nothing_there(tmp_path: Path,
                                                                                      key_ring_env: Path) -> None:
    from engine.ops.scrub import scrub

    local = Backend("local", str(tmp_path / "store"), StorageOptions())
    bucket, _ = make_bucket(tmp_path, local)
    root = str(tmp_path / "klake")
    assert run_import(tmp_path, bucket, root)[0] == 0
    catalog = Catalog.open(Store(f"{root}/_catalog"))
    report = scrub(Store(root), catalog, grace_ms=0)
    assert report.missing == [] and report.size_mismatches == [] and report.orphans == []
    next(Path(bucket).rglob("*15363-*.rsm-manifest")).unlink()  # the upload no longer reads
    aiven_file_io._manifests.clear()
    before = stored_state(bucket, local)
    report = scrub(Store(root), catalog, grace_ms=0)
    (row,) = [r for r in catalog.live_segments("timeindex_test", 0) if r.base_offset == 15363]
    assert {(m.kind, m.key) for m in report.missing} == {
        (kind, key) for kind, key in (("log", row.log_key), ("index", row.index_key), ("timeindex", row.timeindex_key))
        if key.startswith("aiven+")}
    assert ("log", row.log_key) in {(m.kind, m.key) for m in report.missing} and report.orphans == []
    assert stored_state(bucket, local) == before


def test_a_reading_job_that_meets_a_bad_upload_names_it_on_one_line(tmp_path: Path, key_ring_env: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from jobs.cli.main import main as klake_main

    local = Backend("local", str(tmp_path / "store"), StorageOptions())
    bucket, _ = make_bucket(tmp_path, local)
    root = str(tmp_path / "klake")
    assert run_import(tmp_path, bucket, root)[0] == 0
    aiven_file_io._manifests.clear()  # a later process: the data keys are unwrapped again
    monkeypatch.delenv("KLAKE_AIVEN_KEY_RING")
    before = stored_state(bucket, local)
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        code = klake_main(["consume", "--root", root, "--topic", "timeindex_test", "--from", "30000", "--format", "json"])
    assert code == 2 and len(err.getvalue().splitlines()) == 1, err.getvalue()
    assert "22964-" in err.getvalue() and ".rsm-manifest: the segment is encrypted (key pair 'key-pair-1'); set " \
        "KLAKE_AIVEN_KEY_RING" in err.getvalue()
    assert "PRIVATE KEY" not in err.getvalue() and stored_state(bucket, local) == before
