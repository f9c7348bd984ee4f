"""klake's one-buffer decompression of LZ4 and zstd frames (cramjam, sized by the frame's block headers)
against the libraries' own readers, which stay the reference: python-lz4's `lz4.frame.decompress` and
zstandard's streaming `decompressobj` (first frame only, trailing bytes ignored, truncation an error);
and its gzip (zlib-ng) against the standard library's `gzip.decompress` (every member, trailing zeros
ignored, anything else an error), on streams written by klake, by zlib at other levels and with an
optional header field, and by the standard library's own writer.

Frames of every shape a producer may write, then cut, extended, concatenated and mutated: klake returns
exactly the reference's bytes, or raises `CompressionError` where the reference raises.
"""

from __future__ import annotations

import gzip
import io
import random

import lz4.frame
import pytest
import zstandard

from engine.format import compression


def _lz4_reference(data: bytes) -> bytes:
    return lz4.frame.decompress(data)


def _zstd_reference(data: bytes) -> bytes:
    reader = zstandard.ZstdDecompressor().decompressobj()
    out = reader.decompress(data)
    if not reader.eof:
        raise ValueError("incomplete frame")
    return out


def _gzip_streams(payload: bytes) -> list[bytes]:
    named = io.BytesIO()
    with gzip.GzipFile(filename="records.bin", mode="wb", fileobj=named, mtime=1) as f:
        f.write(payload)
    return [bytes(compression.compress(compression.GZIP, payload)), gzip.compress(payload, 1, mtime=0),
            gzip.compress(payload, 9), named.getvalue()]


def _payloads(rng: random.Random) -> list[bytes]:
    text = bytes(rng.choice(b"abcdefgh ") for _ in range(200_000))
    return [b"", b"x", text, bytes(300_000), rng.randbytes(70_000), text[:5000] + bytes(150_000) + text[5000:9000]]


def _lz4_frames(payload: bytes) -> list[bytes]:
    f = lz4.frame
    return [compression.compress(compression.LZ4, payload),
            f.compress(payload, block_size=f.BLOCKSIZE_MAX64KB, block_linked=False, store_size=False),
            f.compress(payload, block_linked=True, content_checksum=True, block_checksum=True),
            f.compress(payload, block_size=f.BLOCKSIZE_MAX4MB, store_size=True)]


def _zstd_frames(payload: bytes) -> list[bytes]:
    return [bytes(compression.compress(compression.ZSTD, payload)),
            zstandard.ZstdCompressor(level=1).compress(payload),
            zstandard.ZstdCompressor(level=19, write_checksum=True, write_content_size=False).compress(payload)]


def _variants(frame: bytes, rng: random.Random) -> list[bytes]:
    out = [frame, frame + b"trailing bytes", frame + frame, frame[:-1], frame[: len(frame) // 2], frame[:5], b""]
    for _ in range(12):
        mutated = bytearray(frame)
        for _ in range(rng.randint(1, 3)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        out.append(bytes(mutated))
    return out


@pytest.mark.parametrize(("codec", "frames", "reference"), [
    (compression.LZ4, _lz4_frames, _lz4_reference),
    (compression.ZSTD, _zstd_frames, _zstd_reference),
    (compression.GZIP, _gzip_streams, gzip.decompress),
], ids=["lz4", "zstd", "gzip"])
def test_frames_decode_as_the_reference_reads_them(codec, frames, reference) -> None:
    rng = random.Random(13)
    checked = 0
    for payload in _payloads(rng):
        for frame in frames(payload):
            for data in _variants(frame, rng):
                try:
                    expected = reference(data)
                except Exception:  # noqa: BLE001 - each library raises its own types
                    expected = None
                if expected is None:
                    with pytest.raises(compression.CompressionError):
                        compression.decompress(codec, data)
                else:
                    assert bytes(compression.decompress(codec, data)) == expected
                checked += 1
    assert checked > 300
