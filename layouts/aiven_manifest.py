"""The segment manifest of Aiven's tiered-storage plugin for Apache Kafka, and how its chunks decode.

Facts from the plugin's published source (Aiven-Open/tiered-storage-for-apache-kafka, `core/.../manifest`,
`transform`, `security`; its Maven artifacts are not served here, so nothing of it runs):

- An upload is three objects: `.log` (the segment in chunks), `.indexes` (the segment's indexes one after
  another) and `.rsm-manifest`, the JSON `SegmentManifestV1`: `chunkIndex`, `segmentIndexes`,
  `compression`, `encryption` (absent when off) and the broker's `remoteLogSegmentMetadata` (written,
  never read back by the plugin).
- `chunkIndex` cuts the original segment into chunks of `originalChunkSize` bytes (the last one shorter,
  `originalFileSize` in all). `"type": "fixed"` gives every transformed chunk `transformedChunkSize` bytes
  but the last (`finalTransformedChunkSize`); `"variable"` lists them in `transformedChunks`: base64 of a
  zstd frame of `ChunkSizesBinaryCodec` (`chunk_sizes`).
- A chunk is transformed by zstd (one frame with its content size, when `compression`), then by
  AES-256-GCM (when `encryption`): a fresh 12-byte IV, then the ciphertext and its 16-byte tag, with the
  manifest's `aad` as associated data. The AES data key is stored wrapped: `"{keyPairId}:{base64}"`, RSA
  with BouncyCastle's `RSA/NONE/OAEPWithSHA3-512AndMGF1Padding` (OAEP, SHA3-512 for the label hash and
  for MGF1) under the key pair of that id in the plugin's key ring.
- `segmentIndexes` names where each index lies in `.indexes` (`position`, `size` of the transformed
  bytes): offset, timestamp, producerSnapshot, leaderEpoch and, if the segment has one, transaction. Each
  is one chunk, encrypted when `encryption` is on, never compressed.

This module holds the model and the decoding, no object I/O; `layouts.store.aiven_file_io` reads
through it. Secrets (the unwrapped data key, private keys) are kept out of every repr and message. The
cipher libraries are imported where an encrypted upload is decoded: every store user imports this module
(through `layouts.store`), and they cost a process started for one quick call (the streaming source's
driver process, issue 29) ~0.2 s.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import struct
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING

import zstandard

from kernel.errors import KlakeError

if TYPE_CHECKING:
    from Crypto.Cipher import PKCS1_OAEP
    from Crypto.PublicKey import RSA

KEY_RING_ENV = "KLAKE_AIVEN_KEY_RING"
"""The environment variable naming the key ring file (never the job's config: it holds no secrets)."""
IV_SIZE = 12
"""`SegmentEncryptionMetadataV1.IV_SIZE`: the IV before each encrypted chunk."""
TAG_SIZE = 16
"""`AesEncryptionProvider.GCM_TAG_LENGTH` (128 bits), after each encrypted chunk's ciphertext."""
INDEX_NAMES = ("offset", "timestamp", "producerSnapshot", "leaderEpoch", "transaction")
_MAX_CHUNK_SIZES = 10 * 1024 * 1024
"""`TransformedChunksDeserializer.MAX_DECOMPRESSED_SIZE`: the plugin's own bound on the encoded sizes."""


class AivenObjectError(KlakeError):
    """An object of an Aiven upload cannot be read as the plugin wrote it; the message names the object."""


def chunk_sizes(data: bytes, source: str) -> list[int]:
    """Decode `ChunkSizesBinaryCodec` (big-endian): count (4 bytes); none more for 0 values; the value (4)
    for 1; else base (4), bytes per value (1), count-1 values less the base in that many bytes, and the last
    value in full (4)."""
    try:
        (count,) = struct.unpack_from(">i", data, 0)
        if count <= 1:
            return [] if count == 0 else [struct.unpack_from(">i", data, 4)[0]]
        base, width = struct.unpack_from(">iB", data, 4)
        if not 1 <= width <= 4:
            raise AivenObjectError(f"{source}: transformedChunks: {width} bytes per value, not 1 to 4")
        values = [int.from_bytes(data[9 + i * width:9 + (i + 1) * width], "big") + base for i in range(count - 1)]
        values.append(struct.unpack_from(">i", data, 9 + (count - 1) * width)[0])
    except struct.error:
        raise AivenObjectError(f"{source}: transformedChunks: the chunk sizes end early") from None
    return values


@dataclass(frozen=True)
class Chunk:
    """One chunk: its number, where it lies in the original segment and in the transformed `.log` object."""

    number: int
    original_position: int
    original_size: int
    transformed_position: int
    transformed_size: int


@dataclass(frozen=True)
class ChunkIndex:
    """`FixedSizeChunkIndex` or `VariableSizeChunkIndex`, materialised: the transformed size of every chunk."""

    original_chunk_size: int
    original_file_size: int
    transformed_sizes: tuple[int, ...]

    @cached_property
    def transformed_positions(self) -> tuple[int, ...]:
        """Where each chunk starts in the `.log` object, and (last) the object's size."""
        return (0, *accumulate(self.transformed_sizes))

    def chunk(self, number: int) -> Chunk:
        last = number == len(self.transformed_sizes) - 1
        size = self.original_file_size - number * self.original_chunk_size if last else self.original_chunk_size
        return Chunk(number, number * self.original_chunk_size, size, self.transformed_positions[number],
                     self.transformed_sizes[number])

    def chunks_for(self, start: int, end: int) -> list[Chunk]:
        """The chunks holding the original bytes [start, end), in order (`chunksForRange`)."""
        end = min(end, self.original_file_size)
        if start >= end:
            return []
        return [self.chunk(n) for n in range(start // self.original_chunk_size,
                                             (end - 1) // self.original_chunk_size + 1)]


@dataclass(frozen=True)
class IndexRegion:
    """`SegmentIndexV1`: where one index's transformed bytes lie in the `.indexes` object."""

    position: int
    size: int


@dataclass
class SegmentManifest:
    """`SegmentManifestV1` of one upload; `data_key` is set once unwrapped (`unwrap_data_key`)."""

    source: str
    chunk_index: ChunkIndex
    indexes: dict[str, IndexRegion]
    compression: bool
    wrapped_key: tuple[str, bytes] | None = field(default=None, repr=False)
    aad: bytes = field(default=b"", repr=False)
    start_offset: int | None = None
    end_offset: int | None = None
    data_key: bytes | None = field(default=None, repr=False)

    @property
    def encrypted(self) -> bool:
        return self.wrapped_key is not None

    def original_index_size(self, name: str) -> int:
        """The size of one index as the broker wrote it (its region less the IV and tag when encrypted)."""
        region = self.indexes.get(name)
        if region is None or region.size == 0:
            return 0
        return region.size - IV_SIZE - TAG_SIZE if self.encrypted else region.size


def _get(obj: object, name: str, source: str, where: str) -> object:
    if not isinstance(obj, dict) or name not in obj:
        raise AivenObjectError(f"{source}: not a SegmentManifestV1: field {where}{name} missing")
    return obj[name]


def _int(obj: object, name: str, source: str, where: str = "") -> int:
    value = _get(obj, name, source, where)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AivenObjectError(f"{source}: {where}{name}: {value!r} is not a non-negative integer")
    return value


def _str(obj: object, name: str, source: str, where: str = "") -> str:
    value = _get(obj, name, source, where)
    if not isinstance(value, str):
        raise AivenObjectError(f"{source}: {where}{name}: {value!r} is not a string")
    return value


def _chunk_index(obj: object, source: str) -> ChunkIndex:
    where = "chunkIndex."
    kind = _str(obj, "type", source, where)
    chunk_size, file_size = _int(obj, "originalChunkSize", source, where), _int(obj, "originalFileSize", source, where)
    if chunk_size == 0:
        raise AivenObjectError(f"{source}: chunkIndex.originalChunkSize must be positive")
    count = -(-file_size // chunk_size)
    if kind == "fixed":
        size, final = _int(obj, "transformedChunkSize", source, where), _int(obj, "finalTransformedChunkSize", source, where)
        sizes = (size,) * (count - 1) + (final,) if count else ()
    elif kind == "variable":
        try:
            encoded = zstandard.ZstdDecompressor().decompress(
                base64.b64decode(_str(obj, "transformedChunks", source, where), validate=True),
                max_output_size=_MAX_CHUNK_SIZES)
        except (binascii.Error, zstandard.ZstdError) as exc:
            raise AivenObjectError(f"{source}: chunkIndex.transformedChunks is not base64 of a zstd frame: "
                                   f"{exc}") from None
        sizes = tuple(chunk_sizes(encoded, f"{source}: chunkIndex"))
        if len(sizes) != count:
            raise AivenObjectError(f"{source}: chunkIndex.transformedChunks has {len(sizes)} chunks, "
                                   f"originalFileSize {file_size} in chunks of {chunk_size} bytes needs {count}")
    else:
        raise AivenObjectError(f"{source}: chunkIndex.type {kind!r} is neither 'fixed' nor 'variable'")
    return ChunkIndex(chunk_size, file_size, sizes)


def parse_manifest(data: bytes, source: str) -> SegmentManifest:
    """Read a `.rsm-manifest` (the data key stays wrapped); `AivenObjectError` naming `source` and the field
    if it is not a `SegmentManifestV1`."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AivenObjectError(f"{source}: not a SegmentManifestV1: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise AivenObjectError(f"{source}: not a SegmentManifestV1: not a JSON object")
    if doc.get("version", "1") != "1":
        raise AivenObjectError(f"{source}: manifest version {doc['version']!r}; only version 1 is known")
    chunk_index = _chunk_index(_get(doc, "chunkIndex", source, ""), source)
    regions = _get(doc, "segmentIndexes", source, "")
    indexes = {}
    for name in INDEX_NAMES:
        region = regions.get(name) if isinstance(regions, dict) else None
        if region is None and name == "transaction":
            continue
        where = f"segmentIndexes.{name}."
        indexes[name] = IndexRegion(_int(region, "position", source, where), _int(region, "size", source, where))
    compression = _get(doc, "compression", source, "")
    if not isinstance(compression, bool):
        raise AivenObjectError(f"{source}: compression: {compression!r} is not a boolean")
    manifest = SegmentManifest(source, chunk_index, indexes, compression)
    encryption = doc.get("encryption")
    if encryption is not None:
        wrapped = _str(encryption, "dataKey", source, "encryption.")
        key_id, colon, key_text = wrapped.partition(":")
        try:
            if not colon or not key_id or ":" in key_text:
                raise ValueError("not keyPairId:base64")
            manifest.wrapped_key = (key_id, base64.b64decode(key_text, validate=True))
            manifest.aad = base64.b64decode(_str(encryption, "aad", source, "encryption."), validate=True)
        except (ValueError, binascii.Error):
            raise AivenObjectError(f"{source}: encryption: the data key or aad is malformed") from None
    metadata = doc.get("remoteLogSegmentMetadata")
    if isinstance(metadata, dict):
        start, end = metadata.get("startOffset"), metadata.get("endOffset")
        manifest.start_offset = start if isinstance(start, int) else None
        manifest.end_offset = end if isinstance(end, int) else None
    return manifest


@dataclass(frozen=True)
class KeyRing:
    """The RSA key pairs of the plugin's key ring, by id: private keys only (reading never wraps a key)."""

    source: str
    keys: dict[str, RSA.RsaKey] = field(repr=False)


def _properties(text: str) -> dict[str, str]:
    """`key=value` (or `key: value`) lines of a Java properties file; `#`/`!` comments."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut > 0:
            found[line[:cut].strip()] = line[cut + 1:].strip()
    return found


def load_key_ring(path: str) -> KeyRing:
    """The key ring in the plugin's own configuration: `encryption.key.pairs` (ids, comma-separated) and
    `encryption.key.pairs.<id>.private.key.file` (a PEM, relative to the file's directory), with or without
    the broker's `rsm.config.` prefix; a file holding the broker's whole configuration works as it is."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise AivenObjectError(f"key ring {path} ({KEY_RING_ENV}): cannot be read: {exc.strerror}") from None
    settings = {key.removeprefix("rsm.config."): value for key, value in _properties(text).items()}
    ids = [i.strip() for i in settings.get("encryption.key.pairs", "").split(",") if i.strip()]
    if not ids:
        raise AivenObjectError(f"key ring {path} ({KEY_RING_ENV}): no encryption.key.pairs listed")
    from Crypto.PublicKey import RSA

    keys = {}
    for key_id in ids:
        name = f"encryption.key.pairs.{key_id}.private.key.file"
        if name not in settings:
            raise AivenObjectError(f"key ring {path} ({KEY_RING_ENV}): {name} missing")
        pem = Path(path).parent / settings[name]
        try:
            keys[key_id] = RSA.import_key(pem.read_bytes())
        except (OSError, ValueError, IndexError, TypeError):
            raise AivenObjectError(f"key ring {path} ({KEY_RING_ENV}): {name}: {pem} is not a readable RSA "
                                   "private key (PEM)") from None
    return KeyRing(path, keys)


def key_ring_from_env() -> KeyRing | None:
    """The key ring the environment names, or None when it names none."""
    path = os.environ.get(KEY_RING_ENV)
    return load_key_ring(path) if path else None


def _oaep(key: RSA.RsaKey) -> PKCS1_OAEP.PKCS1OAEP_Cipher:
    """BouncyCastle's `OAEPWithSHA3-512AndMGF1Padding`: SHA3-512 as the OAEP hash and in MGF1."""
    from Crypto.Cipher import PKCS1_OAEP
    from Crypto.Hash import SHA3_512
    from Crypto.Signature.pss import MGF1

    return PKCS1_OAEP.new(key, hashAlgo=SHA3_512, mgfunc=lambda seed, length: MGF1(seed, length, SHA3_512))


def unwrap_data_key(manifest: SegmentManifest, ring: KeyRing | None) -> bytes:
    """The manifest's AES data key, unwrapped with the key ring's key pair of its id (cached on it)."""
    if manifest.data_key is not None:
        return manifest.data_key
    assert manifest.wrapped_key is not None
    key_id, wrapped = manifest.wrapped_key
    if ring is None:
        raise AivenObjectError(f"{manifest.source}: the segment is encrypted (key pair {key_id!r}); set "
                               f"{KEY_RING_ENV} to the plugin's key ring file")
    if key_id not in ring.keys:
        raise AivenObjectError(f"{manifest.source}: the data key is wrapped with key pair {key_id!r}, which the "
                               f"key ring {ring.source} lacks")
    try:
        manifest.data_key = _oaep(ring.keys[key_id]).decrypt(wrapped)
    except ValueError:
        raise AivenObjectError(f"{manifest.source}: the data key does not unwrap with key pair {key_id!r} of the "
                               f"key ring {ring.source}: a wrong key") from None
    return manifest.data_key


def decode_chunk(raw: bytes, manifest: SegmentManifest, ring: KeyRing | None, what: str, expected: int,
                 compressed: bool) -> bytes:
    """One chunk's original bytes: decrypted (AES-256-GCM, IV first) then, if `compressed` (a `.log` chunk of
    a compressed upload; indexes never are), decompressed (zstd), checked to be `expected` bytes long.
    `what` names the chunk in errors."""
    data = raw
    if manifest.encrypted:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key = unwrap_data_key(manifest, ring)
        try:
            data = AESGCM(key).decrypt(raw[:IV_SIZE], raw[IV_SIZE:], manifest.aad)
        except (InvalidTag, ValueError):
            raise AivenObjectError(f"{what}: does not decrypt (AES-GCM tag mismatch): a wrong key or damaged "
                                   "bytes") from None
    if compressed:
        try:
            data = zstandard.ZstdDecompressor().decompress(data, max_output_size=max(expected, 1))
        except zstandard.ZstdError as exc:
            raise AivenObjectError(f"{what}: is not a zstd frame: {exc}") from None
    if len(data) != expected:
        raise AivenObjectError(f"{what}: decodes to {len(data)} bytes, the chunk index says {expected}")
    return data
