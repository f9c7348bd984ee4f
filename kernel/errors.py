"""Errors that name the file, the byte position and the field at fault.

Every reader and validator in klake raises (or reports) these instead of bare exceptions, so that a
user always learns *where* a log is bad: "file 00000000000000000000.log, byte 4242, crc: ...".
"""

from __future__ import annotations


class KlakeError(Exception):
    """Base class of klake's own errors."""


class CorruptRecordError(KlakeError):
    """A batch or record violates Kafka's format at a known byte position.

    `position` is the absolute byte position in `source` of the batch (or record) at fault.
    """

    def __init__(self, source: str, position: int, field: str, message: str) -> None:
        self.source = source
        self.position = position
        self.field = field
        self.message = message
        super().__init__(f"{source}: byte {position}: {field}: {message}")


class TruncatedBatchError(CorruptRecordError):
    """The last batch declares more bytes than the file holds (a partial trailing batch).

    Kafka's reader stops silently here; klake reports it so that nothing is dropped unnoticed.
    """


class InvalidIndexError(KlakeError):
    """An `.index` / `.timeindex` file is not consistent with Kafka's index invariants."""


class ConfigError(KlakeError):
    """A configuration value is invalid; the message names the key."""
