"""An Aiven tiered-storage upload read as a Kafka segment's files, through its manifest's chunk index.

The importer registers such a segment under names of the `aiven+` scheme over the bucket's own URIs:
`aiven+s3://bucket/prefix/{topic}-{topicId}/{partition}/{base}-{uuid}.log` (locally `aiven+file:///…`),
and `.index` / `.timeindex` beside it for the offset and time indexes held in the upload's `.indexes`
object. Every reading job then reads them with `read_bytes` as it reads any segment, and this `FileIO`
answers from the upload (`layouts.aiven_manifest` says how it is encoded):

- a byte range of the `.log` is one ranged GET of the transformed chunks holding it (from the first one's
  start to the last one's end), each decrypted and decompressed, then cut to the range;
- an index is one ranged GET of its region of `.indexes`, decrypted when the upload is encrypted (a page
  of a plain one is a ranged GET of that page alone; AES-GCM authenticates the region only whole);
- the manifest is read once per process and upload (an upload never changes: a new one gets a new segment
  uuid), so a lookup costs the manifest, the index region and the chunks holding the answer.

Every write is refused: the bucket belongs to the broker. The key ring comes from `KLAKE_AIVEN_KEY_RING`,
read when a data key is first unwrapped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO, NoReturn

from layouts.aiven_manifest import (
    AivenObjectError,
    KeyRing,
    SegmentManifest,
    decode_chunk,
    key_ring_from_env,
    parse_manifest,
)
from layouts.store.file_io import DeleteResult, FileIO, ObjectInfo
from layouts.store.parts import Parts

SCHEME = "aiven+"
SUFFIXES = {"log": None, "index": "offset", "timeindex": "timestamp"}
"""The segment files an upload is read as, and the `segmentIndexes` entry each index comes from."""
_CACHED_MANIFESTS = 4096
_manifests: OrderedDict[str, SegmentManifest] = OrderedDict()
_lock = threading.Lock()


def aiven_uri(uri: str) -> str:
    """The `aiven+` name of a bucket object's URI (a local path becomes `aiven+file://…`)."""
    return SCHEME + (uri if "://" in uri else "file://" + uri)


def bucket_uri(uri: str) -> str:
    """The bucket object an `aiven+` name stands on (the inverse of `aiven_uri`)."""
    rest = uri[len(SCHEME):]
    return rest[len("file://"):] if rest.startswith("file://") else rest


def upload_stem(uri: str) -> tuple[str, str]:
    """The bucket URI of an upload without its suffix, and the segment file an `aiven+` name reads as."""
    stem, _, suffix = bucket_uri(uri).rpartition(".")
    if suffix not in SUFFIXES:
        raise AivenObjectError(f"{uri}: an Aiven upload reads as .log, .index or .timeindex, not .{suffix}")
    return stem, suffix


class AivenFileIO(FileIO):
    """Read-only `FileIO` over the uploads of an Aiven tiered-storage bucket (`inner`: the bucket's store)."""

    def __init__(self, inner: FileIO) -> None:
        super().__init__(inner.fs)
        self.inner = inner
        self._ring: KeyRing | None = None

    def path(self, uri: str) -> str:
        return uri

    def manifest(self, stem: str) -> SegmentManifest:
        """The upload's manifest, read once per process."""
        uri = stem + ".rsm-manifest"
        with _lock:
            if uri in _manifests:
                _manifests.move_to_end(uri)
                return _manifests[uri]
        manifest = parse_manifest(self._get(uri, None, None, "the upload's manifest"), uri)
        with _lock:
            _manifests[uri] = manifest
            while len(_manifests) > _CACHED_MANIFESTS:
                _manifests.popitem(last=False)
        return manifest

    def _get(self, uri: str, start: int | None, end: int | None, what: str) -> bytes:
        try:
            return self.inner.read(uri, start, end)
        except FileNotFoundError:
            raise AivenObjectError(f"{uri}: missing: {what} is not in the bucket") from None

    def _key_ring(self) -> KeyRing | None:
        if self._ring is None:
            self._ring = key_ring_from_env()
        return self._ring

    def read(self, uri: str, start: int | None, end: int | None) -> bytes:
        stem, suffix = upload_stem(uri)
        manifest = self.manifest(stem)
        if suffix == "log":
            size = manifest.chunk_index.original_file_size
            return self._read_log(stem + ".log", manifest, 0 if start is None else start,
                                  size if end is None else min(end, size))
        name = SUFFIXES[suffix] or ""
        if not manifest.encrypted and start is not None and end is not None:  # a page of a plain index
            region = manifest.indexes[name]
            end = min(end, region.size)
            return self._get(stem + ".indexes", region.position + start, region.position + end,
                             "the segment's indexes") if start < end else b""
        return self._read_index(stem + ".indexes", manifest, name)[start:end]

    def _read_log(self, log: str, manifest: SegmentManifest, start: int, end: int) -> bytes:
        chunks = manifest.chunk_index.chunks_for(start, end)
        if not chunks:
            return b""
        first = chunks[0].transformed_position
        last = chunks[-1].transformed_position + chunks[-1].transformed_size
        raw = self._get(log, first, last, "the segment's log")
        parts = []
        for chunk in chunks:
            at, to = chunk.transformed_position, chunk.transformed_position + chunk.transformed_size
            what = f"{log}: chunk {chunk.number} (object bytes {at}..{to - 1})"
            if first + len(raw) < to:
                raise AivenObjectError(f"{what}: truncated: the object ends at byte {first + len(raw)}")
            parts.append(decode_chunk(raw[at - first:to - first], manifest, self._key_ring(), what,
                                      chunk.original_size, manifest.compression))
        data = b"".join(parts)
        origin = chunks[0].original_position
        return data[start - origin:end - origin]

    def _read_index(self, indexes: str, manifest: SegmentManifest, name: str) -> bytes:
        region = manifest.indexes[name]
        if region.size == 0:
            return b""
        raw = self._get(indexes, region.position, region.position + region.size, "the segment's indexes")
        what = f"{indexes}: {name} index (object bytes {region.position}..{region.position + region.size - 1})"
        if len(raw) < region.size:
            raise AivenObjectError(f"{what}: truncated: the object ends at byte {region.position + len(raw)}")
        return decode_chunk(raw, manifest, self._key_ring(), what, manifest.original_index_size(name), False)

    def read_view(self, uri: str, start: int, end: int) -> bytes:
        return self.read(uri, start, end)

    def info(self, uri: str) -> ObjectInfo | None:
        """The segment file's size as the broker wrote it; the `.log` object's time."""
        stem, suffix = upload_stem(uri)
        log = self.inner.info(stem + ".log")
        if log is None:
            return None
        return ObjectInfo(uri, self._sizes(self.manifest(stem))[suffix], log.mtime_ms)

    def check_access(self, uri: str, write: bool) -> None:
        if write:
            self._refuse(uri)
        self.inner.check_access(bucket_uri(uri), False)

    def _refuse(self, uri: str) -> NoReturn:
        raise AivenObjectError(f"{uri}: an upload of a tiered-storage bucket: klake never writes into a bucket "
                               "a broker owns")

    def list_objects(self, uri: str) -> list[ObjectInfo]:
        """The uploads under `uri` that have a manifest, each as its `.log`, `.index` and `.timeindex` (the
        sizes the broker's files had: one manifest GET per upload, once per process); uploads whose manifest
        does not read are left out (a row pointing at one is then missing, as `scrub` reports)."""
        listed = self.inner.list_objects(bucket_uri(uri))
        names = {info.uri for info in listed}
        found = []
        for info in listed:
            stem = info.uri.removesuffix(".log")
            if stem == info.uri or f"{stem}.rsm-manifest" not in names:
                continue
            try:
                found += [ObjectInfo(f"{aiven_uri(stem)}.{suffix}", size, info.mtime_ms)
                          for suffix, size in self._sizes(self.manifest(stem)).items()]
            except AivenObjectError:
                continue
        return sorted(found, key=lambda found_info: found_info.uri)

    @staticmethod
    def _sizes(manifest: SegmentManifest) -> dict[str, int]:
        """The sizes of the segment files an upload reads as."""
        return {suffix: manifest.chunk_index.original_file_size if index is None
                else manifest.original_index_size(index) for suffix, index in SUFFIXES.items()}

    def list_dirs(self, uri: str) -> list[str]:
        self._refuse(uri)

    def put_if_absent(self, uri: str, data: bytes | Parts) -> None:
        self._refuse(uri)

    def write(self, uri: str, data: bytes) -> None:
        self._refuse(uri)

    @contextmanager
    def open_write(self, uri: str) -> Iterator[BinaryIO]:
        self._refuse(uri)
        yield  # type: ignore[unreachable]

    def move(self, source: str, target: str) -> None:
        self._refuse(source)

    def delete_tree(self, uri: str) -> None:
        self._refuse(uri)

    def delete(self, uri: str) -> bool:
        self._refuse(uri)

    def delete_many(self, uris: list[str]) -> DeleteResult:
        self._refuse(uris[0] if uris else SCHEME)
