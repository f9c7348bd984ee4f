"""Bad input, as a new user meets it: the real `klake` command in a subprocess, one case per bad input.

Every case must end the same way, before Spark starts: exit 2, exactly one line of output (on stderr)
that names the file, column, bucket, topic or key at fault, no traceback, and nothing written: the
store's objects (and so its catalog version) are exactly what they were. The local store and the S3
bucket each hold a catalog made by an earlier import, so "nothing written" also means "the catalog
did not move". Wrong S3 credentials need a moto_server that checks them: a second one, started with
authentication on (`INITIAL_NO_AUTH_ACTION_COUNT=0`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.ops.catalog_table import Catalog
from jobs.runtime.embedded_s3 import create_bucket, free_port
from layouts.store import StorageOptions, describe_error, filesystem, list_objects
from layouts.store.bound import Store as BoundStore
from tests.conftest import KAFKA_FIXTURES, PROJECT_ROOT

PARTITION_DIR = "timeindex_test-0"  # the broker fixture the stores are seeded with (4 segments)
NO_CREDENTIALS = {"AWS_EC2_METADATA_DISABLED": "true", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                  "AWS_CONFIG_FILE": "/nonexistent"}


INSPECTION_COMMANDS = ("segments", "topics", "consume", "dump", "verify", "lookup", "index")  # no progress to silence


def klake(*argv: str, env: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`python -m jobs.cli.main argv...` with this process's environment (moto's endpoint and fake
    credentials once the moto fixture ran), `env` added and the variables in `drop` removed."""
    environ = {k: v for k, v in os.environ.items() if k not in drop} | (env or {})
    environ["PYTHONPATH"] = str(PROJECT_ROOT)
    quiet = [] if argv[0] in INSPECTION_COMMANDS else ["--no-progress"]
    return subprocess.run([sys.executable, "-m", "jobs.cli.main", *argv, *quiet], cwd=PROJECT_ROOT,
                          env=environ, capture_output=True, text=True, timeout=300)


def snapshot(root: str, options: StorageOptions) -> dict[str, tuple[int, int]]:
    """Every object under `root` with its size and modification time: equal snapshots, nothing written."""
    return {o.uri: (o.size, o.mtime_ms) for o in list_objects(root, options)}


def write_parquet(path: Path, columns: dict[str, pa.Array]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return str(path)


def records(n: int = 3, **overrides: pa.Array) -> dict[str, pa.Array]:
    """`n` good records in Spark's Kafka sink columns, with some columns replaced."""
    return {"key": pa.array([b"k%d" % i for i in range(n)], pa.binary()),
            "value": pa.array([b"v%d" % i for i in range(n)], pa.binary()),
            "timestamp": pa.array([1_790_000_000_000 + i for i in range(n)], pa.int64())} | overrides


@dataclass
class Store:
    """A store seeded by an import: its root, how to reach it, and a snapshot taken before the case."""

    root: str
    options: StorageOptions
    env: dict[str, str] = field(default_factory=dict)

    @property
    def catalog_version(self) -> int:
        return Catalog.open(BoundStore(f"{self.root}/_catalog", self.options)).version()


def seed(store: Store, tmp: Path) -> Store:
    source = tmp / "broker"
    shutil.copytree(KAFKA_FIXTURES / "broker" / PARTITION_DIR, source / PARTITION_DIR)
    done = klake("import", str(source), "--copy", "--root", store.root, env=store.env)
    assert done.returncode == 0, done.stderr
    return store


@pytest.fixture(scope="module")
def local_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    tmp = tmp_path_factory.mktemp("local-store")
    return seed(Store(str(tmp / "root"), StorageOptions()), tmp)


@pytest.fixture(scope="module")
def s3_store(moto_server: str, tmp_path_factory: pytest.TempPathFactory) -> Store:
    bucket = create_bucket(f"klake-bad-{uuid.uuid4().hex[:10]}")
    return seed(Store(f"{bucket}/root", StorageOptions.from_env()), tmp_path_factory.mktemp("s3-store"))


@pytest.fixture(scope="module")
def checking_moto() -> Iterator[str]:
    """A moto_server that checks credentials: every request with unknown keys is refused."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the checking moto_server did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- the table -----------------------------------------------------------------------------------------
# A case gets the store and a scratch directory and returns (argv, extra environment, variables to drop,
# what the one line must name).

Case = Callable[[Store, Path], tuple[list[str], dict[str, str], tuple[str, ...], list[str]]]


def append_of(columns: dict[str, pa.Array], *extra: str) -> Case:
    def case(store: Store, tmp: Path):  # noqa: ANN202
        path = write_parquet(tmp / "in" / "part-0.parquet", columns)
        return (["append", "--input", str(tmp / "in"), "--root", store.root, "--set", "topics.t.partitions=2",
                 *extra], {}, (), [path])
    return case


def wrong_value_type(store: Store, tmp: Path):  # noqa: ANN201
    argv, env, drop, names = append_of(records(value=pa.array([1, 2, 3], pa.int64())), "--topic", "t")(store, tmp)
    return argv, env, drop, [*names, "`value`", "int64"]


def wrong_timestamp_type(store: Store, tmp: Path):  # noqa: ANN201
    argv, env, drop, names = append_of(records(timestamp=pa.array(["noon", "1pm", "2pm"])), "--topic", "t")(store, tmp)
    return argv, env, drop, [*names, "`timestamp`"]


def wrong_headers_type(store: Store, tmp: Path):  # noqa: ANN201
    argv, env, drop, names = append_of(records(headers=pa.array(["a", "b", "c"])), "--topic", "t")(store, tmp)
    return argv, env, drop, [*names, "`headers`"]


def no_value_column(store: Store, tmp: Path):  # noqa: ANN201
    columns = records()
    del columns["value"]
    argv, env, drop, names = append_of(columns, "--topic", "t")(store, tmp)
    return argv, env, drop, [*names, "`value`"]


def corrupt_parquet(store: Store, tmp: Path):  # noqa: ANN201
    write_parquet(tmp / "in" / "part-0.parquet", records())
    bad = tmp / "in" / "part-1.parquet"
    bad.write_bytes(b"PAR1 this is not a parquet file at all")
    return (["append", "--input", str(tmp / "in"), "--topic", "t", "--root", store.root,
             "--set", "topics.t.partitions=2"], {}, (), [str(bad)])


def corrupt_data_page(store: Store, tmp: Path):  # noqa: ANN201
    """A Parquet file whose footer is fine but a data page of its second row group is not: found by the
    input task that reads it (Spark runs), before anything is appended."""
    n = 2000
    path = write_parquet(tmp / "in" / "part-0.parquet", records(n, value=pa.array([b"value-%d" % i * 4 for i in range(n)])))
    pq.write_table(pq.read_table(path), path, compression="snappy", row_group_size=n // 2, use_dictionary=False)
    chunk = pq.ParquetFile(path).metadata.row_group(1).column(1)  # row group 1's `value` column
    data = bytearray(Path(path).read_bytes())
    middle = chunk.data_page_offset + chunk.total_compressed_size // 2
    data[middle:middle + 500] = b"\xff" * 500
    Path(path).write_bytes(bytes(data))
    return (["append", "--input", str(tmp / "in"), "--topic", "t", "--root", store.root, "--master", "local[1]",
             "--set", "topics.t.partitions=2"], {}, (), [path, "row group 1", "Corrupt snappy compressed data"])


def missing_input_with_job_id(store: Store, tmp: Path):  # noqa: ANN201
    missing = str(tmp / "no-such-input")
    return (["append", "--input", missing, "--topic", "t", "--job-id", "mine", "--root", store.root,
             "--set", "topics.t.partitions=2"], {}, (), [missing])


def invalid_topic_in_cli(store: Store, tmp: Path):  # noqa: ANN201
    argv, env, drop, _ = append_of(records())(store, tmp)
    return [*argv, "--topic", "../evil"], env, drop, ["invalid topic name", "'../evil'"]


def invalid_topic_in_cli_of_another_job(store: Store, tmp: Path):  # noqa: ANN201
    return ["retention", "--root", store.root, "--topic", "a b"], {}, (), ["invalid topic name", "'a b'"]


def invalid_topic_in_column(store: Store, tmp: Path):  # noqa: ANN201
    argv, env, drop, names = append_of(records(topic=pa.array(["t", "../evil", "t"])))(store, tmp)
    return argv, env, drop, [*names, "`topic`", "invalid topic name", "'../evil'"]


def new_topic_without_partition_count(store: Store, tmp: Path):  # noqa: ANN201
    path = write_parquet(tmp / "in" / "part-0.parquet", records())
    return (["append", "--input", path, "--topic", "fresh", "--root", store.root], {}, (),
            ["topic fresh is new", "--set topics.fresh.partitions=N"])


def invalid_import_dirs(store: Store, tmp: Path):  # noqa: ANN201
    source = tmp / "broker"
    shutil.copytree(KAFKA_FIXTURES / "broker" / "docker-connect-status-0", source / "docker-connect-status-0")
    for name in ("..-0", "a b-0"):
        shutil.copytree(KAFKA_FIXTURES / "broker" / "docker-connect-status-0", source / name)
    return ["import", str(source), "--copy", "--root", store.root], {}, (), ["'..-0'", "'a b-0'"]


def unwritable_root(store: Store, tmp: Path):  # noqa: ANN201
    (tmp / "a-file").write_text("a file where the root's parent directory should be")
    root = str(tmp / "a-file" / "root")
    argv, env, drop, _ = append_of(records(), "--topic", "t")(store, tmp)
    argv[argv.index("--root") + 1] = root
    return argv, env, drop, [root]


def config(*argv: str, names: list[str], conf: str | None = None) -> Case:
    def case(store: Store, tmp: Path):  # noqa: ANN202
        extra = []
        if conf is not None:
            (tmp / "klake.yaml").write_text(conf.replace("ROOT", store.root))
            extra = ["--conf", str(tmp / "klake.yaml")]
        return ["retention", *extra, *argv], {}, (), names
    return case


def s3_case(make_argv: Callable[[Store, Path], list[str]], names: Callable[[Store], list[str]],
            env: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> Case:
    def case(store: Store, tmp: Path):  # noqa: ANN202
        return make_argv(store, tmp), env or {}, drop, names(store)
    return case


def s3_append(root: Callable[[Store], str], *extra: str) -> Callable[[Store, Path], list[str]]:
    def argv(store: Store, tmp: Path) -> list[str]:
        path = write_parquet(tmp / "in" / "part-0.parquet", records())
        return ["append", "--input", path, "--topic", "t", "--root", root(store), "--set", "topics.t.partitions=2",
                *extra]
    return argv


TOPIC = PARTITION_DIR.rsplit("-", 1)[0]


def job(*argv: str, names: list[str]) -> Case:
    """A job or inspection command on the seeded store (`ROOT` in `argv` is its root)."""
    return lambda store, tmp: ([a.replace("ROOT", store.root) for a in argv], {}, (), names)


LOCAL_CASES: dict[str, Case] = {
    "wrong value type": wrong_value_type,
    "wrong timestamp type": wrong_timestamp_type,
    "wrong headers type": wrong_headers_type,
    "no value column": no_value_column,
    "corrupt parquet": corrupt_parquet,
    "missing input with --job-id": missing_input_with_job_id,
    "invalid topic in --topic": invalid_topic_in_cli,
    "invalid topic in --topic of retention": invalid_topic_in_cli_of_another_job,
    "invalid topic in the topic column": invalid_topic_in_column,
    "new topic without a partition count": new_topic_without_partition_count,
    "invalid import directory names": invalid_import_dirs,
    "unwritable root": unwritable_root,
    "missing import source": lambda store, tmp: (["import", str(tmp / "no-such-dir"), "--root", store.root], {}, (),
                                                 [str(tmp / "no-such-dir")]),
    "export: a time before 1970 on a Kafka topic": lambda store, tmp: (
        ["export", "--root", store.root, "--output", str(tmp / "out"), "--from", "-5"], {}, (),
        ["--from", "1969-12-31T23:59:59.995Z", "timeindex_test", "KIP-228"]),
    "export: an output inside the root": lambda store, tmp: (
        ["export", "--root", store.root, "--output", store.root + "/kafka-logs"], {}, (),
        [store.root + "/kafka-logs", "overlaps the klake root"]),
    "config: a bad value": config("--set", "topics.t.retention.ms=abc", "--root", "ROOT",
                                  names=["topics.t.retention.ms", "'abc'"]),
    "config: an unknown key": config(names=["jobs.lease_tll_ms", "unknown key"],
                                     conf="storage: {root: ROOT}\njobs: {lease_tll_ms: 5}\n"),
    "config: a secret in the file": config(names=["storage.secret_key", "environment"],
                                           conf="storage: {root: ROOT, secret_key: abc}\n"),
    "config: no root": config(names=["storage.root", "required"], conf="topics: {t: {partitions: 1}}\n"),
    "config: not YAML": config(names=["not valid YAML"], conf="storage: [ROOT\n"),
    "corrupt data page behind a good footer": corrupt_data_page,
    "read: --from after --to": job("read", "--root", "ROOT", "--topic", TOPIC, "--from", "2026-11-04T12:00:00Z",
                                   "--to", "2026-11-04T10:00:00Z",
                                   names=["--from 2026-11-04T12:00:00Z is after --to 2026-11-04T10:00:00Z"]),
    "read: --from-offset after --to-offset": job("read", "--root", "ROOT", "--topic", TOPIC, "--from-offset", "9",
                                                 "--to-offset", "3", names=["--from-offset 9 is after --to-offset 3"]),
    "export: --from equal to --to": job("export", "--root", "ROOT", "--output", "ROOT-out", "--from", "5000",
                                        "--to", "5000", names=["--from 1970-01-01T00:00:05Z", "equal to --to"]),
    "segments: --from after --to": job("segments", "--root", "ROOT", "--from", "2026-11-05", "--to", "2026-11-04",
                                       names=["--from 2026-11-05T00:00:00Z is after --to 2026-11-04T00:00:00Z"]),
    "read: a partition the topic lacks": job("read", "--root", "ROOT", "--topic", TOPIC, "--partition", "7",
                                             names=["--partition 7", f"{TOPIC} has partitions 0..0"]),
    "retention: a partition no topic has": job("retention", "--root", "ROOT", "--partition", "3",
                                               names=["--partition 3", f"{TOPIC} has partitions 0..0"]),
    "append: a partition the topic lacks": lambda store, tmp: (
        append_of(records(), "--topic", "t", "--partition", "5")(store, tmp)[0], {}, (),
        ["--partition 5", "t has partitions 0..1"]),
    "append: --keep-offsets without an `offset` column": lambda store, tmp: (
        append_of(records(), "--topic", "t", "--keep-offsets")(store, tmp)[0], {}, (),
        [str(tmp / "in"), "--keep-offsets", "`offset`"]),
    "append: an `offset` column of text": lambda store, tmp: (
        append_of(records(offset=pa.array(["1", "2", "3"])), "--topic", "t")(store, tmp)[0], {}, (),
        [str(tmp / "in"), "`offset`", "an integer"]),
    "segments: a partition the topic lacks": job("segments", "--root", "ROOT", "--topic", TOPIC, "--partition", "7",
                                                 names=["--partition 7", f"{TOPIC} has partitions 0..0"]),
    "consume: a partition the topic lacks": job("consume", "--root", "ROOT", "--topic", TOPIC, "--partition", "7",
                                                names=["--partition 7", f"{TOPIC} has partitions 0..0"]),
    "consume: a topic the catalog lacks": job("consume", "--root", "ROOT", "--topic", "nope", names=["topic nope"]),
    "topics: a topic the catalog lacks": job("topics", "--root", "ROOT", "--topic", "nope",
                                             names=["topic nope", TOPIC]),
    "lookup: klake objects without their catalog": lambda store, tmp: (
        ["lookup", str(shutil.copytree(Path(store.root) / PARTITION_DIR, tmp / PARTITION_DIR)), "--timestamp", "-1"],
        {}, (), ["no NNNNNNNNNNNNNNNNNNNN.log segments", f"no klake catalog at {tmp}/_catalog"]),
    "truncate beyond the log end": job("truncate", "--root", "ROOT", "--topic", TOPIC, "--partition", "0",
                                       "--offset", "1000000", names=["--offset 1000000", f"{TOPIC}-0 ends at",
                                                                     "--allow-beyond-end"]),
    "delete-records beyond the log end": job("delete-records", "--root", "ROOT", "--topic", TOPIC, "--partition",
                                             "0", "--offset", "1000000", names=["--offset 1000000", f"{TOPIC}-0 ends at"]),
}

def s3_input_of_wrong_type(store: Store, tmp: Path) -> list[str]:
    """An s3:// input whose `partition` column is a string: its footer is read through ranged GETs."""
    path = write_parquet(tmp / "part-0.parquet", records(partition=pa.array(["0", "1", "0"])))
    fs, bucket_root = filesystem(store.root, store.options)
    fs.pipe_file(bucket_root.rsplit("/", 1)[0] + "/landing/part-0.parquet", Path(path).read_bytes())
    return ["append", "--input", store.root.rsplit("/", 1)[0] + "/landing/", "--topic", "t", "--root", store.root,
            "--set", "topics.t.partitions=2"]


def conf_file(tmp: Path, text: str) -> str:
    (tmp / "klake.yaml").write_text(text)
    return str(tmp / "klake.yaml")


UNREACHABLE = f"http://127.0.0.1:{free_port()}"  # nothing listens there
ENDPOINT_ENV = ("KLAKE_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL")
NO_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")

S3_CASES: dict[str, Case] = {
    "wrong column type in an s3:// input": s3_case(
        s3_input_of_wrong_type, lambda s: [s.root.rsplit("/", 1)[0] + "/landing/part-0.parquet", "`partition`"]),
    "missing credentials": s3_case(s3_append(lambda s: s.root), lambda s: [s.root.split("/")[2], "credentials"],
                                   env=NO_CREDENTIALS, drop=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")),
    "missing bucket": s3_case(s3_append(lambda s: "s3://klake-no-such-bucket/root"),
                              lambda s: ["klake-no-such-bucket", "does not exist"]),
    "catalog in a missing bucket": s3_case(s3_append(lambda s: s.root, "--catalog", "s3://klake-no-catalog/c"),
                                           lambda s: ["klake-no-catalog", "does not exist"]),
    "import into a missing bucket": s3_case(
        lambda s, tmp: ["import", str(KAFKA_FIXTURES / "broker"), "--root", "s3://klake-no-such-bucket/root"],
        lambda s: ["klake-no-such-bucket", "does not exist"]),
    # the inspection commands take --conf/--set as the jobs do, and name what is wrong in one line
    "segments: the configuration's endpoint, a missing bucket": s3_case(
        lambda s, tmp: ["segments", "--conf", conf_file(tmp, "storage: {root: s3://klake-no-such-bucket/root, "
                                                             f"endpoint_url: '{os.environ['KLAKE_S3_ENDPOINT_URL']}'}}\n")],
        lambda s: ["s3://klake-no-such-bucket/root", "does not exist"], drop=ENDPOINT_ENV),
    "segments: missing credentials": s3_case(lambda s, tmp: ["segments", "--catalog", f"{s.root}/_catalog"],
                                             lambda s: [s.root.split("/")[2], "credentials"], env=NO_CREDENTIALS,
                                             drop=NO_KEYS),
    "segments: an unreachable endpoint": s3_case(
        lambda s, tmp: ["segments", "--root", s.root, "--set", f"storage.endpoint_url={UNREACHABLE}"],
        lambda s: [s.root, "cannot reach the S3 endpoint", UNREACHABLE]),
    "dump: a missing bucket": s3_case(lambda s, tmp: ["dump", "s3://klake-no-such-bucket/t-0/00000000000000000000.log"],
                                      lambda s: ["klake-no-such-bucket", "does not exist"]),
    "verify: missing credentials": s3_case(
        lambda s, tmp: ["verify", f"{s.root}/{PARTITION_DIR}/00000000000000000000.log"],
        lambda s: [s.root.split("/")[2], "credentials"], env=NO_CREDENTIALS, drop=NO_KEYS),
    "topics: an unreachable endpoint": s3_case(
        lambda s, tmp: ["topics", "--root", s.root, "--set", f"storage.endpoint_url={UNREACHABLE}"],
        lambda s: [s.root, "cannot reach the S3 endpoint", UNREACHABLE]),
    "consume: missing credentials": s3_case(lambda s, tmp: ["consume", "--root", s.root, "--topic", "t"],
                                            lambda s: [s.root.split("/")[2], "credentials"], env=NO_CREDENTIALS,
                                            drop=NO_KEYS),
    "lookup: the configuration's endpoint, a missing bucket": s3_case(
        lambda s, tmp: ["lookup", "s3://klake-no-such-bucket/t-0", "--timestamp", "-1", "--conf",
                        conf_file(tmp, f"storage: {{root: {s.root}, endpoint_url: '{os.environ['KLAKE_S3_ENDPOINT_URL']}'}}\n")],
        lambda s: ["klake-no-such-bucket", "does not exist"], drop=ENDPOINT_ENV),
}


def check_one_line_exit_2(done: subprocess.CompletedProcess, names: list[str]) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output and "\x1b[" not in output and "<?xml" not in output, output
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, output
    for name in names:
        assert name in done.stderr, (name, done.stderr)


@pytest.mark.parametrize("case", LOCAL_CASES.values(), ids=LOCAL_CASES.keys())
def test_bad_input_on_a_local_store_is_one_line_exit_2_and_writes_nothing(
        case: Case, local_store: Store, tmp_path: Path) -> None:
    argv, env, drop, names = case(local_store, tmp_path)
    argv = [a.replace("ROOT", local_store.root) for a in argv]
    before, version = snapshot(local_store.root, local_store.options), local_store.catalog_version
    done = klake(*argv, env=env, drop=drop)
    check_one_line_exit_2(done, names)
    assert snapshot(local_store.root, local_store.options) == before
    assert local_store.catalog_version == version


@pytest.mark.s3
@pytest.mark.parametrize("case", S3_CASES.values(), ids=S3_CASES.keys())
def test_bad_input_on_s3_is_one_line_exit_2_and_writes_nothing(case: Case, s3_store: Store, tmp_path: Path) -> None:
    argv, env, drop, names = case(s3_store, tmp_path)
    before, version = snapshot(s3_store.root, s3_store.options), s3_store.catalog_version
    done = klake(*argv, env=env, drop=drop)
    check_one_line_exit_2(done, names)
    assert snapshot(s3_store.root, s3_store.options) == before
    assert s3_store.catalog_version == version
    fs, _ = filesystem(s3_store.root, s3_store.options)
    buckets = {b["Name"] for b in fs.call_s3("list_buckets")["Buckets"]}
    assert not buckets & {"klake-no-such-bucket", "klake-no-catalog"}  # no bucket made on the way


@pytest.mark.s3
def test_wrong_s3_credentials_are_one_line_exit_2(checking_moto: str, tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "in" / "part-0.parquet", records())
    done = klake("append", "--input", path, "--topic", "t", "--root", "s3://some-bucket/root",
                 "--set", "topics.t.partitions=2", env={"KLAKE_S3_ENDPOINT_URL": checking_moto,
                                                        "AWS_ACCESS_KEY_ID": "AKIAWRONGWRONGWRONG",
                                                        "AWS_SECRET_ACCESS_KEY": "wrong"})
    check_one_line_exit_2(done, ["some-bucket", "AWS_ACCESS_KEY_ID"])


@pytest.mark.s3
def test_a_delta_rs_error_chain_is_one_line(moto_server: str) -> None:
    """What delta-rs raises for a missing bucket (ANSI-coloured `↳` lines ending in S3's XML) as one line."""
    with pytest.raises(OSError) as raised:
        Catalog.open(BoundStore("s3://klake-no-such-bucket/_catalog", StorageOptions.from_env()))
    assert "\x1b[" in str(raised.value) and "<?xml" in str(raised.value)  # what a user saw before
    line = describe_error(raised.value)
    assert "\n" not in line and "\x1b" not in line and "<" not in line and "↳" not in line
    assert line.endswith("NoSuchBucket: The specified bucket does not exist")


def test_import_lists_the_directories_it_refuses_and_imports_nothing(tmp_path: Path) -> None:
    """`import` of a log dir with directories that are no partition of a valid topic: exit 2 naming each
    of them (Kafka's broker refuses such a log dir too); Kafka's own non-live directories are skipped."""
    source = tmp_path / "broker"
    shutil.copytree(KAFKA_FIXTURES / "broker" / PARTITION_DIR, source / PARTITION_DIR)
    shutil.copytree(source / PARTITION_DIR, source / f"{PARTITION_DIR}.0123456789abcdef0123456789abcdef-delete")
    root = tmp_path / "root"
    done = klake("import", str(source), "--root", str(root))
    assert done.returncode == 0, done.stderr
    assert f"skipped {PARTITION_DIR}.0123456789abcdef0123456789abcdef-delete" in done.stdout
    for name in ("lost+found", "a b-0"):
        (source / name).mkdir()
        (source / name / "00000000000000000000.log").write_bytes(b"")
    version = Catalog.open(BoundStore(f"{root}/_catalog", StorageOptions())).version()
    done = klake("import", str(source), "--root", str(root))
    check_one_line_exit_2(done, ["'a b-0'", "'lost+found'"])
    assert Catalog.open(BoundStore(f"{root}/_catalog", StorageOptions())).version() == version

