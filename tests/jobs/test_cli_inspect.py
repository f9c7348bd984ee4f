"""The inspection CLI on local paths and on S3 (moto): dump, verify, index rebuild, lookup."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.format.batch import scan_batches
from engine.format.builder import encode_batch
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from jobs.cli.main import main
from tests.conftest import KAFKA_FIXTURES, PROJECT_ROOT, Backend
from tests.index_lookups import first_batch_at_or_after_timestamp, position_for_offset

BROKER = KAFKA_FIXTURES / "broker" / "timeindex_test-0"


def _lines(capsys: pytest.CaptureFixture) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_console_script_dumps_golden(tmp_path: Path) -> None:
    path = KAFKA_FIXTURES / "kafka-clients" / "m2-zstd.records"
    klake = PROJECT_ROOT / ".venv" / "bin" / "klake"
    cmd = [str(klake)] if klake.exists() else [sys.executable, "-m", "jobs.cli.main"]
    out = subprocess.run([*cmd, "dump", "--json", str(path)], capture_output=True, text=True, check=True,
                         cwd=PROJECT_ROOT).stdout
    assert out == Path(f"{path}.golden.jsonl").read_text()


def test_dump_batches_json_and_table(capsys: pytest.CaptureFixture) -> None:
    path = KAFKA_FIXTURES / "kafka-clients" / "txn-abort.records"
    assert main(["dump", "--batches", "--json", str(path)]) == 0
    rows = [json.loads(line) for line in _lines(capsys)]
    assert [(r["base_offset"], r["last_offset"], r["control"], r["transactional"], r["producer_id"])
            for r in rows] == [(200, 202, False, True, 42), (203, 203, True, True, 42)]
    assert main(["dump", str(path)]) == 0
    table = _lines(capsys)
    assert len(table) == 4 and table[0].startswith("| offset: 200 CreateTime: 1700000000000 keySize: 2")
    assert "control: true" in table[-1]


def test_dump_of_several_files_dumps_each_in_order_under_its_name(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    first, second = (KAFKA_FIXTURES / "kafka-clients" / name for name in ("m2-zstd.records", "m0-gzip.records"))
    missing = tmp_path / "no-such.log"

    def golden(path: Path) -> list[dict]:
        return [json.loads(line) for line in Path(f"{path}.golden.jsonl").read_text().splitlines()]

    assert main(["dump", "--json", str(first), str(missing), str(second)]) == 1
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()] == \
        [{**row, "file": str(first)} for row in golden(first)] + [{**row, "file": str(second)} for row in golden(second)]
    assert captured.err == f"problem: {missing}: No such file or directory\n"

    assert main(["dump", str(first), str(second)]) == 0
    table = _lines(capsys)
    headers = [i for i, line in enumerate(table) if line.startswith("Dumping ")]
    assert [table[i] for i in headers] == [f"Dumping {first}", f"Dumping {second}"]
    assert headers[0] == 0 and headers[1] - 1 == len(golden(first))
    assert [line.split()[2] for line in table if line.startswith("| offset: ")] == \
        [str(row["offset"]) for row in golden(first) + golden(second)]


def test_dump_reports_partial_trailing_batch_after_printing_valid_records(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    src = (KAFKA_FIXTURES / "kafka-clients" / "m2-none.records").read_bytes()
    path = tmp_path / "cut.records"
    path.write_bytes(src + src[:100])
    assert main(["dump", "--json", str(path)]) == 1
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 5
    assert f"{path}: byte {len(src)}: size: batch declares" in captured.err


def _broker_copy(tmp_path: Path) -> Path:
    target = tmp_path / "timeindex_test-0"
    shutil.copytree(BROKER, target, ignore=shutil.ignore_patterns("*.jsonl"))
    for f in target.iterdir():
        f.chmod(0o644)
    return target


def test_index_rebuild_answers_like_the_broker_indexes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    log = BROKER / "00000000000000007729.log"
    assert main(["index", "rebuild", str(log), "--out", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["batches"] == 7634 and report["index_entries"] > 0
    data = log.read_bytes()
    headers = scan_batches(data, str(log)).headers
    rebuilt = (OffsetIndex.load((tmp_path / log.name.replace(".log", ".index")).read_bytes(), 7729).index,
               TimeIndex.load((tmp_path / log.name.replace(".log", ".timeindex")).read_bytes(), 7729,
                              min_timestamp=0).index)
    broker = (OffsetIndex.load(log.with_suffix(".index").read_bytes(), 7729).index,
              TimeIndex.load(log.with_suffix(".timeindex").read_bytes(), 7729, min_timestamp=0).index)
    for offset in range(7729, 7729 + 7634, 7):
        assert position_for_offset(headers, rebuilt[0], offset) == position_for_offset(headers, broker[0], offset)
    for ts in np.unique(headers.max_timestamp)[::5].tolist():
        assert first_batch_at_or_after_timestamp(headers, *rebuilt, ts) == \
            first_batch_at_or_after_timestamp(headers, *broker, ts)


def test_untrimmed_timeindex_is_reported_and_lookup_stays_correct(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    """KAFKA-10207: a zero-padded .timeindex must not make the segment look ancient."""
    part = _broker_copy(tmp_path)
    ti = part / "00000000000000000000.timeindex"
    ti.write_bytes(ti.read_bytes() + bytes(12 * 1000))
    assert main(["verify", str(part / "00000000000000000000.log")]) == 1
    problems = _lines(capsys)
    assert any("00000000000000000000.timeindex: byte 3000" in line for line in problems)
    golden = [json.loads(line) for line in (KAFKA_FIXTURES / "broker" / "timeindex_test-0.lookups.golden.jsonl")
              .read_text().splitlines()]
    targets = [g["target"] for g in golden[:60]]
    assert main(["lookup", str(part), *[a for t in targets for a in ("--timestamp", str(t))]]) == 0
    assert [json.loads(line) for line in _lines(capsys)] == golden[:60]


def test_missing_sidecars_are_rebuilt_in_memory(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    part = _broker_copy(tmp_path)
    for f in part.glob("*.index"):
        f.unlink()
    golden = (KAFKA_FIXTURES / "broker" / "timeindex_test-0.lookups.golden.jsonl").read_text().splitlines()
    targets = [str(json.loads(line)["target"]) for line in golden]
    assert main(["lookup", str(part), *[a for t in targets for a in ("--timestamp", t)]]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == golden
    assert "00000000000000022964.index: missing" in captured.err


def _segment(path: Path, base: int, batches: list[tuple[list[int], int]]) -> None:
    """Write a segment of batches given as (timestamps, base offset)."""
    data = b"".join(encode_batch([b"k"] * len(ts), [b"v"] * len(ts), ts, base_offset=off) for ts, off in batches)
    (path / f"{base:020d}.log").write_bytes(data)


def test_lookup_falls_through_where_kafka_stops(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Spec 5.2 QUIRK: the first segment whose max >= target holds qualifying records only below the
    log start offset; Kafka answers "no result", klake continues in the next segment."""
    part = tmp_path / "t-0"
    part.mkdir()
    _segment(part, 0, [([100, 900], 0), ([200, 300], 2)])
    _segment(part, 4, [([400, 950], 4)])
    assert main(["lookup", str(part), "--timestamp", "800", "--log-start-offset", "2", "--timestamp", "-2",
                 "--timestamp", "-3", "--timestamp", "-1", "--timestamp", "960"]) == 0
    assert [json.loads(line) for line in _lines(capsys)] == [
        {"target": 800, "offset": 5, "timestamp": 950},
        {"target": -2, "offset": 2, "timestamp": -1},
        {"target": -3, "offset": 5, "timestamp": 950},
        {"target": -1, "offset": 6, "timestamp": -1},
        {"target": 960, "offset": -1, "timestamp": -1},
    ]


def test_max_timestamp_ignores_records_below_log_start(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    _segment(part, 0, [([100, 999], 0), ([200, 300], 2)])
    _segment(part, 4, [([400, 500], 4)])
    assert main(["lookup", str(part), "--timestamp", "-3", "--log-start-offset", "2"]) == 0
    assert json.loads(_lines(capsys)[0]) == {"target": -3, "offset": 5, "timestamp": 500}


def test_lookup_answers_iso_times_alike_in_every_time_zone() -> None:
    """A naive ISO time is UTC on every machine: the same command under TZ=America/New_York and TZ=UTC gives
    the same answers, and an ISO time answers as its epoch milliseconds do."""
    klake = PROJECT_ROOT / ".venv" / "bin" / "klake"
    cmd = [str(klake)] if klake.exists() else [sys.executable, "-m", "jobs.cli.main"]
    targets = ["2025-07-29T19:58:37.913", "2025-07-29T15:58:37.913-04:00", "1753819117913", "2025-07-29", "latest"]
    outputs = []
    for zone in ("America/New_York", "UTC"):
        env = {**os.environ, "TZ": zone}
        outputs.append(subprocess.run([*cmd, "lookup", str(BROKER), *[a for t in targets for a in ("--timestamp", t)]],
                                      capture_output=True, text=True, check=True, cwd=PROJECT_ROOT, env=env).stdout)
    assert outputs[0] == outputs[1]
    answers = [json.loads(line) for line in outputs[0].splitlines()]
    golden = {"target": 1753819117913, "offset": 212, "timestamp": 1753819117914}
    assert answers[:3] == [golden] * 3
    assert answers[3] == {"target": 1753747200000, "offset": 0, "timestamp": 1753819116820}  # 2025-07-29T00:00Z
    assert answers[4]["target"] == -1


def test_cli_on_s3_and_local_alike(backend: Backend, capsys: pytest.CaptureFixture) -> None:
    root = backend.upload_tree(KAFKA_FIXTURES / "broker" / "docker-connect-status-0",
                               backend.uri("logs", "docker-connect-status-0"))
    log = f"{root}/00000000000000000000.log"
    assert main(["dump", "--json", log]) == 0
    assert capsys.readouterr().out == (KAFKA_FIXTURES / "broker" / "docker-connect-status-0" /
                                       "00000000000000000000.log.golden.jsonl").read_text()
    golden = (KAFKA_FIXTURES / "broker" / "docker-connect-status-0.lookups.golden.jsonl").read_text().splitlines()
    targets = [str(json.loads(line)["target"]) for line in golden]
    assert main(["lookup", root, *[a for t in targets for a in ("--timestamp", t)]]) == 0
    assert capsys.readouterr().out.splitlines() == golden
    assert main(["index", "rebuild", log]) == 0
    capsys.readouterr()
    assert main(["verify", log]) == 0


def test_verify_allows_the_active_segment_to_lack_the_final_time_entry(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """Spec 2.6: the final time-index entry is written at roll; the newest segment of a live broker's
    directory has not rolled yet. An older segment without it is reported (its largest timestamp
    would be under-estimated)."""
    part = _broker_copy(tmp_path)
    for name in ("00000000000000015363", "00000000000000022964"):
        ti = part / f"{name}.timeindex"
        ti.write_bytes(ti.read_bytes()[:-12])
    assert main(["verify", str(part / "00000000000000022964.log")]) == 0
    assert main(["verify", str(part / "00000000000000015363.log")]) == 1
    assert "final entry missing" in capsys.readouterr().out


def test_a_corrupt_record_names_its_batch_and_the_other_batches_still_dump(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    import struct

    import crc32c

    good = encode_batch([b"a"], [b"1"], [10], base_offset=0)
    bad = bytearray(encode_batch([b"b", b"c"], [b"2", b"3"], [11, 12], base_offset=1))
    struct.pack_into(">i", bad, 57, 5)  # declares 5 records, holds 2
    struct.pack_into(">I", bad, 17, crc32c.crc32c(bytes(bad[21:])))
    tail = encode_batch([b"d"], [b"4"], [13], base_offset=3)
    path = tmp_path / "x.records"
    path.write_bytes(good + bytes(bad) + tail)
    assert main(["dump", "--json", str(path)]) == 1
    captured = capsys.readouterr()
    assert [json.loads(line)["offset"] for line in captured.out.splitlines()] == [0, 3]
    assert f"{path}: byte {len(good)}: recordsCount: batch declares 5 records" in captured.err
    assert main(["verify", str(path)]) == 1
    assert capsys.readouterr().out.startswith(f"{path}: byte {len(good)}: recordsCount")
