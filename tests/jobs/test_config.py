"""The jobs' configuration: example files load, --set overrides, unknown keys and secrets are refused."""

from __future__ import annotations

import pytest

from engine.errors import ConfigError
from engine.log.topic_config import TopicConfig
from jobs.runtime.config import JOB_DEFAULTS, apply_override, load_config
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
    assert config.spark_conf["spark.executor.memory"] == "2g" and config.jobs["lease_ttl_ms"] == 60_000
    assert config.storage.region == "us-east-1"


def test_documented_defaults_are_the_code_defaults() -> None:
    config = load_config(CONF / "defaults.yaml", ["storage.root=/tmp/x"])
    assert dict(config.jobs) == JOB_DEFAULTS and config.spark_master == "local[*]" and config.topics == {}
    text = (CONF / "defaults.yaml").read_text()
    for key, value in TopicConfig().to_mapping().items():
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        assert f"{key} {shown}" in text, f"conf/defaults.yaml does not document {key} {shown}"


@pytest.mark.parametrize(("overrides", "message"), [
    (["storage.bucket=x"], "unknown key storage.bucket"),
    (["spark.masterr=local"], "unknown key spark.masterr"),
    (["topics.orders.retention.mss=1"], "topic orders: unknown topic setting 'retention.mss'"),
    (["topics.orders.retention.ms=-5"], "topic orders: retention.ms: -5"),
    (["topics.orders.partitions=0"], "partitions must be an integer from 1"),
    (["storage.secret=abc"], "credentials are read from the environment"),
    (["jobs.lease_ttl_ms=-1"], "jobs.lease_ttl_ms must be a non-negative integer"),
    (["nonsense=1"], "unknown section"),
    (["topics.bad/name.partitions=1"], "topic"),
])
def test_bad_configuration_is_an_error_naming_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["storage.root=/tmp/x", *overrides])


def test_missing_root_and_bad_files_are_clear(tmp_path) -> None:
    with pytest.raises(ConfigError, match="storage.root is required"):
        load_config(None)
    with pytest.raises(ConfigError, match="config file .*nope.yaml"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("storage: [1, 2")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="expected key=value"):
        apply_override({}, "storage.root")
