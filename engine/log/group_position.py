"""A consumer group's committed position carried through an offset map (issue 30, item 4: restore).

A committed offset is the next record the group reads. Restored, that record has a new offset: the first
record at or after the committed offset in the map (records the archive lacks, gaps, are skipped as a
consumer skips them); a group that had read everything restored resumes at the restored log's end.
"""

from __future__ import annotations

import numpy as np


def translate_position(committed: int, old: np.ndarray, new: np.ndarray, new_end: int) -> int:
    """The new committed offset of `committed`, through the map `old[i] -> new[i]` (both increasing)."""
    at = int(np.searchsorted(old, committed, side="left"))
    return int(new[at]) if at < len(old) else new_end
