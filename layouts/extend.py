"""Create an object that extends an existing one, sending only the new tail (S3 multipart with
UploadPartCopy; a local copy plus the tail). Used where a rolled or appended segment starts with the
bytes of an object already stored.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import BinaryIO

import fsspec
from fsspec.asyn import sync

from layouts.metering import Meter, active_meters, record
from layouts.store import (
    ObjectConflictError,
    Parts,
    StorageOptions,
    ensure_object,
    file_io,
    is_local,
    is_s3,
    normalize_uri,
    object_info,
    parts_of,
    publish_local,
    read_bytes,
    size_of,
    whole,
)

S3_MIN_PART_SIZE = 5 * 1024**2  # every part of a multipart upload but the last must be >= 5 MiB
S3_MAX_PART_SIZE = 5 * 1024**3  # and no part (uploaded or copied) may exceed 5 GiB


@dataclass(frozen=True)
class ExtendResult:
    """What `put_extending` did: whether it created the object (False: it already held exactly these bytes),
    how many leading bytes were copied in place from the prefix object and how many were sent."""

    created: bool
    copied_bytes: int
    sent_bytes: int


def put_extending(uri: str, data: bytes | Parts, prefix_uri: str, prefix_size: int,
                  options: StorageOptions | None = None) -> ExtendResult:
    """Create `uri` holding `data` (whole or in `Parts`), whose first `prefix_size` bytes are the whole existing object
    `prefix_uri`, sending only the tail where the store can copy the prefix in place.

    Same contract as `ensure_object`: put-if-absent, `created` False if `uri` already holds exactly
    `data`, `ObjectConflictError` if it holds other bytes. The prefix's size is checked (one HEAD); its
    bytes are the caller's word (objects are immutable), so a wrong prefix would go unnoticed.

    S3, `prefix_size` >= 5 MiB: one multipart upload of UploadPartCopy parts of the prefix and the tail
    as the last part, completed with `If-None-Match: *` and aborted on any failure. Below 5 MiB the
    prefix cannot be a part (only the last part may be smaller), so `data` goes up in one conditional
    PUT. Local: a copy of the prefix file plus the tail, linked into place like `put_if_absent`.
    """
    size = size_of(data)
    if not 0 <= prefix_size <= size:
        raise ValueError(f"prefix of {prefix_size} bytes for an object of {size} bytes")
    if is_s3(uri) and is_s3(prefix_uri) and prefix_size >= S3_MIN_PART_SIZE:
        extend = _extend_s3
    elif is_local(uri) and is_local(prefix_uri):
        extend = _extend_local
    else:
        return ExtendResult(ensure_object(uri, data, options), 0, size)
    _check_prefix_size(prefix_uri, prefix_size, options)
    result = ExtendResult(True, prefix_size, size - prefix_size)
    try:
        extend(uri, data, prefix_uri, prefix_size, options)
    except FileExistsError:
        if read_bytes(uri, options) != whole(data):
            raise ObjectConflictError(f"{uri} already exists with different content") from None
        return replace(result, created=False)
    return result


def _check_prefix_size(prefix_uri: str, prefix_size: int, options: StorageOptions | None) -> None:
    """A prefix object of another size than the caller's would silently give a wrong object."""
    info = object_info(prefix_uri, options)
    if info is None:
        raise FileNotFoundError(f"prefix object {prefix_uri} does not exist")
    if info.size != prefix_size:
        raise ValueError(f"prefix object {prefix_uri} has {info.size} bytes, not {prefix_size}")


def _extend_local(uri: str, data: bytes | Parts, prefix_uri: str, prefix_size: int,
                  options: StorageOptions | None) -> None:
    """Copy the prefix file, append the tail, publish with put-if-absent (`FileExistsError` if taken)."""
    path, source = normalize_uri(uri), normalize_uri(prefix_uri)
    record("PUT", written=size_of(data) - prefix_size)

    def write(out: BinaryIO) -> None:
        with open(source, "rb") as prefix:
            shutil.copyfileobj(prefix, out)
        if out.tell() != prefix_size:
            raise ValueError(f"prefix file {source} changed size while being copied")
        skip = prefix_size
        for part in parts_of(data):
            if skip < len(part):
                out.write(memoryview(part)[skip:])
            skip = max(skip - len(part), 0)

    publish_local(path, write)


def _bucket_and_key(uri: str) -> tuple[str, str]:
    bucket, key = normalize_uri(uri)[len("s3://"):].split("/", 1)
    return bucket, key


def _extend_s3(uri: str, data: bytes | Parts, prefix_uri: str, prefix_size: int,
               options: StorageOptions | None) -> None:
    io = file_io(uri, options)
    bucket, key = _bucket_and_key(uri)
    source_bucket, source_key = _bucket_and_key(prefix_uri)
    upload = _Upload(io.fs, {"Bucket": bucket, "Key": key}, active_meters())
    sync(io.fs.loop, upload.extend, whole(data), {"Bucket": source_bucket, "Key": source_key}, prefix_size)
    io.fs.invalidate_cache(io.path(uri))


@dataclass
class _Upload:
    """One multipart upload to `target`, run on fsspec's event loop; its requests count into the meters
    of the caller (the loop's thread has a context of its own)."""

    fs: fsspec.AbstractFileSystem
    target: dict[str, str]
    meters: Sequence[Meter]

    async def call(self, operation: str, verb: str, written: int = 0, **kwargs: object) -> dict:
        record(verb, written=written, meters=self.meters)
        return await self.fs._call_s3(operation, **self.target, **kwargs)

    async def extend(self, data: bytes, source: dict[str, str], prefix_size: int) -> None:
        """Create, fill and complete the upload; abort it on any failure so that no parts linger
        (billed, invisible) and the key stays absent."""
        created = await self.call("create_multipart_upload", "CreateMultipartUpload")
        self.target = {**self.target, "UploadId": created["UploadId"]}
        try:
            parts = await self._upload_parts(data, source, prefix_size)
            await self.call("complete_multipart_upload", "CompleteMultipartUpload",
                            MultipartUpload={"Parts": parts}, IfNoneMatch="*")
        except BaseException:
            await self._abort()
            raise

    async def _upload_parts(self, data: bytes, source: dict[str, str], prefix_size: int) -> list[dict]:
        """Copy the prefix and send the tail as parts, all at once; wait for every part before failing so
        that the abort does not race parts still in flight."""
        copies = _part_ranges(0, prefix_size)
        tails = _part_ranges(prefix_size, len(data))
        calls = [self._copy_part(number, source, part) for number, part in enumerate(copies, 1)]
        calls += [self._upload_part(number, data[start:end])
                  for number, (start, end) in enumerate(tails, len(copies) + 1)]
        etags = await asyncio.gather(*calls, return_exceptions=True)
        for etag in etags:
            if isinstance(etag, BaseException):
                raise etag
        return [{"PartNumber": number, "ETag": etag} for number, etag in enumerate(etags, 1)]

    async def _copy_part(self, number: int, source: dict[str, str], part: tuple[int, int]) -> str:
        """UploadPartCopy with an explicit range: S3 copies the bytes, none pass through this process."""
        start, end = part
        out = await self.call("upload_part_copy", "UploadPartCopy", PartNumber=number, CopySource=source,
                              CopySourceRange=f"bytes={start}-{end - 1}")
        return out["CopyPartResult"]["ETag"]

    async def _upload_part(self, number: int, body: bytes) -> str:
        out = await self.call("upload_part", "UploadPart", written=len(body), PartNumber=number, Body=body)
        return out["ETag"]

    async def _abort(self) -> None:
        """Best effort: the original error matters more; a bucket lifecycle rule
        (AbortIncompleteMultipartUpload) reclaims an upload whose abort failed."""
        with suppress(Exception):
            await self.call("abort_multipart_upload", "AbortMultipartUpload")


def _part_ranges(start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) cut into the fewest near-equal parts of at most `S3_MAX_PART_SIZE`; the parts of a
    cut range are over half that size, so none is under S3's 5 MiB minimum."""
    length = end - start
    if length <= 0:
        return []
    count = -(-length // S3_MAX_PART_SIZE)
    step = -(-length // count)
    return [(at, min(at + step, end)) for at in range(start, end, step)]
