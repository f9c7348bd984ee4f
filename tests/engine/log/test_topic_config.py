"""Topic configuration: Kafka's names and defaults (spec 11), validation errors naming the key."""

from __future__ import annotations

import pytest

from engine.errors import ConfigError
from engine.log.topic_config import DEFAULTS, KIP228_MIN_TIMESTAMP, LONG_MAX, TopicConfig, min_timestamp


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
    ("segment.bytes", 13, "segment.bytes: 13 is outside"),
    ("segment.bytes", "lots", "segment.bytes: expected an integer"),
    ("retention.ms", -2, "retention.ms: -2 is outside"),
    ("cleanup.policy", "forever", "cleanup.policy: 'forever' must be"),
    ("compression.type", "brotli", "compression.type: 'brotli' is not one of"),
    ("min.cleanable.dirty.ratio", 1.5, "min.cleanable.dirty.ratio: 1.5 is outside"),
    ("message.timestamp.type", "WallClock", "message.timestamp.type: 'WallClock'"),
    ("segment.ms", 1.5, "segment.ms: expected an integer"),
    ("klake.timestamps.allow.negative", "maybe", "klake.timestamps.allow.negative: expected true or false"),
    ("retention.hours", 1, "unknown topic setting 'retention.hours'"),
])
def test_bad_values_name_the_key(key: str, value, message: str) -> None:
    with pytest.raises(ConfigError, match=f"topic orders: {message}"):
        TopicConfig.from_mapping({key: value}, topic="orders")


def test_compacted_topics_cap_segment_ms_by_max_compaction_lag() -> None:
    compacted = TopicConfig.from_mapping({"cleanup.policy": "compact", "max.compaction.lag.ms": 1000})
    assert compacted.roll_policy().segment_ms == 1000
    deleting = TopicConfig.from_mapping({"max.compaction.lag.ms": 1000})
    assert deleting.roll_policy().segment_ms == 604_800_000


def test_min_timestamp_is_kafkas_zero_unless_the_topic_opts_into_kip228() -> None:
    """The one home of KIP-228's rule: every path (append, truncation, cleaner, checks, stored segments,
    recovery, catalog rows, retention, reads) asks `min_timestamp(config)`."""
    assert min_timestamp(TopicConfig()) == 0
    kip228 = TopicConfig.from_mapping({"klake.timestamps.allow.negative": True})
    assert min_timestamp(kip228) == -(2**63) + 1 == KIP228_MIN_TIMESTAMP
