"""Encoders and parsers of Kafka structures that klake only reads or only writes, which the tests need
the other way round: transaction markers to feed the cleaner and the mirror (klake parses them,
`engine.cleaner.txn`), and the leader-epoch checkpoint an export writes (klake never reads one: an
import derives the epochs from the batches). Test-only, so here and not in the product (issue 28)."""

from __future__ import annotations

import struct

from engine.log.kafka_files import EpochEntry, KafkaFileError, parse_checkpoint


def control_record(kind: int, coordinator_epoch: int = 0) -> tuple[bytes, bytes]:
    """Key and value of a transaction marker (spec 1.6): key = (version 0, type), value = (0, epoch)."""
    return struct.pack(">hh", 0, kind), struct.pack(">hi", 0, coordinator_epoch)


def parse_leader_epoch_checkpoint(data: bytes, source: str) -> list[EpochEntry]:
    """A `LeaderEpochCheckpointFile`'s entries; a malformed line is a `KafkaFileError` naming it."""
    try:
        return [EpochEntry(int(epoch), int(start)) for epoch, start in parse_checkpoint(data, source, 2)]
    except ValueError as exc:
        raise KafkaFileError(f"{source}: {exc}") from None
