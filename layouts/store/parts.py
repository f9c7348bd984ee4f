"""An object's bytes whole or in parts: a segment is written part after part (its batches), never joined."""

from __future__ import annotations

from collections.abc import Sequence
from typing import BinaryIO

Parts = Sequence[bytes]
"""An object's bytes as consecutive parts (a segment as its batches were encoded): written part after part,
never joined first, which would hold a second copy of a whole segment in memory (issue 14)."""
_WHOLE = (bytes, bytearray, memoryview)


def parts_of(data: bytes | Parts) -> Parts:
    """`data` as its sequence of parts (one part if it is whole)."""
    return [data] if isinstance(data, _WHOLE) else data


def whole(data: bytes | Parts) -> bytes:
    """`data` as one bytes object, joined only if it is in parts."""
    return bytes(data) if isinstance(data, _WHOLE) else b"".join(data)


def size_of(data: bytes | Parts) -> int:
    """How many bytes `data` (whole or in parts) holds."""
    return sum(map(len, parts_of(data)))


def write_parts(out: BinaryIO, data: bytes | Parts) -> None:
    """Write `data` to `out` part after part (a large part goes straight to the file, not through the
    writer's buffer)."""
    out.writelines(parts_of(data))
