"""`import --layout kafka-rsm` on buckets made from a real broker's segments (issue 31): the `LocalTieredStorage`
names, duplicate uploads of a start offset, and bad buckets (a missing object, a truncated `.log`, a root inside
the bucket) named on one line with nothing written into the bucket.

The uploads are the four segments of `tests/fixtures/kafka/broker/timeindex_test-0` (written by a Kafka broker),
named as `LocalTieredStorage` names its file sets; what they hold is checked against the fixture's own offsets.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from engine.format.batch import scan_batches
from engine.names import TopicPartition
from engine.ops.catalog_table import Catalog
from jobs import import_log
from jobs.runtime.job_runner import main
from layouts.kafka_rsm_layout import parse_upload_dir
from layouts.store import list_objects, read_bytes
from layouts.store.bound import Store
from tests.conftest import Backend

TOPIC_ID = "p59PN4qkR8y176nhuDDPPA"
UUIDS = ["wCh7lSDPSy-dIdBYswqpew", "_ErN8CURTHOgDN1Uesu-Cw", "67MybqKuR2m2kDbNf6KF1w", "GTOPzGE8ReWLmyKMib5R_g"]


def make_bucket(kafka_fixtures: Path, where: Path, padded: bool = True) -> Path:
    """The fixture partition's segments as `LocalTieredStorage` uploads (with an empty snapshot and epoch file)."""
    source = kafka_fixtures / "broker" / "timeindex_test-0"
    part = where / "kafka-tiered-storage" / f"timeindex_test-0-{TOPIC_ID}"
    part.mkdir(parents=True)
    for log, uuid in zip(sorted(source.glob("*.log")), UUIDS, strict=True):
        offset = int(log.stem)
        stem = part / f"{offset:020d}-{uuid}" if padded else part / f"{offset}-{uuid}"
        for suffix in ("log", "index", "timeindex"):
            shutil.copyfile(log.with_suffix(f".{suffix}"), f"{stem}.{suffix}")
        for suffix in ("snapshot", "leader_epoch_checkpoint"):
            Path(f"{stem}.{suffix}").write_bytes(b"")
    return where


def state(path: Path) -> dict[str, tuple[int, int, bytes]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(path.rglob("*")) if p.is_file()}


def run_import(report: Path, *argv: str) -> tuple[int, str, dict]:
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = main(import_log.SPEC, [*argv, "--layout", "kafka-rsm", "--no-progress", "--report", str(report)])
    return code, err.getvalue(), json.loads(report.read_text()) if report.exists() else {}


def test_upload_directories_are_topic_partition_and_topic_id_even_with_dashes() -> None:
    assert parse_upload_dir(f"a-b-0-12-{TOPIC_ID}") == (TopicPartition("a-b-0", 12), TOPIC_ID)
    assert parse_upload_dir("t-3--abcdefghijklmnopqrstu") == (TopicPartition("t", 3), "-abcdefghijklmnopqrstu")
    assert parse_upload_dir(f"t-{TOPIC_ID}") is None and parse_upload_dir("t-0-short") is None
    assert parse_upload_dir(f"..-0-{TOPIC_ID}") is None  # no valid topic name


@pytest.mark.parametrize("padded", [True, False])
def test_uploads_are_catalogued_in_place_and_duplicates_set_aside(kafka_fixtures: Path, tmp_path: Path,
                                                                  padded: bool) -> None:
    bucket = make_bucket(kafka_fixtures, tmp_path / "bucket", padded)
    part = next((bucket / "kafka-tiered-storage").iterdir())
    second = next(part.glob("*7729-*.log"))
    data = second.read_bytes()
    headers = scan_batches(data).headers
    cut = int(headers.position[len(headers.size) // 2])  # a retried upload cut at a batch boundary: ends early
    for suffix in ("index", "timeindex", "snapshot", "leader_epoch_checkpoint"):
        shutil.copyfile(second.with_suffix(f".{suffix}"), part / f"{second.stem.split('-')[0]}-AAAAAAAAAAAAAAAAAAAAAA.{suffix}")
    (part / f"{second.stem.split('-')[0]}-AAAAAAAAAAAAAAAAAAAAAA.log").write_bytes(data[:cut])
    third = next(part.glob("*15363-*.log"))  # the same upload twice (another uuid): one is kept
    for f in part.glob(f"{third.stem}.*"):
        shutil.copyfile(f, part / f.name.replace(third.stem.split("-", 1)[1], "zzzzzzzzzzzzzzzzzzzzzz"))
    before = state(bucket)

    root = str(tmp_path / "klake")
    code, err, report = run_import(tmp_path / "report.json", str(bucket), "--root", root)
    assert code == 0, err
    outcome, = report["results"]["import"]["partitions"]
    aside = outcome["set_aside"]
    assert len(aside) == 2, aside
    ends_early = [why for uri, why in aside.items() if "AAAAAAAAAAAAAAAAAAAAAA" in uri]
    assert ends_early == [f"ends before offset {int(headers.last_offset[len(headers.size) // 2 - 1]) + 1}, "
                          "the next upload starts at 15363"]
    assert [why for uri, why in aside.items() if "AAAA" not in uri] == ["duplicate upload of the same start offset"]
    rows = Catalog.open(Store(f"{root}/_catalog")).live_segments("timeindex_test", 0)
    assert [r.base_offset for r in rows] == [0, 7729, 15363, 22964] and rows[-1].next_offset == 30565
    assert [r.next_offset for r in rows[:-1]] == [7729, 15363, 22964]
    assert all(r.layout == "kafka-rsm" and r.log_key.startswith(str(bucket)) for r in rows)
    assert state(bucket) == before  # nothing written into the bucket


def stored_state(uri: str, backend: Backend) -> dict[str, tuple[int, int, bytes]]:
    """Every object under `uri`, local or S3: size, mtime and bytes."""
    return {o.uri: (o.size, o.mtime_ms, read_bytes(o.uri, backend.options)) for o in list_objects(uri, backend.options)}


def test_a_missing_object_fails_its_partition_naming_it_and_writes_nothing_into_the_bucket(
        kafka_fixtures: Path, tmp_path: Path, backend: Backend) -> None:
    made = make_bucket(kafka_fixtures, tmp_path / "made")
    missing = next((made / "kafka-tiered-storage").rglob("*15363-*.index"))
    os.remove(missing)
    bucket = backend.upload_tree(made, backend.uri("bucket"), skip_suffixes=())
    before = stored_state(bucket, backend)
    code, err, report = run_import(tmp_path / "report.json", bucket, "--root", backend.uri("klake"))
    assert code == 1
    error = report["failures"][0]["error"]
    assert f"{missing.name} missing" in error and "offset 15363" in error and "\n" not in error
    assert stored_state(bucket, backend) == before


def test_a_truncated_log_fails_its_partition_naming_the_object_and_byte(kafka_fixtures: Path, tmp_path: Path,
                                                                      backend: Backend) -> None:
    made = make_bucket(kafka_fixtures, tmp_path / "made")
    last = next((made / "kafka-tiered-storage").rglob("*22964-*.log"))
    last.write_bytes(last.read_bytes()[:-7])  # a cut mid-batch
    bucket = backend.upload_tree(made, backend.uri("bucket"), skip_suffixes=())
    before = stored_state(bucket, backend)
    code, err, report = run_import(tmp_path / "report.json", bucket, "--root", backend.uri("klake"))
    assert code == 1
    error = report["failures"][0]["error"]
    assert last.name in error and "byte" in error
    assert stored_state(bucket, backend) == before


def test_a_root_inside_the_bucket_is_refused_on_one_line(kafka_fixtures: Path, tmp_path: Path) -> None:
    bucket = make_bucket(kafka_fixtures, tmp_path / "bucket")
    before = state(bucket)
    code, err, _ = run_import(tmp_path / "report.json", str(bucket), "--root", str(bucket / "klake"))
    assert code == 2 and len(err.splitlines()) == 1
    assert "lies inside the tiered-storage bucket" in err and "never writes into a bucket a broker owns" in err
    assert state(bucket) == before


def test_jobs_that_would_change_a_tiered_partition_refuse_on_one_line_and_reading_ones_answer(
        kafka_fixtures: Path, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs import append, compact, recover, retention, roll, truncate
    from jobs.cli.main import main as klake_main

    bucket = make_bucket(kafka_fixtures, tmp_path / "bucket")
    root = str(tmp_path / "klake")
    assert run_import(tmp_path / "report.json", str(bucket), "--root", root)[0] == 0
    before, catalog = state(bucket), state(tmp_path / "klake" / "_catalog")
    (tmp_path / "input").mkdir()
    pq.write_table(pa.table({"value": [b"v"], "partition": pa.array([0], pa.int32())}), tmp_path / "input" / "a.parquet")
    common = ["--root", root, "--topic", "timeindex_test", "--no-progress"]
    for spec, argv in ((retention.SPEC, ["--dry-run"]), (compact.SPEC, ["--force", "--set", "topics.timeindex_test.cleanup.policy=compact"]), (roll.SPEC, []),
                       (recover.SPEC, ["--dry-run"]), (recover.REBUILD_INDEX, []),
                       (truncate.SPEC, ["--partition", "0", "--offset", "9"]),
                       (truncate.DELETE_RECORDS, ["--partition", "0", "--offset", "9"]),
                       (append.SPEC, ["--input", str(tmp_path / "input"), "--format", "parquet"])):
        err = io.StringIO()
        with redirect_stderr(err), redirect_stdout(io.StringIO()):
            assert main(spec, [*common, *argv]) == 2, (spec.name, err.getvalue())
        assert len(err.getvalue().splitlines()) == 1, (spec.name, err.getvalue())
        assert f"{spec.name} would change timeindex_test-0, whose segments a broker's tiered storage owns" \
            in err.getvalue(), (spec.name, err.getvalue())
    assert state(bucket) == before and state(tmp_path / "klake" / "_catalog") == catalog  # nothing written

    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        assert klake_main(["topics", "--root", root, "--json"]) == 0
        assert klake_main(["consume", "--root", root, "--topic", "timeindex_test", "--from", "30560", "--format",
                           "json"]) == 0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["log_end_offset"] == 30565 and lines[0]["log_start_offset"] == 0
    assert [line["offset"] for line in lines[1:]] == [30560, 30561, 30562, 30563, 30564]


def test_a_copied_import_is_a_root_of_its_own_that_jobs_may_change(kafka_fixtures: Path, tmp_path: Path) -> None:
    from jobs import retention

    bucket = make_bucket(kafka_fixtures, tmp_path / "bucket")
    root = str(tmp_path / "klake")
    before = state(bucket)
    assert run_import(tmp_path / "report.json", str(bucket), "--root", root, "--copy")[0] == 0
    rows = Catalog.open(Store(f"{root}/_catalog")).live_segments("timeindex_test", 0)
    assert [r.base_offset for r in rows] == [0, 7729, 15363, 22964]
    assert {r.layout for r in rows} == {"object"} and all(r.log_key.startswith(root) for r in rows)
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        assert main(retention.SPEC, ["--root", root, "--dry-run", "--no-progress"]) == 0
    assert state(bucket) == before


def test_a_reimport_forgets_the_uploads_remote_retention_deleted_and_refuses_a_hole(kafka_fixtures: Path,
                                                                                    tmp_path: Path) -> None:
    from jobs.cli.main import main as klake_main

    bucket = make_bucket(kafka_fixtures, tmp_path / "bucket")
    part = next((bucket / "kafka-tiered-storage").iterdir())
    root = str(tmp_path / "klake")
    assert run_import(tmp_path / "first.json", str(bucket), "--root", root)[0] == 0
    first = sorted(part.glob("00000000000000000000-*"))
    for f in first:  # the broker's remote retention deleted the oldest upload
        f.unlink()
    code, err, report = run_import(tmp_path / "second.json", str(bucket), "--root", root)
    assert code == 0, err
    outcome, = report["results"]["import"]["partitions"]
    assert outcome["forgotten"] == [str(next(f for f in first if f.suffix == ".log"))]
    rows = Catalog.open(f"{root}/_catalog").live_segments("timeindex_test", 0)
    assert [r.base_offset for r in rows] == [7729, 15363, 22964]
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        assert klake_main(["topics", "--root", root, "--json"]) == 0
    assert json.loads(out.getvalue().splitlines()[0])["log_start_offset"] == 7729

    middle = sorted(part.glob("*15363-*"))
    for f in middle:  # a hole is no retention: reported, nothing forgotten
        f.unlink()
    code, err, report = run_import(tmp_path / "third.json", str(bucket), "--root", root)
    assert code == 1
    error = report["failures"][0]["error"]
    assert "15363" in error and "gone from the bucket while earlier ones remain" in error and "\n" not in error
    assert [r.base_offset for r in Catalog.open(f"{root}/_catalog").live_segments("timeindex_test", 0)] == [
        7729, 15363, 22964]
