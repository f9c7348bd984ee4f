"""A seekable file object over one stored object whose every read is one ranged GET."""

from __future__ import annotations

import io

from layouts.metering import active_meters, counting_into
from layouts.store.file_io import FileIO


class RangedObject(io.RawIOBase):
    """A read-only, seekable view of one object whose every read is one ranged GET, counted into the
    meters active where it was opened (pyarrow reads through it from its own threads)."""

    def __init__(self, store: FileIO, uri: str, size: int) -> None:
        super().__init__()
        self.store, self.uri, self.size, self.position = store, uri, size, 0
        self.meters = active_meters()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(base + offset, 0)
        return self.position

    def readinto(self, buffer: bytearray | memoryview) -> int:
        end = min(self.position + len(buffer), self.size)
        if end <= self.position:
            return 0
        with counting_into(self.meters):
            data = self.store.read(self.uri, self.position, end)
        buffer[:len(data)] = data
        self.position += len(data)
        return len(data)
