"""The jobs' configuration: example files load, --set overrides, unknown keys and secrets are refused, and
every problem is reported at once with its key path."""

from __future__ import annotations

import pytest

from engine.log.topic_config import TopicConfig
from jobs import retention
from jobs.runtime.config import JobSettings, apply_override, load_config
from jobs.runtime.job_runner import main
from kernel.errors import ConfigError
from tests.conftest import PROJECT_ROOT

CONF = PROJECT_ROOT / "conf"


def test_local_example_loads_with_topic_defaults_and_overrides() -> None:
    config = load_config(CONF / "local.example.yaml")
    orders, clicks, audit = (config.topics[t] for t in ("orders", "clicks", "audit"))
    assert config.catalog_uri == config.root + "/_catalog" and config.root.endswith("/klake-data")
    assert orders.partitions == 8 and orders.config.cleanup_policy == "compact,delete"
    assert orders.config.segment_bytes == 268_435_456 and orders.config.retention_ms == 604_800_000
    assert clicks.config.retention_bytes == 10_737_418_240 and clicks.config.compression_type == "zstd"
    assert audit.config.retention_ms == -1 and audit.config.message_timestamp_type == "LogAppendTime"
    assert audit.config.max_message_bytes == 1_048_588  # Kafka's default where nothing is said
    assert config.spark_conf == {"spark.sql.shuffle.partitions": "8"}


def test_s3_example_and_set_overrides_keep_kafka_dotted_keys() -> None:
    config = load_config(CONF / "s3.example.yaml", ["topics.orders.retention.ms=3600000",
                                                      "spark.conf.spark.executor.memory=2g", "jobs.lease_ttl_ms=60000",
                                                      "topics.fresh.partitions=3"])
    assert config.root == "s3://my-kafka-archive/logs" and config.catalog_uri == "s3://my-kafka-archive/catalog"
    assert config.topics["orders"].config.retention_ms == 3_600_000
    assert config.topics["fresh"].partitions == 3 and config.topics["fresh"].config.retention_ms == 604_800_000
    assert config.spark_conf["spark.executor.memory"] == "2g" and config.jobs.lease_ttl_ms == 60_000
    assert config.storage.region == "us-east-1"


def test_documented_defaults_are_the_code_defaults() -> None:
    config = load_config(CONF / "defaults.yaml", ["storage.root=/tmp/x"])
    assert config.jobs == JobSettings() and config.spark_master == "local[*]" and config.topics == {}
    text = (CONF / "defaults.yaml").read_text()
    for key, value in TopicConfig().to_mapping().items():
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        assert f"{key} {shown}" in text, f"conf/defaults.yaml does not document {key} {shown}"


@pytest.mark.parametrize(("overrides", "message"), [
    (["storage.bucket=x"], "storage.bucket: unknown key; expected one of ['endpoint_url', 'region', 'root']"),
    (["spark.masterr=local"], "spark.masterr: unknown key"),
    (["topics.orders.retention.mss=1"], "topics.orders.retention.mss: unknown topic setting (did you mean retention.ms?)"),
    (["topics.orders.retention.ms=-5"], "topics.orders.retention.ms: must be an integer >= -1, got -5"),
    (["topics.orders.partitions=0"], "topics.orders.partitions: must be an integer from 1 to 100000, got 0"),
    (["topic_defaults.partitions=3"], "topic_defaults.partitions: unknown topic setting"),
    (["storage.secret=abc"], "storage.secret: credentials are read from the environment"),
    (["jobs.lease_ttl_ms=-1"], "jobs.lease_ttl_ms: must be an integer >= 0, got -1"),
    (["jobs.lease_ttl_ms=true"], "jobs.lease_ttl_ms: must be an integer >= 0, got True"),
    (["nonsense=1"], "nonsense: unknown section"),
    (["topics.bad/name.partitions=1"], "topics.bad/name: invalid topic name 'bad/name': characters outside"),
    (["spark.conf=8"], "spark.conf: must be a mapping, got 8"),
])
def test_bad_configuration_is_an_error_naming_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, ["storage.root=/tmp/x", *overrides])
    assert str(raised.value).startswith(f"configuration: {message}") and "\n" not in str(raised.value)


BAD_FILE = """\
storage: {bucket: my-bucket}
jobs: {lease_ttl_ms: -1}
topic_defaults: {retention.ms: 1.5}
topics:
  orders: {partitions: 0, retention.ms: abc, cleanup.policy: forever}
  bad/name: {}
"""
BAD_FILE_PROBLEMS = [
    "storage.root: required (a local path or s3://bucket/prefix)",
    "storage.bucket: unknown key; expected one of ['endpoint_url', 'region', 'root']",
    "jobs.lease_ttl_ms: must be an integer >= 0, got -1",
    "topic_defaults.retention.ms: must be an integer >= -1, got 1.5",
    "topics.orders.retention.ms: must be an integer >= -1, got 'abc'",
    "topics.orders.cleanup.policy: must be delete, compact or both (comma separated), got 'forever'",
    "topics.orders.partitions: must be an integer from 1 to 100000, got 0",
    "topics.bad/name: invalid topic name 'bad/name': characters outside [a-zA-Z0-9._-]",
    "--set 'spark.master': expected key=value",
    "topics.clicks.segment.bytes: must be an integer from 14 to 2147483647, got 13",
]


def test_every_problem_of_a_file_and_its_overrides_is_reported_at_once_with_its_path(tmp_path) -> None:
    conf = tmp_path / "klake.yaml"
    conf.write_text(BAD_FILE)
    with pytest.raises(ConfigError) as raised:
        load_config(conf, ["spark.master", "topics.clicks.segment.bytes=13"])
    head, *lines = str(raised.value).splitlines()
    assert head == f"{conf}: {len(BAD_FILE_PROBLEMS)} problems:"
    assert sorted(line.strip() for line in lines) == sorted(BAD_FILE_PROBLEMS)


def test_a_job_with_a_bad_file_exits_2_listing_every_problem_and_writes_nothing(tmp_path, capsys) -> None:
    store = tmp_path / "store"
    conf = tmp_path / "klake.yaml"
    conf.write_text(BAD_FILE.replace("storage: {bucket: my-bucket}", f"storage: {{root: {store}}}"))
    report = tmp_path / "report.json"
    code = main(retention.SPEC, ["--conf", str(conf), "--report", str(report), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"klake retention: configuration error: {conf}: 6 problems:")
    for problem in BAD_FILE_PROBLEMS[2:8]:
        assert problem in err
    assert not report.exists() and not store.exists()


def test_missing_root_and_bad_files_are_clear(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"storage.root: required \(a local path or s3://bucket/prefix\)"):
        load_config(None)
    with pytest.raises(ConfigError, match="config file .*nope.yaml"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("storage: [1, 2")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="expected key=value"):
        apply_override({}, "storage.root")
