"""Topic configuration: Kafka's names and defaults (spec 11), validation errors naming the key."""

from __future__ import annotations

import pytest

from engine.log.roll_rule import RollPolicy
from engine.log.topic_config import DEFAULTS, KIP228_MIN_TIMESTAMP, LONG_MAX, TopicConfig, min_timestamp
from kernel.errors import ConfigError


def test_defaults_are_kafkas() -> None:
    config = TopicConfig().to_mapping()
    assert config == DEFAULTS
    assert config["segment.bytes"] == 1_073_741_824 and config["segment.ms"] == 604_800_000
    assert config["retention.ms"] == 604_800_000 and config["retention.bytes"] == -1
    assert config["index.interval.bytes"] == 4096 and config["segment.index.bytes"] == 10_485_760
    assert config["max.message.bytes"] == 1_048_588 and config["cleanup.policy"] == "delete"
    assert config["message.timestamp.after.max.ms"] == 3_600_000  # KIP-1030 (4.0)
    assert config["message.timestamp.before.max.ms"] == LONG_MAX
    assert config["min.cleanable.dirty.ratio"] == 0.5 and config["delete.retention.ms"] == 86_400_000
    assert config["klake.timestamps.allow.negative"] is False


def test_round_trip_and_parsing() -> None:
    config = TopicConfig.from_mapping({"segment.bytes": "1048576", "cleanup.policy": "delete,compact",
                                       "min.cleanable.dirty.ratio": "0.25", "klake.log.append.time.monotonic": "true"})
    assert config.segment_bytes == 1_048_576 and config.cleanup_policy == "compact,delete"
    assert config.compacted and config.deletes and config.monotonic_log_append_time
    assert TopicConfig.from_mapping(config.to_mapping()) == config


@pytest.mark.parametrize(("key", "value", "message"), [
    ("segment.bytes", 13, "segment.bytes: must be an integer from 14 to 2147483647, got 13"),
    ("segment.bytes", "lots", "segment.bytes: must be an integer from 14 to 2147483647, got 'lots'"),
    ("retention.ms", -2, "retention.ms: must be an integer >= -1, got -2"),
    ("cleanup.policy", "forever", "cleanup.policy: must be delete, compact or both (comma separated), got 'forever'"),
    ("compression.type", "brotli", "compression.type: must be one of producer, uncompressed, gzip, snappy, lz4, zstd, "
                                   "got 'brotli'"),
    ("min.cleanable.dirty.ratio", 1.5, "min.cleanable.dirty.ratio: must be a number from 0 to 1, got 1.5"),
    ("message.timestamp.type", "WallClock", "message.timestamp.type: must be one of CreateTime, LogAppendTime, "
                                            "got 'WallClock'"),
    ("segment.ms", 1.5, "segment.ms: must be an integer >= 1, got 1.5"),
    ("segment.ms", True, "segment.ms: must be an integer >= 1, got True"),
    ("klake.timestamps.allow.negative", "maybe", "klake.timestamps.allow.negative: must be true or false, got 'maybe'"),
    ("retention.hours", 1, "retention.hours: unknown topic setting (did you mean retention.ms?)"),
    ("colour", 1, "colour: unknown topic setting"),
])
def test_bad_values_name_the_key(key: str, value, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        TopicConfig.from_mapping({key: value}, topic="orders")
    assert str(raised.value) == f"topic orders: {message}"


def test_every_bad_setting_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as raised:
        TopicConfig.from_mapping({"retention.ms": "abc", "segment.ms": 0, "cleanup.policy": "compact"}, topic="orders")
    assert str(raised.value) == ("topic orders: retention.ms: must be an integer >= -1, got 'abc'; "
                                 "segment.ms: must be an integer >= 1, got 0")


def test_compacted_topics_cap_segment_ms_by_max_compaction_lag() -> None:
    compacted = TopicConfig.from_mapping({"cleanup.policy": "compact", "max.compaction.lag.ms": 1000})
    assert RollPolicy(compacted).segment_ms == 1000
    deleting = TopicConfig.from_mapping({"max.compaction.lag.ms": 1000})
    assert RollPolicy(deleting).segment_ms == 604_800_000


def test_min_timestamp_is_kafkas_zero_unless_the_topic_opts_into_kip228() -> None:
    """The one home of KIP-228's rule: every path (append, truncation, cleaner, checks, stored segments,
    recovery, catalog rows, retention, reads) asks `min_timestamp(config)`."""
    assert min_timestamp(TopicConfig()) == 0
    kip228 = TopicConfig.from_mapping({"klake.timestamps.allow.negative": True})
    assert min_timestamp(kip228) == -(2**63) + 1 == KIP228_MIN_TIMESTAMP
