"""`klake mirror` end to end on local Spark: a local root to a moto S3 bucket and back, a killed run
finished by re-running the same command, and bad input (exit 2, nothing written).

Truth: kafka-python's decoding of every live segment on both sides, and the offset map checked
against a brute-force pairing of the records in log order."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.log.topic_config import TopicConfig
from engine.names import TopicPartition
from engine.ops.catalog_table import Catalog
from engine.ops.topic_store import save_topic_config
from jobs import mirror
from jobs.runtime.job_runner import main
from layouts.store import list_objects, read_bytes
from layouts.store.bound import Store
from tests.conftest import Backend
from tests.jobs.test_jobs import NOW, input_table, killing
from tests.oracles.kafka_python import read_with_kafka_python
from tests.single_partition import append_to_partition

pytestmark = pytest.mark.spark

CONFIG = TopicConfig.from_mapping({"segment.bytes": 2000, "index.interval.bytes": 300})
TPS = [TopicPartition("events", 0), TopicPartition("events", 1)]


def _records(root: str, tp: TopicPartition, options) -> list[tuple]:
    catalog = Catalog.open(Store(f"{root}/_catalog", options))
    out = []
    for row in catalog.live_segments(tp.topic, tp.partition):
        out += read_with_kafka_python(read_bytes(row.log_key, options))[0]
    return out


def _run(tmp_path: Path, source: str, dest: str, *args: str) -> tuple[int, dict]:
    report = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.json"
    code = main(mirror.SPEC, [source, "--root", dest, "--now", str(NOW), "--no-progress", "--report", str(report),
                              *args])
    return code, json.loads(report.read_text())


@pytest.mark.s3
def test_mirror_job_local_to_s3_and_back_finishes_a_killed_run(spark, tmp_path: Path, s3_backend: Backend,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    options = s3_backend.options
    a, b, c = str(tmp_path / "a"), s3_backend.uri("b"), str(tmp_path / "c")
    source = Catalog.create(Store(f"{a}/_catalog", options))
    save_topic_config(Store(a, options), "events", CONFIG)
    for i, tp in enumerate(TPS):
        append_to_partition(source, a, tp, input_table(120, seed=i), CONFIG, NOW, options)
    truth = {tp: _records(a, tp, options) for tp in TPS}

    with monkeypatch.context() as patch:
        patch.setattr(Catalog, "apply", killing("mirror"))
        code, report = _run(tmp_path, a, b, "--offsets", "remap")
    assert code == 1 and "killed" in report["failures"][0]["error"]
    code, report = _run(tmp_path, a, b, "--offsets", "remap")  # the same command finishes it
    assert code == 0, report["failures"]
    for tp in TPS:
        assert _records(b, tp, options) == truth[tp]  # an empty destination: offsets re-assigned from 0
        maps = [o.uri for o in list_objects(f"{b}/_mirror/{tp.dir_name}", options)]
        assert len(maps) == 1
        table = pq.read_table(pa.BufferReader(read_bytes(maps[0], options)))
        mapped = {o: d + o - s for s, last, d in zip(*(table[n].to_pylist() for n in table.column_names), strict=True)
                  for o in range(s, last + 1)}
        assert [mapped[r[0]] for r in truth[tp]] == [r[0] for r in _records(b, tp, options)]
    code, report = _run(tmp_path, a, b)
    assert code == 0 and report["results"]["mirror"]["segments_written"] == 0  # nothing lacking

    code, report = _run(tmp_path, b, c, "--offsets", "preserve", "--topic", "events")
    assert code == 0, report["failures"]
    for tp in TPS:
        assert _records(c, tp, options) == truth[tp]
    assert report["results"]["mirror"]["segments_written"] == sum(
        len(Catalog.open(Store(f"{b}/_catalog", options)).live_segments(tp.topic, tp.partition)) for tp in TPS)

    code, report = _run(tmp_path, a, str(tmp_path / "d"), "--topic", "nope")
    assert code == 2 and "nope" in report["failures"][0]["error"]
    assert not (tmp_path / "d" / "_catalog").exists()


def test_mirror_dry_run_reports_each_partition_and_writes_nothing(spark, tmp_path: Path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    source = Catalog.create(Store(f"{a}/_catalog"))
    save_topic_config(Store(a), "events", CONFIG)
    for i, tp in enumerate(TPS):
        append_to_partition(source, a, tp, input_table(80, seed=i), CONFIG, NOW, None)
    code, report = _run(tmp_path, a, b, "--offsets", "remap", "--dry-run")
    assert code == 0, report["failures"]
    assert report["dry_run"] and not (tmp_path / "b").exists()
    for tp in TPS:
        last = _records(a, tp, None)[-1][0]
        line = next(s for s in report["summary"].splitlines() if s.startswith(f"{tp}: remap: would write"))
        assert f"of source offsets 0..{last}; log end offset would be {last + 1}" in line
    assert report["results"]["mirror"]["batches_copied"] == 0 and report["results"]["mirror"]["batches_to_copy"] > 0
