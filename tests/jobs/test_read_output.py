"""`read --output` in Parquet: files written by the tasks and committed by the driver; a read without
`--output` counts; a corrupt batch fails either, naming segment and byte, and commits nothing.

Truth: a brute-force decode of every live segment (`tests.jobs.test_read_job.brute_force`); the output is
read back by pyarrow through the store (local and moto S3) and, locally, by Spark for its schema.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from engine.catalog.schema import table_to_rows
from engine.format.batch import V2_HEADER_SIZE, scan_batches
from engine.ops.catalog_table import Catalog
from engine.ops.read import KAFKA_ARROW_SCHEMA
from engine.ops.read_output import StagedOutput
from jobs import read
from jobs.runtime.job_runner import main
from kernel.names import TopicPartition
from layouts.store import StorageOptions, filesystem, list_objects, read_bytes
from layouts.store.bound import Store
from tests.conftest import Backend
from tests.jobs.test_read_job import EVENTS_CONFIG, NOW, _records, as_records, brute_force, expected
from tests.single_partition import append_to_partition

TOPIC = "events"


def _store(backend: Backend) -> tuple[str, Catalog]:
    root = backend.uri("root")
    catalog = Catalog.create(Store(f"{root}/_catalog", backend.options))
    rnd = random.Random(3)
    for partition in range(2):
        for step in range(2):
            append_to_partition(catalog, root, TopicPartition(TOPIC, partition),
                                _records(rnd, 50, NOW - 300_000 + step * 100_000), EVENTS_CONFIG, NOW, backend.options)
    return root, Catalog.open(Store(f"{root}/_catalog", backend.options))


def _run(root: str, tmp_path: Path, *args: str) -> tuple[int, dict]:
    report = tmp_path / f"report-{random.random()}.json"
    code = main(read.SPEC, ["--root", root, "--topic", TOPIC, "--report", str(report), "--no-progress", *args])
    return code, json.loads(report.read_text())


def _output(uri: str, backend: Backend) -> tuple[list[str], pa.Table]:
    """The output directory's object names (relative), and its Parquet files read back by pyarrow."""
    names = [info.uri[len(uri) + 1:] for info in list_objects(uri, backend.options)]
    fs, path = filesystem(uri, backend.options)
    parts = [pq.read_table(f"{path}/{name}", filesystem=fs) for name in names if name.startswith("part-")]
    return names, pa.concat_tables(parts)


def test_parquet_output_is_written_by_the_tasks_and_replaces_the_last_run(backend: Backend, spark, tmp_path: Path
                                                                          ) -> None:
    root, catalog = _store(backend)
    everything = brute_force(catalog, backend)
    out = backend.uri("out")
    backend.store().write(f"{out}/part-00000-earlier.snappy.parquet", b"an earlier run's file")
    backend.store().write(f"{out}/_temporary/killed-run/part-00001-attempt-9.snappy.parquet", b"debris")

    code, report = _run(root, tmp_path, "--output", out, "--pack-bytes", "2000", "--set", "jobs.driver_max_bytes=0")
    assert code == 0 and report["results"]["executed_in"] == "spark"  # Spark's tasks write (small reads: the driver)
    job = report["job_id"]
    names, table = _output(out, backend)
    parts = [n for n in names if n.startswith("part-")]
    assert names == ["_SUCCESS", *parts] and len(parts) > 1 and all(job in n for n in parts)
    assert table.schema == KAFKA_ARROW_SCHEMA
    assert as_records(table) == expected(everything, TOPIC)
    assert report["results"]["read"]["records"] == table.num_rows and report["requests"]["PUT"] >= len(parts)
    if backend.name == "local":  # Spark reads the files as its Kafka source's schema
        assert spark.read.parquet(out).schema == spark.createDataFrame([], read.KAFKA_SCHEMA).schema

    code, report = _run(root, tmp_path, "--output", out, "--to-offset", "20", "--partition", "1")
    assert code == 0
    names, table = _output(out, backend)
    assert all(report["job_id"] in n for n in names if n.startswith("part-")) and names[0] == "_SUCCESS"
    assert as_records(table) == expected(everything, TOPIC, to_offset=20, partitions={1})

    code, report = _run(root, tmp_path, "--output", out, "--from-offset", "100000")  # nothing in range
    names, table = _output(out, backend)
    assert code == 0 and len(names) == 2 and table.num_rows == 0 and table.schema == KAFKA_ARROW_SCHEMA


def _corrupt_one_batch(catalog: Catalog, partition: int) -> tuple[str, int]:
    """Flip a byte inside the records of a batch in the middle of a segment of `partition` (its CRC no
    longer matches); the segment's file and the batch's byte position."""
    row = next(r for r in table_to_rows(catalog.segments(topic=TOPIC)) if r.partition == partition)
    data = bytearray(read_bytes(row.log_key))
    headers = scan_batches(bytes(data), row.log_key).headers
    position = int(headers.position[len(headers.position) // 2])
    data[position + V2_HEADER_SIZE + 1] ^= 0xFF
    Path(row.log_key).write_bytes(bytes(data))
    return Path(row.log_key).name, position


def test_a_corrupt_batch_fails_the_read_naming_segment_and_byte_and_commits_nothing(spark, tmp_path: Path,
                                                                                   capsys) -> None:
    backend = Backend("local", str(tmp_path / "store"), StorageOptions())
    root, catalog = _store(backend)
    out = backend.uri("out")
    assert _run(root, tmp_path, "--output", out)[0] == 0
    before = {name: read_bytes(f"{out}/{name}") for name in _output(out, backend)[0]}
    segment, position = _corrupt_one_batch(catalog, 1)

    for extra in ([], ["--output", out]):
        capsys.readouterr()
        code, report = _run(root, tmp_path, *extra)
        assert code == 1
        (failure,) = report["failures"]
        assert failure["partition"] == f"{TOPIC}-1"
        assert segment in failure["error"] and f"byte {position}: crc" in failure["error"]
        printed = capsys.readouterr().out
        assert f"byte {position}: crc" in printed and ("nothing written" in printed) == bool(extra)
    assert {name: read_bytes(f"{out}/{name}") for name in _output(out, backend)[0]} == before


def test_a_commit_publishes_the_succeeded_attempts_only(tmp_path: Path) -> None:
    """Attempts that failed or lost (their files are not in the tasks' results) are not published."""
    output = StagedOutput(Store(str(tmp_path / "out")), "job-1")
    table = pa.table({"offset": pa.array([1, 2], pa.int64())})
    Path(output.staging).mkdir(parents=True)
    for task, attempt in ((0, 4), (0, 5), (1, 6)):
        pq.write_table(table, output.attempt_uri(task, attempt))
    published = output.commit({0: output.attempt_uri(0, 5), 1: output.attempt_uri(1, 6)}, table.schema)
    assert published == [output.final_uri(0), output.final_uri(1)]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "_SUCCESS", "part-00000-job-1.snappy.parquet", "part-00001-job-1.snappy.parquet"]
