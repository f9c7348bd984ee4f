"""Topic settings stored beside the data: `{root}/_topics/{topic}/config-{version:08d}.json`.

Each save writes a new version with put-if-absent, never overwriting one (like every klake object),
so concurrent saves cannot silently lose each other: the loser retries on top of the winner's
version. The newest version is the topic's configuration; a topic never configured has Kafka's
defaults.
"""

from __future__ import annotations

import json
import re

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt

from engine.errors import KlakeError
from engine.log.topic_config import TopicConfig
from engine.names import validate_topic
from layouts.store.bound import Store

_VERSION = re.compile(r"config-(\d{8})\.json")
MAX_SAVE_ATTEMPTS = 5


def _versions(store: Store, topic: str) -> list[tuple[int, str]]:
    prefix = store.uri("_topics", validate_topic(topic))
    found = [(int(m.group(1)), info.uri) for info in store.list_objects(prefix)
             if (m := _VERSION.fullmatch(info.name))]
    return sorted(found)


def load_topic_config(store: Store, topic: str) -> TopicConfig:
    """The newest stored configuration of `topic`, or Kafka's defaults if none was saved."""
    return stored_topic_config(store, topic) or TopicConfig()


def stored_topic_config(store: Store, topic: str) -> TopicConfig | None:
    """The newest stored configuration of `topic`, or None if none was saved."""
    versions = _versions(store, topic)
    if not versions:
        return None
    uri = versions[-1][1]
    try:
        settings = json.loads(store.read(uri))
    except ValueError as exc:
        raise KlakeError(f"{uri}: not valid JSON: {exc}") from None
    return TopicConfig.from_mapping(settings, topic=topic)


def save_topic_config(store: Store, topic: str, config: TopicConfig) -> int:
    """Store `config` as the next version of `topic`'s settings; returns the version written."""
    body = json.dumps(config.to_mapping(), indent=2, sort_keys=True).encode()

    def save_next() -> int:
        versions = _versions(store, topic)
        version = versions[-1][0] + 1 if versions else 1
        store.put_if_absent(store.uri("_topics", topic, f"config-{version:08d}.json"), body)
        return version

    # The loser of a race re-reads at once: the winner's version is already there to build on.
    retrying = Retrying(stop=stop_after_attempt(MAX_SAVE_ATTEMPTS), retry=retry_if_exception_type(FileExistsError))
    try:
        return retrying(save_next)
    except RetryError:
        raise KlakeError(f"topic {topic}: could not save its configuration after {MAX_SAVE_ATTEMPTS} racing "
                         "attempts") from None
