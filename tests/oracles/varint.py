"""Kafka's zig-zag LEB128 varint/varlong size, by brute force (spec 1.5): the tests' reference for the
engine's compiled sizes and batch planning."""

from __future__ import annotations


def varint_size(n: int) -> int:
    """Bytes of the zig-zag LEB128 encoding of the int64 `n`."""
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size
