"""A consumer group's committed position carried into a restored log (issue 30, item 4: restore).

A committed offset is the next record the group reads. Restored online (produced again), that record has a
new offset: the first record at or after the committed offset in the offset map (records the archive lacks,
gaps, are skipped as a consumer skips them); a group that had read everything resumes at the restored
log's end. Restored offline (`klake export`: every record keeps its offset), the committed offset stays,
held inside the restored range. Either position is handed to Kafka as the file
`kafka-consumer-groups --reset-offsets --from-file` reads.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def translate_position(committed: int, old: np.ndarray, new: np.ndarray, new_end: int) -> int:
    """The new committed offset of `committed`, through the map `old[i] -> new[i]` (both increasing)."""
    at = int(np.searchsorted(old, committed, side="left"))
    return int(new[at]) if at < len(old) else new_end


def kept_position(committed: int, log_start: int, log_end: int) -> int:
    """The committed offset in a log restored at its own offsets, `[log_start, log_end)`: unchanged inside it
    (a gap there is skipped by the consumer, as in the source); below the log start the next record the
    group reads is the first restored one, and past the end it resumes at the end (`translate_position`)."""
    return min(max(committed, log_start), log_end)


def reset_offsets_csv(positions: Iterable[tuple[str, int, int]]) -> str:
    """One group's `(topic, partition, offset)` positions as `kafka-consumer-groups --reset-offsets
    --from-file` takes them: `TOPIC,PARTITION,OFFSET` lines (Kafka's `ConsumerGroupCommand` reset plan)."""
    return "".join(f"{topic},{partition},{offset}\n" for topic, partition, offset in sorted(positions))
