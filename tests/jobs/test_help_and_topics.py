"""Help and inspection (issue 26, item 6): short --help texts whose examples parse, `--version`, `topics`,
`consume`, `lookup` on a klake partition folder and the `segments` table, checked against the broker's
files decoded by kafka-python (brute force) and the catalog's rows."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from engine.names import TopicPartition
from engine.ops.catalog_table import Catalog
from jobs.cli import main as cli
from layouts.store.bound import Store
from tests.conftest import KAFKA_FIXTURES, PROJECT_ROOT
from tests.single_partition import delete_records

BROKER = KAFKA_FIXTURES / "broker" / "timeindex_test-0"
TOPIC = "timeindex_test"
HELP_LINES = 28  # "at most about 25": the longest (segments, consume) take 27 at 80 columns
COMMANDS = [*cli._JOB_SPECS, *(c for c in cli._COMMAND_MODULES if c not in ("index", "submit")), "index rebuild"]


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int
    key: str | None
    value: str | None
    headers: list[list[str]]


def broker_records() -> list[Record]:
    """Every record of the broker fixture's segments, decoded by kafka-python."""
    records = []
    for log in sorted(BROKER.glob("*.log")):
        batches = MemoryRecords(log.read_bytes())
        while (batch := batches.next_batch()) is not None:
            records += [Record(r.offset, r.timestamp, r.key and r.key.decode(), r.value and r.value.decode(),
                               [[k, v.decode()] for k, v in r.headers]) for r in batch]
    return records


def _help(command: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exit_:
        cli.main([*command.split(), "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_short_in_a_users_words_and_its_example_parses(command: str, capsys: pytest.CaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    text = _help(command, capsys, monkeypatch)
    assert len(text.splitlines()) <= HELP_LINES, text
    assert not re.search(r"issue \d|\b(engine|layouts)\.[a-z]|jobs/|\.py\b", text), text
    lines = text.splitlines()
    example = shlex.split(lines[lines.index("example:") + 1])
    assert example[0] == "klake" and " ".join(example[1:]).startswith(command)
    # on the tour's root (or the shared fixtures); the demo's example makes that root
    assert "demo-output" in " ".join(example) or "fixtures" in " ".join(example) or example == ["klake", "demo", "--local"]
    args = cli.build_parser(example[1]).parse_args(example[1:])  # exits 2 on an argument it does not know
    assert args.handler is not None


def test_version_is_the_installed_packages(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"klake {importlib.metadata.version('klake')}"


class Root:
    """The broker fixture imported (copied) into a klake root: the catalog's rows are the fixture's files."""

    def __init__(self, tmp: Path) -> None:
        shutil.copytree(BROKER, tmp / "broker" / BROKER.name)
        self.path = tmp / "root"
        done = subprocess.run([sys.executable, "-m", "jobs.cli.main", "import", str(tmp / "broker"), "--copy",
                               "--root", str(self.path), "--no-progress"], cwd=PROJECT_ROOT, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr

    @cached_property
    def catalog(self) -> Catalog:
        return Catalog.open(Store(str(self.path / "_catalog")))

    def run(self, capsys: pytest.CaptureFixture, *argv: str) -> list[str]:
        assert cli.main(list(argv)) == 0
        return capsys.readouterr().out.splitlines()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Root:
    return Root(tmp_path_factory.mktemp("inspect"))


@pytest.fixture(scope="module")
def records() -> list[Record]:
    return broker_records()


def test_topics_describes_each_partition_as_the_broker_files_say(root: Root, records: list[Record],
                                                                 capsys: pytest.CaptureFixture) -> None:
    (row,) = [json.loads(line) for line in root.run(capsys, "topics", "--root", str(root.path), "--json")]
    assert {k: row[k] for k in ("topic", "partition", "log_start_offset", "log_end_offset", "segments",
                                "size_bytes", "oldest_timestamp", "newest_timestamp")} == {
        "topic": TOPIC, "partition": 0, "log_start_offset": records[0].offset,
        "log_end_offset": records[-1].offset + 1, "segments": len(list(BROKER.glob("*.log"))),
        "size_bytes": sum(log.stat().st_size for log in BROKER.glob("*.log")),
        "oldest_timestamp": min(r.timestamp for r in records), "newest_timestamp": max(r.timestamp for r in records)}
    assert row["settings"]["cleanup.policy"] == "delete"
    text = root.run(capsys, "topics", "--root", str(root.path), "--topic", TOPIC)
    assert text[0].startswith(f"Topic: {TOPIC}\tPartitionCount: 1")
    assert f"LogEndOffset: {records[-1].offset + 1}\t" in text[1]


def test_consume_prints_the_records_a_consumer_gets(root: Root, records: list[Record],
                                                    capsys: pytest.CaptureFixture) -> None:
    def consumed(*argv: str) -> list[Record]:
        lines = root.run(capsys, "consume", "--root", str(root.path), "--topic", TOPIC, "--format", "json", *argv)
        rows = [json.loads(line) for line in lines]
        assert {(r["topic"], r["partition"]) for r in rows} <= {(TOPIC, 0)}
        return [Record(r["offset"], r["timestamp"], r["key"], r["value"], r["headers"]) for r in rows]

    assert consumed("-c", "4") == records[:4]
    at = next(i for i, r in enumerate(records) if r.offset == 20_000)  # inside the third segment
    assert consumed("--from", "20000", "-c", "5", "--partition", "0") == records[at:at + 5]
    moment = records[at].timestamp
    assert consumed("--from", f"@{moment}", "-c", "3") == [r for r in records if r.timestamp >= moment][:3]
    last = records[-2:]
    assert consumed("--from", str(last[0].offset)) == last  # to the log end, and no further
    text = root.run(capsys, "consume", "--root", str(root.path), "--topic", TOPIC, "-c", "2")
    assert text == [r.value for r in records[:2]]


def test_segments_table_leaves_the_object_keys_to_keys(root: Root, capsys: pytest.CaptureFixture) -> None:
    table = root.run(capsys, "segments", "--root", str(root.path))
    assert "log_key" not in table[0] and "state" in table[0] and len(table) == 1 + 4
    keyed = root.run(capsys, "segments", "--root", str(root.path), "--keys")
    assert keyed[0].split()[-1] == "log_key"
    keys = [row.log_key for row in root.catalog.live_segments(TOPIC, 0)]
    assert [line.split()[-1] for line in keyed[1:]] == keys


def test_lookup_on_a_klake_partition_folder_answers_as_on_the_broker_folder(
        root: Root, records: list[Record], capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """The catalog names the live segments (a folder also holds versions no row references); before and
    after a delete-records the answers are those of brute force over the records still in the log."""
    targets = [records[0].timestamp, records[5000].timestamp + 1, records[-1].timestamp, -1, -2, -3]

    def lookup(folder: Path) -> list[tuple[int, int]]:
        argv = ["lookup", str(folder)] + [f"--timestamp={t}" for t in targets]
        return [(a["offset"], a["timestamp"]) for a in map(json.loads, root.run(capsys, *argv))]

    def brute(kept: list[Record]) -> list[tuple[int, int]]:
        answers = []
        for t in targets[:3]:
            hit = next(r for r in kept if r.timestamp >= t)
            answers.append((hit.offset, hit.timestamp))
        top = max(kept, key=lambda r: (r.timestamp, -r.offset))
        return [*answers, (kept[-1].offset + 1, -1), (kept[0].offset, -1), (top.offset, top.timestamp)]

    folder = root.path / f"{TOPIC}-0"
    assert lookup(folder) == lookup(BROKER) == brute(records)
    start = 9_000  # inside the second segment: the first is retired, the second keeps its rows above 9000
    delete_records(root.catalog, str(root.path), TopicPartition(TOPIC, 0), start, now_ms=0)
    kept = [r for r in records if r.offset >= start]
    assert lookup(folder) == brute(kept)
    (row,) = [json.loads(line) for line in root.run(capsys, "topics", "--root", str(root.path), "--json")]
    assert row["log_start_offset"] == start and row["segments"] == 3
    lines = root.run(capsys, "consume", "--root", str(root.path), "--topic", TOPIC, "-c", "1", "--format", "json")
    assert json.loads(lines[0])["offset"] == start


def test_lookup_on_a_folder_without_catalog_or_broker_segments_says_what_it_lacks(
        root: Root, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    lone = tmp_path / f"{TOPIC}-0"
    shutil.copytree(root.path / f"{TOPIC}-0", lone)
    assert cli.main(["lookup", str(lone), "--timestamp", "-1"]) == 2
    error = capsys.readouterr().err
    assert "no NNNNNNNNNNNNNNNNNNNN.log segments" in error and f"no klake catalog at {tmp_path}/_catalog" in error
