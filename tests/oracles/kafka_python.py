"""kafka-python (an independent implementation) as the reader of bytes klake writes."""

from __future__ import annotations

from kafka.record.memory_records import MemoryRecords


def read_with_kafka_python(data: bytes) -> tuple[list[tuple], list]:
    """(records as (offset, timestamp, key, value, headers), batches), every batch CRC-validated."""
    records, batches = [], []
    reader = MemoryRecords(bytes(data))
    while (batch := reader.next_batch()) is not None:
        assert batch.validate_crc()
        batches.append(batch)
        records += [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in batch]
    return records, batches
