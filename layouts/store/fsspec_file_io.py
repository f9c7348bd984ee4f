"""Any other fsspec protocol: reads, listings, replacing writes and deletes, no atomic creation."""

from __future__ import annotations

import fsspec

from layouts.store.file_io import FileIO


class FsspecFileIO(FileIO):
    """Any other fsspec protocol (`memory://`, …): reads, listings, replacing writes and deletes, but no
    atomic creation, so no segment can be written there."""

    def __init__(self, fs: fsspec.AbstractFileSystem, protocol: str) -> None:
        super().__init__(fs)
        self.protocol = protocol

    def path(self, uri: str) -> str:
        return uri.split("://", 1)[1]
