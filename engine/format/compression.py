"""Kafka's compression codecs (spec 1.11): ids, names, compress and decompress.

- gzip: a standard gzip stream (RFC 1952; members may be concatenated), deflated at Kafka's default level 6
  (KIP-390). zlib-ng does the deflating and inflating: its streams are standard gzip (any reader
  inflates them to the same bytes, though not byte-identical to zlib's at the same level), and it runs
  ~1.7x (deflate) and ~2x (inflate) faster than zlib.
- snappy: Kafka frames it with xerial's `SnappyOutputStream` (magic header, then length-prefixed raw
  snappy blocks); some old clients wrote bare raw snappy, which snappy-java also reads.
- lz4: LZ4 frame format. Magic-0 data carries Kafka's historical wrong header checksum (KAFKA-3160):
  the checksum byte was computed over the magic number too, so it is recomputed before decoding.
- zstd: a standard zstd frame (zstd-jni's stream, which Kafka's producer uses, writes no content size),
  level 3 (Kafka's default), written by libzstd's one-shot compressor without its 1.5.7 block pre-splitter
  (see `_zstd_cctx`).

klake's v2 LZ4 and zstd frames carry their content size (an optional field of both frame formats, which
kafka-clients' readers accept): a reader then decompresses into a buffer of exactly that size, in one pass
(libzstd decodes straight into it instead of through its window buffer). Frames without it (Kafka's
producers') are decompressed into a buffer sized by their block headers.
"""

from __future__ import annotations

import functools
import os
import struct
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import cramjam
import lz4.frame
import pyarrow as pa
import xxhash
import zstandard
from zlib_ng import gzip_ng, zlib_ng
from zstandard.backend_cffi import ffi as zstd_ffi
from zstandard.backend_cffi import lib as zstd_lib

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
IDS = {name: codec for codec, name in NAMES.items()}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size, as Kafka uses it
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK = 256 * 1024
_GZIP_LEVEL = 6  # Kafka's default `compression.gzip.level` (KIP-390)


class CompressionError(ValueError):
    """Compressed data that its codec cannot decode."""


def codec_id(name: str) -> int:
    """Codec id for a `compression.type` name (`producer` is not a batch codec)."""
    try:
        return IDS[name]
    except KeyError:
        raise ValueError(f"unknown compression codec {name!r}; expected one of {sorted(IDS)}") from None


def compress(codec: int, data: bytes | memoryview, magic: int = 2) -> bytes | memoryview:
    """Compress a records blob the way Kafka's producer does for `codec` (bytes, or a bytes-like view), plus
    the content size in v2 LZ4 and zstd frames (see above; legacy wrappers' LZ4 frames keep Kafka's shape)."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return gzip_ng.compress(data, compresslevel=_GZIP_LEVEL, mtime=0)
    if codec == SNAPPY:
        return _xerial_compress(data, 0)
    if codec == LZ4:
        return _lz4_compress(data, 0, magic == 2)
    if codec == ZSTD:
        return _zstd_compress(data, 0)
    raise ValueError(f"unknown compression codec id {codec}")


def compress_behind(codec: int, data: bytes | memoryview, room: int) -> memoryview:
    """`compress(codec, data)` in a writable buffer behind `room` free bytes, for the caller to write a
    batch header in place (no copy of the compressed records to join them). snappy, LZ4 and zstd are
    compressed straight into it; gzip's library returns its own buffer, copied in once."""
    if codec == SNAPPY:
        return _xerial_compress(data, room)
    if codec == ZSTD:
        return _zstd_compress(data, room)
    if codec == LZ4:
        return _lz4_compress(data, room, True)
    packed = memoryview(compress(codec, data)).cast("B")
    out = _writable(room + len(packed))
    out[room:] = packed
    return out


def decompress(codec: int, data: bytes | memoryview, magic: int = 2) -> bytes | memoryview:
    """Decompress one batch's records (v2: bytes or a bytes-like view) or one wrapper's value (v0/v1: bytes)."""
    try:
        if codec == NONE:
            return bytes(data)
        if codec == GZIP:
            return _gunzip(data)
        if codec == SNAPPY:
            out = _xerial_decompress(data)
            return out if magic == 2 else bytes(out)
        if codec == LZ4:
            out = _lz4_decompress(_fix_kafka_3160_checksum(bytes(data)) if magic == 0 else data)
            return out if magic == 2 else bytes(out)
        if codec == ZSTD:
            return _zstd_decompress(data)
    except CompressionError:
        raise
    except Exception as exc:  # each library raises its own types; normalise them
        raise CompressionError(f"{NAMES.get(codec, codec)} data does not decode: {exc}") from exc
    raise CompressionError(f"unknown compression codec id {codec}")


def _gunzip(data: bytes | memoryview) -> bytes:
    try:
        return gzip_ng.decompress(data)
    except (OSError, EOFError, zlib_ng.error) as exc:
        raise CompressionError(f"gzip data does not decode: {exc}") from exc


def _xerial_compress(data: bytes | memoryview, room: int) -> memoryview:
    """xerial framing around raw snappy blocks, each compressed straight into its place in one output
    buffer (no per-block copies and no join), behind `room` bytes left free for the caller."""
    view = memoryview(data).cast("B")
    blocks = [view[start:start + _XERIAL_BLOCK] for start in range(0, len(view), _XERIAL_BLOCK)]
    out = _scratch(room + len(_XERIAL_HEADER) + sum(4 + cramjam.snappy.compress_raw_max_len(b) for b in blocks))
    out[room:room + len(_XERIAL_HEADER)] = _XERIAL_HEADER
    at = room + len(_XERIAL_HEADER)
    for block in blocks:
        size = cramjam.snappy.compress_raw_into(block, out[at + 4:])
        struct.pack_into(">i", out, at, size)
        at += 4 + size
    return _kept(out, at)


def _xerial_decompress(data: bytes | memoryview) -> bytes | memoryview:
    """Every block decompressed straight into its place in one buffer sized by the blocks' own length
    preambles (no per-block copies and no join); bare raw snappy (old clients) is one block."""
    view = memoryview(data).cast("B")
    if view[:len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    pos = 16
    blocks = []
    while pos < len(view):
        if pos + 4 > len(view):
            raise CompressionError(f"xerial snappy block length cut at byte {pos}")
        (length,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise CompressionError(f"xerial snappy block at byte {pos - 4} declares {length} bytes")
        blocks.append(view[pos:pos + length])
        pos += length
    sizes = [cramjam.snappy.decompress_raw_len(block) for block in blocks]
    out = _writable(sum(sizes))
    at = 0
    for block, size in zip(blocks, sizes, strict=True):
        if cramjam.snappy.decompress_raw_into(block, out[at:at + size]) != size:
            raise CompressionError(f"a xerial snappy block decodes to fewer than its declared {size} bytes")
        at += size
    return out


def _fitted(out: memoryview, size: int) -> memoryview:
    """The first `size` bytes of a buffer sized by a frame's block bound, copied out when they fill less
    than half of it: a small batch must not hold on to a maximum-block-sized buffer (many chunks live at
    once while a segment is decoded, and Arrow's pool backs what it hands out in large pages). The copy
    goes to the pool too: a fresh `bytes` of this size costs page faults (~0.5 ns a byte), which is more
    than the decompression."""
    if 2 * size >= len(out):
        return out[:size]
    fitted = _writable(size)
    fitted[:] = out[:size]
    return fitted


def _writable(size: int) -> memoryview:
    """An uninitialised byte buffer from Arrow's memory pool, which keeps freed memory for the next
    call (fresh pages from the OS cost a page fault per 4 KiB)."""
    return memoryview(pa.allocate_buffer(size)).cast("B")


_SCRATCH = threading.local()
_SCRATCH_MOST = 8 * 1024**2  # the largest scratch buffer a thread keeps (a batch's bound is max.message.bytes')


def _scratch(size: int) -> memoryview:
    """This thread's buffer for a compressor to write into at its bound, reused from call to call; see `_kept`."""
    if size > _SCRATCH_MOST:
        return _writable(size)
    buffer = getattr(_SCRATCH, "buffer", None)
    if buffer is None or len(buffer) < size:
        buffer = _SCRATCH.buffer = _writable(max(size, 1024**2))
    return buffer[:size]


def _kept(out: memoryview, size: int) -> memoryview:
    """The compressed bytes `out[:size]` in a buffer of exactly their size. A compressed batch is kept (a
    segment holds its batches until it is uploaded), and a buffer fresh from the pool costs page faults for
    all of its bytes (the pool backs a large buffer in pages it has just committed): compressed in place at
    the bound, a 1 MB batch of JSON that packs to 400 KB cost the faults of 1 MB, and held them. Compressing
    into this thread's scratch buffer (`_scratch`) and copying out costs one copy of the compressed bytes,
    and took the Python workers of issue 30's archive benchmark from ~5.6 to ~4.6 CPU seconds a GiB."""
    if len(out) > _SCRATCH_MOST:  # (a buffer of its own already: `_scratch`)
        return out[:size]
    kept = _writable(size)
    kept[:] = out[:size]
    return kept


def _lz4_compress(data: bytes | memoryview, room: int, content_size: bool) -> memoryview:
    """An LZ4 frame of independent blocks without checksums, as KafkaLZ4BlockOutputStream writes, behind
    `room` free bytes: the header (FLG: version 01, independent blocks, [content size, unless 0]; BD: 256
    KiB blocks, 64 KiB for at most 64 KiB of data; HC: second byte of the descriptor's xxHash-32), each
    block compressed by liblz4's `LZ4_compress_default` (cramjam) straight into its place, a block that
    does not shrink stored as it is (top bit of its size), then the end mark. Byte-identical to
    python-lz4's `lz4.frame.compress` with these settings, which returns a new `bytes` that would be
    copied again. 256 KiB blocks, not Kafka's 64 KiB (Kafka reads any standard size): 64 KiB blocks
    (liblz4's 16-bit table; 484 bytes a 1 KB record of codec_bench.py's workload instead of 513)
    measured no faster on 1 KB records and ~7% slower on 100 B ones."""
    view = memoryview(data).cast("B")
    size = len(view)
    block_id = 0x40 if size <= 64 * 1024 else 0x50  # as liblz4's frame writer: the smallest that holds it all
    descriptor = struct.pack("<BBQ", 0x68, block_id, size) if content_size and size else bytes([0x60, block_id])
    header = _LZ4_MAGIC + descriptor + bytes([(xxhash.xxh32_intdigest(descriptor) >> 8) & 0xFF])
    blocks = range(0, size, _LZ4_BLOCK)
    out = _scratch(room + len(header) + size + size // 255 + 20 * len(blocks) + 4)
    at = room + len(header)
    out[room:at] = header
    for start in blocks:
        block = view[start:start + _LZ4_BLOCK]
        packed = cramjam.lz4.compress_block_into(block, out[at + 4:], store_size=False)
        if packed >= len(block):
            out[at + 4:at + 4 + len(block)] = block
            packed = len(block) | 0x80000000
        struct.pack_into("<I", out, at, packed)
        at += 4 + (packed & 0x7FFFFFFF)
    struct.pack_into("<I", out, at, 0)
    return _kept(out, at + 4)


def _fix_kafka_3160_checksum(frame: bytes) -> bytes:
    """KAFKA-3160: magic-0 LZ4 frames hash magic+descriptor; recompute the descriptor checksum."""
    if len(frame) < 7 or not frame.startswith(_LZ4_MAGIC):
        return frame
    descriptor_end = 6 + (8 if frame[4] & 0x08 else 0)
    checksum = (xxhash.xxh32_intdigest(frame[4:descriptor_end]) >> 8) & 0xFF
    return frame[:descriptor_end] + bytes([checksum]) + frame[descriptor_end + 1:]


def _lz4_decompress(data: bytes | memoryview) -> bytes | memoryview:
    """One LZ4 frame, decompressed straight into one buffer from Arrow's pool, sized by the frame's declared
    content size or else its block headers; python-lz4 would grow its output and copy it twice more.
    A frame of independent blocks without checksums (what Kafka and klake write) is decompressed block
    by block with liblz4's block decoder (cramjam) into its place in the buffer; other frames go through
    cramjam's frame decoder, which streams its output through intermediate buffers (`io::copy`).
    Anything the walk does not recognise goes to python-lz4, whose reading of the frame is the reference
    (it reads the first frame and ignores what follows it, so only that frame's bytes are decoded here)."""
    view = memoryview(data).cast("B")
    frame = _lz4_frame(view)
    if frame is not None:
        end, room, declared, blocks = frame
        out = _writable(room)
        try:
            size = _lz4_blocks_into(view, blocks, out) if blocks is not None \
                else cramjam.lz4.decompress_into(view[:end], out)
            if declared is None or size == declared:
                return _fitted(out, size)
        except (cramjam.DecompressionError, ValueError):
            pass  # python-lz4 decides, and names the problem
    return lz4.frame.decompress(data)


def _lz4_blocks_into(view: memoryview, blocks: list[tuple[int, int, int]], out: memoryview) -> int:
    """Independent LZ4 blocks (start, size, stored) decompressed one after the other into `out`, each into
    at most its frame's block size (the walk's `room` allows a full block for each, or the declared size
    caps the total); returns the bytes written. A block that does not decode, or decodes past its room,
    raises."""
    at = 0
    for start, size, block_max in blocks:
        room = out[at:at + abs(block_max)]
        if block_max < 0:  # a stored (uncompressed) block
            if size > len(room):
                raise ValueError("a stored LZ4 block is larger than its room")
            room[:size] = view[start:start + size]
            at += size
        else:
            at += cramjam.lz4.decompress_block_into(view[start:start + size], room)
    return at


def _lz4_frame(view: memoryview) -> tuple[int, int, int | None, list[tuple[int, int, int]] | None] | None:
    """(end of the frame, room for its decompressed bytes, its declared content size or None, its blocks
    as (start, size, +block maximum, or -block maximum for a stored block) when they are independent and
    without checksums, else None) from its header and block headers (LZ4 frame format: magic, FLG, BD,
    [content size], [dict id], HC; blocks of a 4-byte little-endian size whose top bit marks a stored
    block, [block checksum]; a zero size ends it, then [content checksum]); the room is the declared
    size, else the blocks' maximum; None if it is not a plain frame this walk understands."""
    if len(view) < 7 or view[:4] != _LZ4_MAGIC:
        return None
    flg, bd = view[4], view[5]
    if flg >> 6 != 1 or flg & 0x03 or not 4 <= (bd >> 4) & 0x07 <= 7:  # version 01, no dict id
        return None
    block_max = 1 << (8 + 2 * ((bd >> 4) & 0x07))
    pos = 7 + (8 if flg & 0x08 else 0)
    block_checksum = 4 if flg & 0x10 else 0
    blocks: list[tuple[int, int, int]] = []
    while True:
        if pos + 4 > len(view):
            return None
        (size,) = struct.unpack_from("<I", view, pos)
        pos += 4
        if size == 0:
            break
        stored, size = size >> 31, size & 0x7FFFFFFF
        blocks.append((pos, size, -block_max if stored else block_max))
        pos += size + block_checksum
    end = pos + (4 if flg & 0x04 else 0)
    declared = struct.unpack_from("<Q", view, 6)[0] if flg & 0x08 else None
    extent = _room(end, len(view), len(blocks) * block_max, declared)
    if extent is None:
        return None
    independent_plain = flg & 0x20 and not flg & 0x14  # independent blocks, no block or content checksum
    return (*extent, blocks if independent_plain else None)


def _room(end: int, available: int, bound: int, declared: int | None) -> tuple[int, int, int | None] | None:
    """A frame walk's answer: None if the frame runs past the data or declares more than its blocks
    can hold (the reference reader then names the problem), else (end, room, declared)."""
    if end > available or (declared is not None and declared > bound):
        return None
    return end, bound if declared is None else declared, declared


def _zstd_decompress(data: bytes | memoryview) -> bytes | memoryview:
    """One zstd frame, decompressed by libzstd straight into one buffer from Arrow's pool, sized by the
    frame's own block headers, through this thread's decompression context (zstandard's `readinto`):
    cramjam's `decompress_into` builds a new streaming decoder per frame and copies its output through
    `io::copy`, and `decompressobj` returns its output in chunks and joins them. Anything the walk does
    not recognise (dictionaries, skippable frames, truncation) or that libzstd rejects goes to the
    streaming reader, whose result and error text stay the reference (it reads the first frame and
    ignores what follows it, so only that frame's bytes are handed to `readinto`)."""
    view = memoryview(data).cast("B")
    extent = _zstd_frame_extent(view)
    if extent is not None:
        end, room, declared = extent
        out = _writable(room)
        try:
            reader = _zstd().decompressor.stream_reader(view[:end])
            size = reader.readinto(out)
            # the walk saw every block, so the frame ends here: this drains its checksum (checked) and
            # proves that nothing is left past `room` (a frame larger than its blocks allow)
            if reader.readinto(_zstd().past_room) == 0 and (declared is None or size == declared):
                return _fitted(out, size)
        except zstandard.ZstdError:
            pass
    reader = _zstd().decompressor.decompressobj()
    out = reader.decompress(data)
    if not reader.eof:
        raise CompressionError("zstd frame is incomplete")
    return out


def _zstd_compress(data: bytes | memoryview, room: int) -> memoryview:
    """One zstd frame at Kafka's default level 3 with its content size, compressed by libzstd's one-shot
    `ZSTD_compress2` through this thread's context straight into a buffer behind `room` free bytes
    (zstandard's `ZstdCompressor.compress` returns a new `bytes`, which would be copied again)."""
    size = len(data)
    bound = zstd_lib.ZSTD_compressBound(size)
    out = _scratch(room + bound)
    written = zstd_lib.ZSTD_compress2(_zstd().cctx, zstd_ffi.from_buffer(out, require_writable=True) + room, bound,
                                      zstd_ffi.from_buffer(data), size)
    if zstd_lib.ZSTD_isError(written):
        raise ValueError(f"zstd compression failed: {zstd_ffi.string(zstd_lib.ZSTD_getErrorName(written)).decode()}")
    return _kept(out, room + written)


def _zstd_cctx() -> object:
    """A libzstd compression context (zstandard's cffi binding of its bundled libzstd) for Kafka's default
    level 3; frames declare their content size (`ZSTD_c_contentSizeFlag`, on by default). libzstd 1.5.7
    added a block pre-splitter that, at level 3, scans every full 128 KiB block after the first for a
    split point: on codec_bench.py's batches it split none (output byte-identical with and without it)
    and cost ~4% of the compression time, which zstd-jni's libzstd 1.5.6 (kafka-clients') does not
    spend. It is switched off through `ZSTD_c_blockSplitterLevel` (an experimental parameter, 1 = never
    split) only where the bundled libzstd documents it (1.5.7 up to 1.6), since experimental parameter
    ids may be renumbered."""
    cctx = zstd_ffi.gc(zstd_lib.ZSTD_createCCtx(), zstd_lib.ZSTD_freeCCtx)
    settings = [(zstd_lib.ZSTD_c_compressionLevel, 3)]
    if 10507 <= zstd_lib.ZSTD_versionNumber() < 10600:
        settings.append((_ZSTD_C_BLOCK_SPLITTER_LEVEL, 1))
    for parameter, value in settings:
        if zstd_lib.ZSTD_isError(zstd_lib.ZSTD_CCtx_setParameter(cctx, parameter, value)):
            raise RuntimeError(f"libzstd {zstd_lib.ZSTD_versionNumber()} rejects compression parameter {parameter}")
    return cctx


_ZSTD_C_BLOCK_SPLITTER_LEVEL = 1017  # ZSTD_c_experimentalParam20 in zstd.h 1.5.7
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK_MAX = 128 * 1024


def _zstd_frame_extent(view: memoryview) -> tuple[int, int, int | None] | None:
    """(end of the frame, room for its decompressed bytes, its declared content size or None) from its
    header and block headers (RFC 8878: magic, descriptor, [window], [dictionary id], [content size, the
    2-byte form less 256]; blocks of a 3-byte little-endian header (last flag, type raw/RLE/compressed,
    size), a compressed block holding at most 128 KiB; then [checksum]); the room is the declared size,
    else the blocks' maximum; None if it is not a plain frame this walk understands."""
    if len(view) < 6 or view[:4] != _ZSTD_MAGIC:
        return None
    descriptor = view[4]
    if descriptor & 0x08 or descriptor & 0x03:  # reserved bit, or a dictionary id
        return None
    single_segment = descriptor & 0x20
    size_field = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    pos = 5 + (0 if single_segment else 1)
    declared = int.from_bytes(view[pos:pos + size_field], "little") + (256 if size_field == 2 else 0) \
        if size_field else None
    pos += size_field
    room = 0
    while True:
        if pos + 3 > len(view):
            return None
        header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
        pos += 3
        kind, size = (header >> 1) & 0x03, header >> 3
        if kind == 3:
            return None
        pos += 1 if kind == 1 else size
        room += _ZSTD_BLOCK_MAX if kind == 2 else size
        if header & 1:
            break
    end = pos + (4 if descriptor & 0x04 else 0)
    return _room(end, len(view), room, declared)


T = TypeVar("T")
R = TypeVar("R")
_ZSTD_CONTEXTS = threading.local()


def _zstd() -> threading.local:
    """This thread's zstd contexts: creating one costs more than a batch's worth of work, and a
    context must not be shared between threads."""
    if not hasattr(_ZSTD_CONTEXTS, "cctx"):
        _ZSTD_CONTEXTS.cctx = _zstd_cctx()
        _ZSTD_CONTEXTS.decompressor = zstandard.ZstdDecompressor()
        _ZSTD_CONTEXTS.past_room = bytearray(1)  # written only by a frame that decodes past its bound
    return _ZSTD_CONTEXTS


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="klake-codec")


def map_batches(work: Callable[[T], R], items: Sequence[T], nbytes: int) -> list[R]:
    """`work` over independent batches, in order; in threads (the codecs release the GIL) when this
    process may use several cores and there is enough to do (`nbytes`) to pay for the hand-offs."""
    if len(items) < 2 or nbytes < _PARALLEL_MIN_BYTES or len(os.sched_getaffinity(0)) < 2:
        return [work(item) for item in items]
    return list(_pool().map(work, items))


_PARALLEL_MIN_BYTES = 1 << 20
