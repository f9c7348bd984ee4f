"""A log of v2 batches from hypothesis-drawn records, shared by the codec property tests."""

from __future__ import annotations

from engine.format.builder import encode_batch


def encode_log(batches: list[tuple[list, int]]) -> bytes:
    """Each `(records, codec)` as one batch, offsets consecutive from 0; a record is (key, value, ts, headers)."""
    out, base = [], 0
    for records, codec in batches:
        keys, values, ts, headers = zip(*records, strict=True)
        out.append(encode_batch(list(keys), list(values), list(ts), [list(h) for h in headers], base_offset=base,
                                codec=codec))
        base += len(records)
    return b"".join(out)
