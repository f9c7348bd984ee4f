"""The files a broker keeps beside its segments: checked against a Kafka 3.4 broker's own files
(`tests/fixtures/kafka/broker/timeindex_test-0/`) and against Kafka's rules written out by hand."""

from __future__ import annotations

import base64
import uuid

import numpy as np
import pytest

from engine.format.batch import BatchHeaders, scan_batches
from engine.log.kafka_files import (
    EpochEntry,
    KafkaFileError,
    LeaderEpochCache,
    cut_at_batches,
    derived_topic_id,
    leader_epoch_checkpoint,
    offset_checkpoint,
    parse_offset_checkpoint,
    parse_topic_id,
    partition_metadata,
)
from kernel.names import TopicPartition
from tests.codecs_for_tests import parse_leader_epoch_checkpoint


def test_the_broker_files_are_reproduced_byte_for_byte(kafka_fixtures) -> None:
    directory = kafka_fixtures / "broker" / "timeindex_test-0"
    epochs = (directory / "leader-epoch-checkpoint").read_bytes()
    assert parse_leader_epoch_checkpoint(epochs, "leader-epoch-checkpoint") == [EpochEntry(0, 0)]
    assert leader_epoch_checkpoint([EpochEntry(0, 0)]) == epochs
    metadata = (directory / "partition.metadata").read_bytes()
    topic_id = metadata.decode().rsplit("topic_id: ", 1)[1]
    assert parse_topic_id(topic_id) == topic_id and partition_metadata(topic_id) == metadata

    cache = LeaderEpochCache()  # the broker's cache, rebuilt from its own batches
    for log in sorted(directory.glob("*.log")):
        cache.append(scan_batches(log.read_bytes(), str(log)).headers)
    assert cache.entries == [EpochEntry(0, 0)]


def test_offset_checkpoints_have_kafkas_three_parts() -> None:
    offsets = {TopicPartition("b", 1): 7, TopicPartition("a.x", 10): 0, TopicPartition("a.x", 2): 123}
    data = offset_checkpoint(offsets)
    assert data == b"0\n3\na.x 2 123\na.x 10 0\nb 1 7\n"
    assert parse_offset_checkpoint(data, "f") == offsets
    assert offset_checkpoint({}) == b"0\n0\n"
    for bad, where in ((b"1\n0\n", "f: line 1"), (b"0\n2\na 0 1\n", "f: line 2"), (b"0\n1\na 0\n", "f: line 3"),
                       (b"0\n1\na b 1\n", "f: line 3"), (b"0\n1\na/b 0 1\n", "f: line 3")):
        with pytest.raises(KafkaFileError, match=where):
            parse_offset_checkpoint(bad, "f")


def _headers(batches: list[tuple[int, int, int]]) -> BatchHeaders:
    """Batch headers with the (magic, base offset, leader epoch) given; the cache reads nothing else."""
    columns = {name: np.zeros(len(batches), np.int64) for name in BatchHeaders.__dataclass_fields__}
    columns["magic"] = np.array([b[0] for b in batches], np.int8)
    columns["base_offset"] = np.array([b[1] for b in batches], np.int64)
    columns["partition_leader_epoch"] = np.array([b[2] for b in batches], np.int32)
    return BatchHeaders(**columns)


def test_the_leader_epoch_cache_follows_kafkas_assign_rule() -> None:
    cache = LeaderEpochCache()
    cache.append(_headers([(2, 0, 0), (2, 5, 0), (2, 10, 3), (2, 20, 3), (2, 30, 5)]))
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(3, 10), EpochEntry(5, 30)]
    cache.append(_headers([(2, 40, -1), (2, 45, 4)]))  # no epoch: ignored; a smaller epoch: later entries go
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(3, 10), EpochEntry(4, 45)]
    cache.truncate_from_start(12)  # the last entry at or below the log start restarts there
    assert cache.entries == [EpochEntry(3, 12), EpochEntry(4, 45)]
    cache.truncate_from_start(45)
    assert cache.entries == [EpochEntry(4, 45)]
    cache.append(_headers([(1, 50, -1)]))  # a legacy batch clears the cache, as UnifiedLog.append does
    assert cache.entries == []


def test_topic_ids_are_kafka_uuids() -> None:
    derived = derived_topic_id("orders")
    assert derived == derived_topic_id("orders") != derived_topic_id("orders2")
    assert parse_topic_id(derived) == derived and not derived.startswith("-")
    raw = base64.urlsafe_b64decode(derived + "==")
    assert len(raw) == 16 and uuid.UUID(bytes=raw).int > 1
    for bad in ("AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ", "short", "p59PN4qkR8y176nhuDDPP!"):
        with pytest.raises(KafkaFileError):
            parse_topic_id(bad)


def test_a_cut_keeps_whole_batches(kafka_fixtures) -> None:
    log = (kafka_fixtures / "broker" / "docker-connect-status-0" / "00000000000000000000.log").read_bytes()
    headers = scan_batches(log).headers
    last, first = headers.last_offset, headers.base_offset
    n = len(headers)
    assert cut_at_batches(headers, 0, None, None) == cut_at_batches(headers, 0, 0, int(last[-1]) + 1)
    whole = cut_at_batches(headers, 0, None, None)
    assert (whole.first, whole.end, whole.start, whole.stop, whole.base_offset) == (0, n, 0, len(log), 0)
    for low in (0, 1, int(first[5]), int(last[5]), int(last[5]) + 1):
        for high in (low + 1, int(last[-1]), int(last[-1]) + 1):
            cut = cut_at_batches(headers, 0, low, high)
            kept = [i for i in range(n) if last[i] >= low and first[i] < high]  # brute force
            assert list(range(cut.first, cut.end)) == kept
            assert log[cut.start:cut.stop] == b"".join(
                log[int(headers.position[i]):int(headers.next_position[i])] for i in kept)
            assert cut.base_offset == (0 if kept[0] == 0 else int(first[kept[0]]))
    assert cut_at_batches(headers, 0, int(last[-1]) + 1, None).empty
    assert cut_at_batches(headers, 0, None, 0).empty
