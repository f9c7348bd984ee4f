"""Topic settings stored per topic as immutable versions, on a local dir and on S3 (moto)."""

from __future__ import annotations

import json
import threading

import pytest

from engine.errors import ConfigError
from engine.log.topic_config import TopicConfig
from engine.names import InvalidNameError
from engine.ops.topic_store import load_topic_config, save_topic_config
from layouts.store import list_objects
from layouts.store.bound import Store
from tests.conftest import Backend


def test_defaults_save_load_and_versions(backend: Backend) -> None:
    root = backend.uri("root")
    assert load_topic_config(Store(root, backend.options), "orders") == TopicConfig()
    first = TopicConfig.from_mapping({"retention.ms": 1000, "cleanup.policy": "compact"})
    assert save_topic_config(Store(root, backend.options), "orders", first) == 1
    assert load_topic_config(Store(root, backend.options), "orders") == first
    second = TopicConfig.from_mapping({"retention.ms": 2000})
    assert save_topic_config(Store(root, backend.options), "orders", second) == 2
    assert load_topic_config(Store(root, backend.options), "orders") == second
    assert load_topic_config(Store(root, backend.options), "clicks") == TopicConfig()
    names = [info.name for info in list_objects(backend.uri("root", "_topics", "orders"), backend.options)]
    assert names == ["config-00000001.json", "config-00000002.json"]


def test_a_bad_stored_value_is_an_error_naming_topic_and_key(backend: Backend) -> None:
    root = backend.uri("root")
    backend.put(backend.uri("root", "_topics", "orders", "config-00000001.json"),
                json.dumps({"retention.ms": "soon"}).encode())
    with pytest.raises(ConfigError, match="topic orders: retention.ms: must be an integer >= -1, got 'soon'"):
        load_topic_config(Store(root, backend.options), "orders")
    with pytest.raises(InvalidNameError):
        load_topic_config(Store(root, backend.options), "../etc")


def test_concurrent_saves_never_overwrite_each_other(tmp_path) -> None:
    root = str(tmp_path / "root")
    saved: dict[int, int] = {}  # version -> retention.ms written as that version
    configs = [TopicConfig.from_mapping({"retention.ms": 1000 + i}) for i in range(4)]
    threads = [threading.Thread(target=lambda c=c: saved.__setitem__(save_topic_config(Store(root), "t", c), c.retention_ms))
               for c in configs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(saved) == [1, 2, 3, 4] and sorted(saved.values()) == [1000, 1001, 1002, 1003]
    assert load_topic_config(Store(root), "t").retention_ms == saved[4]
