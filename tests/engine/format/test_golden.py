"""Conformance against real broker / kafka-clients bytes: golden dumps and golden lookups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.cli.main import main
from tests.conftest import KAFKA_FIXTURES
from tests.golden import golden_path, golden_text

LOGS = sorted(p for p in KAFKA_FIXTURES.glob("*/*.records") if golden_path(p).exists()) + \
    sorted(KAFKA_FIXTURES.glob("broker/*/*.log"))
PARTITIONS = sorted(KAFKA_FIXTURES.glob("broker/*.lookups.golden.jsonl"))


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name[:60])
def test_dump_json_reproduces_golden_exactly(path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["dump", "--json", str(path)]) == 0
    assert capsys.readouterr().out == golden_text(path)


def test_every_magic_and_codec_is_covered() -> None:
    seen = set()
    for path in LOGS:
        for line in golden_text(path).splitlines():
            row = json.loads(line)
            seen.add((row["magic"], row["compression"]))
    assert {(m, c) for m in (0, 1) for c in ("none", "gzip", "snappy", "lz4")} | \
        {(2, c) for c in ("none", "gzip", "snappy", "lz4", "zstd")} <= seen


@pytest.mark.parametrize("golden", PARTITIONS, ids=lambda p: p.name[:40])
def test_lookup_reproduces_golden_answers(golden: Path, capsys: pytest.CaptureFixture) -> None:
    expected = golden.read_text().splitlines()
    targets = [str(json.loads(line)["target"]) for line in expected]
    partition_dir = golden.parent / golden.name.removesuffix(".lookups.golden.jsonl")
    args = ["lookup", str(partition_dir)] + [arg for t in targets for arg in ("--timestamp", t)]
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines() == expected


def test_invalid_crc_record_set_fails_verify_naming_the_position(capsys: pytest.CaptureFixture) -> None:
    path = next(KAFKA_FIXTURES.glob("record-sets/*invalid_crc*.records"))
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{path}: byte 0: crc: stored CRC 0x58585858 but the magic-0 batch computes 0x7e196bb4"]


def test_invalid_crc_record_set_is_not_dumped_silently(capsys: pytest.CaptureFixture) -> None:
    path = next(KAFKA_FIXTURES.glob("record-sets/*invalid_crc*.records"))
    assert main(["dump", "--json", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "byte 0: crc" in captured.err


def test_broker_segments_and_sidecars_verify_clean(capsys: pytest.CaptureFixture) -> None:
    logs = sorted(str(p) for p in KAFKA_FIXTURES.glob("broker/timeindex_test-0/*.log"))
    assert main(["verify", *logs]) == 0
    assert capsys.readouterr().out == ""
