"""klake's one-buffer decompression of LZ4 and zstd frames (sized by the declared content size, else by the
frame's block headers) against the libraries' own readers, which stay the reference: python-lz4's `lz4.frame.decompress` and
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
import xxhash
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
    return [bytes(compression.compress(compression.LZ4, payload)),
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


@pytest.mark.parametrize(("codec", "reference", "size_at"), [
    (compression.LZ4, _lz4_reference, 6),   # FLG, BD, then the 8-byte content size
    (compression.ZSTD, _zstd_reference, 5),  # descriptor, then (single segment: no window byte) the size
], ids=["lz4", "zstd"])
def test_a_wrong_declared_content_size_is_judged_as_the_reference_judges_it(codec, reference, size_at) -> None:
    """klake's own v2 frames declare their content size and are decompressed into exactly that many bytes;
    a frame that declares more or fewer bytes than it holds decodes as the reference reads it, or raises."""
    payload = bytes(random.Random(7).choice(b"abcdefgh ") for _ in range(100_000))
    frame = bytes(compression.compress(codec, payload))
    assert bytes(compression.decompress(codec, frame)) == payload
    checked = 0
    for delta in (-100_000, -1, 1, 255, 1 << 20):
        forged = bytearray(frame)
        width = 8 if codec == compression.LZ4 else 4
        declared = int.from_bytes(frame[size_at:size_at + width], "little")
        forged[size_at:size_at + width] = max(0, declared + delta).to_bytes(width, "little")
        if codec == compression.LZ4:  # the header checksum covers the size: make it right again
            forged[size_at + width] = (xxhash.xxh32_intdigest(bytes(forged[4:size_at + width])) >> 8) & 0xFF
        try:
            expected = reference(bytes(forged))
        except Exception:  # noqa: BLE001 - each library raises its own types
            expected = None
        if expected is None:
            with pytest.raises(compression.CompressionError):
                compression.decompress(codec, bytes(forged))
        else:
            assert bytes(compression.decompress(codec, bytes(forged))) == expected
        checked += 1
    assert checked == 5


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_lz4_frames_are_python_lz4s(magic) -> None:
    """klake writes its LZ4 frames itself (blocks straight into the batch buffer); python-lz4's frame writer,
    with the same settings, is the reference for every byte: header, block size choice, stored blocks."""
    rng = random.Random(3160)
    text = bytes(rng.choice(b"abcdefgh ") for _ in range(600_000))
    for payload in [b"", b"x", text[:65_536], text[:65_537], text, rng.randbytes(300_000), bytes(262_144),
                    rng.randbytes(262_144 * 2) + text[:1000]]:
        expected = lz4.frame.compress(payload, block_size=lz4.frame.BLOCKSIZE_MAX256KB, block_linked=False,
                                      content_checksum=False, store_size=magic == 2)
        assert bytes(compression.compress(compression.LZ4, payload, magic)) == expected
        if magic == 2:
            assert bytes(compression.compress_behind(compression.LZ4, payload, 61)[61:]) == expected


@pytest.mark.parametrize("codec", [compression.SNAPPY, compression.LZ4, compression.ZSTD])
def test_a_compressed_batch_has_a_buffer_of_its_own_size(codec) -> None:
    """A batch compressed behind its header's room is kept (a segment holds its batches until its upload): it holds
    a buffer of exactly its bytes, not the compressor's bound, and no later compression (which reuses the thread's
    scratch buffer) changes it; the reference reads each back to its records."""
    rng = random.Random(30)
    first, second = (b"".join(b'{"user": %d, "event": "click"}' % rng.randrange(50_000) for _ in range(30_000))
                     for _ in range(2))
    packed = compression.compress_behind(codec, first, 61)
    kept = bytes(packed)
    again = compression.compress_behind(codec, second, 61)
    for out, data in ((packed, first), (again, second)):
        assert out.obj.size == len(out) < len(data) // 2
        assert compression.decompress(codec, out[61:]) == data
    assert bytes(packed) == kept
    if codec == compression.LZ4:
        assert _lz4_reference(bytes(packed[61:])) == first
    elif codec == compression.ZSTD:
        assert _zstd_reference(bytes(packed[61:])) == first
