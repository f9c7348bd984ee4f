"""Which topics an append writes and how many partitions each has, checked before anything is written."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from jobs.runtime.config import KlakeConfig
from kernel.errors import KlakeError
from kernel.names import InvalidNameError, TopicPartition, validate_topic


def selected_topics(found: dict[str, str] | None, named: Sequence[str]) -> list[str]:
    """The topics this run appends: those of the input's `topic` column (`found`, each with where it was
    found; only the `named` --topic ones, if any), each checked by Kafka's rule and named with where it was
    found; without a `topic` column, the one --topic."""
    if found is None:
        if len(named) != 1:
            raise KlakeError("the input has no `topic` column: name exactly one --topic")
        return list(named)
    topics = sorted(t for t in found if not named or t in named)
    for topic in topics:
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            raise KlakeError(f"input {found[topic]}: column `topic`: {exc}") from None
    return topics


def partition_counts(config: KlakeConfig, catalogued_partitions: Iterable[TopicPartition],
                     topics: Sequence[str]) -> dict[str, int]:
    """Each topic's partition count: declared (`topics.<t>.partitions`), else what the catalog holds."""
    catalogued: dict[str, int] = {}
    for tp in catalogued_partitions:
        catalogued[tp.topic] = max(catalogued.get(tp.topic, 0), tp.partition + 1)
    counts = {}
    for topic in topics:
        declared = config.topic(topic)
        if declared is not None and declared.partitions is not None:
            if declared.partitions < catalogued.get(topic, 0):
                raise KlakeError(f"topic {topic}: declares {declared.partitions} partitions but the catalog "
                                 f"holds {catalogued[topic]}; partitions can only be added")
            counts[topic] = declared.partitions
        elif topic in catalogued:
            counts[topic] = catalogued[topic]
        else:
            raise KlakeError(f"topic {topic} is new: declare its partition count (topics.{topic}.partitions in "
                             f"the config, or --set topics.{topic}.partitions=N)")
    return counts
