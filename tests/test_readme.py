"""The README's shell blocks, run verbatim, so that the README cannot go stale.

Every ```sh block is run, in README order, unless `SKIPPED` names it (by its first line) with the
reason; every ```python block too, as one command (`.venv/bin/python -` with the block on its stdin),
whose `#>` lines (comments to Python) are what it must print. A block runs as one bash script (its
variables carry from line to line) with `pipefail`, so a failing command before `| head` fails too; each
command's exit code and output are captured on their own. The commands run in a scratch directory laid out like a clone: `.venv/bin/klake` there runs this
checkout's code with the Python running the tests (a fresh clone's own `.venv` in CI), and
`tests/fixtures` is the checkout's (the Kafka fixtures the examples read). The tour's first command is
the demo itself (`klake demo --local`), so every later command sees a fresh demo's output, made once.
The archive and restore examples read a live cluster, `$KAFKA_BOOTSTRAP`: the session's broker (always
there under `make test`), into which `seed_cluster` writes the topics and the consumer group they name.

Checked: each command exits 0 and prints something; each `#> text` line under a command appears in
what that command printed; and, against the demo's own input, the tour's ListOffsets answers are real
offsets at or after their target times and its time-range read returns exactly the input's records of
that range.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import PROJECT_ROOT
from tests.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.spark, pytest.mark.slow]

README = PROJECT_ROOT / "README.md"
SKIPPED = {  # a block's first line -> why it does not run here
    "make demo    # the main job on the embedded default: local Spark, an embedded S3 (moto), a Delta catalog":
        "they build .venv/ and run the embedded-S3 demo (tests/jobs/test_demo.py runs it) and this very suite",
    "export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...          # never in the config file":
        "needs real S3 credentials; `make dist` is tests/test_dist.py's",
    'S="spark-submit --master yarn"':
        "needs a YARN cluster and S3 buckets; tests/jobs/test_cluster.py submits to a local standalone cluster",
    ".venv/bin/klake import /var/lib/kafka/remote --layout kafka-rsm --root s3://archive/klake      # the plugin's dir":
        "needs a broker's tiered-storage bucket; tests/kafka/test_tiered_storage.py imports one and runs these jobs on it",
}
EXPECTED = "#> "
TIMEOUT_S = 1200


@dataclass
class Command:
    line: int  # in README.md
    text: str
    expected: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        words = [w for w in self.text.split("#", 1)[0].split() if re.fullmatch(r"[a-z][a-z-]*", w)]
        return "-".join([f"line{self.line}", *words[:2]])


@dataclass
class Block:
    line: int
    lines: list[str]
    language: str = "sh"

    @property
    def first(self) -> str:
        return self.lines[0] if self.lines else ""


def readme_blocks(text: str) -> list[Block]:
    """Every ```sh and ```python block with its README line number."""
    blocks, current = [], None
    for number, line in enumerate(text.splitlines(), 1):
        if current is None and line.strip() in ("```sh", "```python"):
            current = Block(number, [], line.strip()[3:])
        elif current is not None and line.strip() == "```":
            blocks.append(current)
            current = None
        elif current is not None:
            current.lines.append(line)
    return blocks


def commands(block: Block) -> list[Command]:
    """The block's commands (`\\` continuations joined), each with the `#>` lines under it; a Python
    block is one command."""
    if block.language == "python":
        code = "\n".join(block.lines)
        return [Command(block.line + 1, f".venv/bin/python - <<'PYTHON'\n{code}\nPYTHON",
                        [line[len(EXPECTED):] for line in block.lines if line.startswith(EXPECTED)])]
    found: list[Command] = []
    pending: Command | None = None
    for offset, line in enumerate(block.lines, 1):
        number = block.line + offset
        if pending is not None:
            pending.text += "\n" + line
        elif line.startswith(EXPECTED):
            assert found, f"README.md:{number}: a `#>` line before any command"
            found[-1].expected.append(line[len(EXPECTED):])
            continue
        elif not line.strip() or line.lstrip().startswith("#"):
            continue
        else:
            pending = Command(number, line)
        if not line.endswith("\\"):
            found.append(pending)
            pending = None
    return found


BLOCKS = readme_blocks(README.read_text())
RUN = [b for b in BLOCKS if b.first not in SKIPPED]
COMMANDS = [c for b in RUN for c in commands(b)]


def is_assignment(text: str) -> bool:
    """A line that only sets shell variables (`K=...; C="..."`): it prints nothing, rightly."""
    return re.fullmatch(r"""(\s*\w+=("[^"]*"|'[^']*'|[^\s;"']*)\s*;?)+\s*""", text) is not None


def test_every_block_runs_or_is_skipped_for_a_reason() -> None:
    firsts = [b.first for b in BLOCKS]
    assert sorted(k for k in SKIPPED if k in firsts) == sorted(SKIPPED), "a skipped block is no longer in the README"
    tour = [c for c in COMMANDS if not is_assignment(c.text)]
    assert re.search(r"\bdemo --local\b", tour[0].text), "the first command run makes the demo the others look at"


# --- running the blocks ----------------------------------------------------------------------------


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def clone_like(tmp: Path, fixtures: Path) -> Path:
    """A directory where the README's relative paths resolve: `.venv/bin/klake` running this
    checkout's code, and `tests/fixtures` the checkout's `fixtures`."""
    clone = tmp / "clone"
    (clone / ".venv" / "bin").mkdir(parents=True)
    shim = clone / ".venv" / "bin" / "klake"
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(PROJECT_ROOT))}"${{PYTHONPATH:+:$PYTHONPATH}}" '
                    f'exec {shlex.quote(sys.executable)} -m jobs.cli.main "$@"\n')
    shim.chmod(0o755)
    python = clone / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(PROJECT_ROOT))}"${{PYTHONPATH:+:$PYTHONPATH}}" '
                      f'exec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    if (PROJECT_ROOT / ".cache").is_dir():  # the JVM sets `tests/oracles/fetch_jvm.py` resolved (delta-spark)
        (clone / ".cache").symlink_to(PROJECT_ROOT / ".cache", target_is_directory=True)
    (clone / "tests").mkdir()
    (clone / "tests" / "fixtures").symlink_to(fixtures, target_is_directory=True)
    return clone


def seed_cluster(broker: KafkaBroker) -> None:
    """What the README's archive and restore examples read from `$KAFKA_BOOTSTRAP`: the topics `orders`
    (two partitions, 6 records each) and `payments`, and the group `billing`, committed mid-`orders`."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    broker.create_topic("orders", partitions=2, retention_ms=-1)
    broker.create_topic("payments", retention_ms=-1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(12):
        producer.send("orders", key=b"customer-%d" % (i % 5), value=b'{"order": %d}' % i, partition=i % 2,
                      headers=[("source", b"readme")])
    for i in range(5):
        producer.send("payments", key=b"customer-%d" % i, value=b'{"payment": %d}' % i)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="billing", enable_auto_commit=False)
    consumer.commit({TopicPartition("orders", 0): OffsetAndMetadata(4, "", -1),
                     TopicPartition("orders", 1): OffsetAndMetadata(2, "", -1)})
    consumer.close()


def run_block(block: Block, clone: Path, outputs: Path, bootstrap: str) -> dict[int, Outcome]:
    """One bash script per block, each command's output and exit code captured on their own; the cluster
    the examples name is `$KAFKA_BOOTSTRAP`."""
    script = ["set -o pipefail"]
    cmds = commands(block)
    for cmd in cmds:
        stem = shlex.quote(str(outputs / f"{cmd.line}"))
        script.append(f"{{ {cmd.text}\n}} >{stem}.out 2>{stem}.err; echo $? >{stem}.rc")
    subprocess.run(["bash", "-c", "\n".join(script)], cwd=clone, check=True, timeout=TIMEOUT_S,
                   env={**os.environ, "KAFKA_BOOTSTRAP": bootstrap})
    return {cmd.line: Outcome(int((outputs / f"{cmd.line}.rc").read_text()),
                              (outputs / f"{cmd.line}.out").read_text(), (outputs / f"{cmd.line}.err").read_text())
            for cmd in cmds}


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory, kafka_fixtures: Path) -> Path:
    return clone_like(tmp_path_factory.mktemp("readme"), kafka_fixtures.parent)


@pytest.fixture(scope="module")
def outcomes(clone: Path, kafka_broker: KafkaBroker) -> dict[int, Outcome]:
    seed_cluster(kafka_broker)
    outputs = clone.parent / "outputs"
    outputs.mkdir()
    results: dict[int, Outcome] = {}
    for block in RUN:
        results.update(run_block(block, clone, outputs, kafka_broker.bootstrap))
    return results


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.id for c in COMMANDS])
def test_readme_command_runs_and_prints_what_the_readme_shows(cmd: Command, outcomes: dict[int, Outcome]) -> None:
    outcome = outcomes[cmd.line]
    where = f"README.md:{cmd.line}: {cmd.text}\n--- stdout\n{outcome.out[-3000:]}\n--- stderr\n{outcome.err[-3000:]}"
    assert outcome.code == 0, where
    assert is_assignment(cmd.text) or (outcome.out + outcome.err).strip(), where
    printed = (outcome.out + outcome.err).splitlines()
    for expected in cmd.expected:
        assert any(expected in line for line in printed), f"`{expected}` not printed by\n{where}"


# --- the tour's answers against the demo's input -------------------------------------------------


def tour_command(job: str) -> tuple[Command, dict[str, list[str]]]:
    """The tour's one `klake <job>` command and its options (`--name value`, repeatable)."""
    found = [c for c in COMMANDS if re.search(rf"\$K {job}\b", c.text)]
    assert len(found) == 1, f"the tour runs `{job}` once"
    words = shlex.split(found[0].text.split("#", 1)[0].split("|", 1)[0])
    options: dict[str, list[str]] = {}
    for name, value in zip(words, [*words[1:], ""], strict=True):
        if name.startswith("--") and not value.startswith("--"):
            options.setdefault(name, []).append(value)
    return found[0], options


def ms(text: str) -> int:
    """Epoch ms of an ISO-8601 time that names its zone (the README's and Spark's JSON writer's)."""
    moment = datetime.fromisoformat(text)
    assert moment.tzinfo is not None, text
    return round(moment.timestamp() * 1000)


def demo_input(clone: Path, topic: str) -> pa.Table:
    """The records the demo generated for `topic` (its append jobs' Parquet input)."""
    table = pa.concat_tables(pq.read_table(p) for p in sorted((clone / "demo-output" / "input").glob("*.parquet")))
    return table.filter(pc.equal(table["topic"], topic))


def test_the_tours_offsets_for_times_answers_are_offsets_at_or_after_the_target(
        clone: Path, outcomes: dict[int, Outcome]) -> None:
    cmd, options = tour_command("offsets-for-times")
    topic, = options["--topic"]
    partitions = yaml.safe_load((clone / "demo-output" / "demo.yaml").read_text())["topics"][topic]["partitions"]
    printed = outcomes[cmd.line].out
    answers = re.findall(r"^(\S+)-(\d+) @ (\S+): (.*)$", printed, re.M)
    times = [t for t in options["--timestamp"] if not re.fullmatch(r"-[123]|latest|earliest|max", t)]
    assert times, "the tour looks up a time"
    stamps = set(pc.cast(demo_input(clone, topic)["timestamp"], pa.int64()).to_pylist())
    for target in times:
        found = {int(p): answer for t, p, at, answer in answers if t == topic and at == target}
        assert sorted(found) == list(range(partitions)), printed
        for answer in found.values():
            match = re.fullmatch(r"offset (\d+) \(timestamp (\S+)\)", answer)
            assert match and ms(match[2]) >= ms(target) and ms(match[2]) in stamps, f"{target}: {answer}"


def test_the_tours_read_returns_every_input_record_of_its_range(clone: Path, outcomes: dict[int, Outcome]) -> None:
    cmd, options = tour_command("read")
    (topic,), (start,), (end,), (output,) = (options[k] for k in ("--topic", "--from", "--to", "--output"))
    assert options["--output-format"] == ["json"]
    rows = [json.loads(line) for part in sorted((clone / output).glob("part-*.json"))
            for line in part.read_text().splitlines()]
    read = sorted((ms(r["timestamp"]), base64.b64decode(r["value"])) for r in rows if r["topic"] == topic)
    source = demo_input(clone, topic)
    stamps = pc.cast(source["timestamp"], pa.int64())
    wanted = source.filter(pc.and_(pc.greater_equal(stamps, ms(start)), pc.less(stamps, ms(end))))
    expected = sorted(zip(pc.cast(wanted["timestamp"], pa.int64()).to_pylist(), wanted["value"].to_pylist(),
                          strict=True))
    assert len(rows) == len(read) > 0
    assert read == expected
    assert f"read: {len(read)} record(s)" in outcomes[cmd.line].out


# --- the archive and restore examples against the cluster ---------------------------------------------


def _served(broker: KafkaBroker, topic: str) -> list[tuple]:
    """(partition, offset, timestamp, key, value, headers) of every record of `topic` in the cluster."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    consumer.assign([TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))])
    consumer.seek_to_beginning()
    records = sorted((r.partition, r.offset, r.timestamp, r.key, r.value, r.headers) for r in consumer)
    consumer.close()
    return records


def test_the_restored_topic_holds_the_archived_records_and_the_group_reads_next_what_it_would_have(
        outcomes: dict[int, Outcome], kafka_broker: KafkaBroker) -> None:
    from kafka import TopicPartition

    restore, = [c for c in COMMANDS if re.search(r"klake restore\b", c.text)]
    assert outcomes[restore.line].code == 0
    source, restored = _served(kafka_broker, "orders"), _served(kafka_broker, "orders-restored")
    assert [(p, t, k, v, h) for p, _, t, k, v, h in restored] == [(p, t, k, v, h) for p, _, t, k, v, h in source]
    admin = kafka_broker.admin()
    committed = admin.list_group_offsets({"billing": None})["billing"]
    admin.close()
    for tp, position in committed.items():
        if tp.topic == "orders":  # the record the group reads next, on the source and on the restored topic
            moved = committed[TopicPartition("orders-restored", tp.partition)].offset
            assert (next(v for p, o, _, _, v, _ in restored if (p, o) == (tp.partition, moved))
                    == next(v for p, o, _, _, v, _ in source if (p, o) == (tp.partition, position.offset)))
