"""A test-only writer of Aiven tiered-storage uploads, from the plugin's published specification (its source
at Aiven-Open/tiered-storage-for-apache-kafka: `KafkaRemoteStorageManager.copyLogSegmentData`, `ObjectKeyFactory`,
`CompressionChunkEnumeration`, `EncryptionChunkEnumeration`, `ChunkSizesBinaryCodec`, `SegmentIndexesV1Builder`,
`RsaEncryptionProvider`; its jars are not served here). Written apart from the reader in `layouts`: the
encoder side of each rule, so a test of the reader checks it against an independent statement of the format.
The writer wraps each data key itself (pycryptodome) unless it is handed keys BouncyCastle wrapped, the plugin's
own provider (`bouncycastle_wrapped_keys`, the pinned `bcprov` set).
"""

from __future__ import annotations

import base64
import json
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import zstandard
from Crypto.Cipher import PKCS1_OAEP
from Crypto.Hash import SHA3_512
from Crypto.PublicKey import RSA
from Crypto.Signature.pss import MGF1
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from engine.format.batch import scan_batches
from tests.oracles.kafka_tools import run_java_helper

TOPIC_ID = "lZ6vvmajTWKDBUTV6SQAtQ"  # the topic id of the plugin's SegmentManifestV1SerdeTest


@dataclass(frozen=True)
class KeyPair:
    key_id: str
    key: RSA.RsaKey


@dataclass(frozen=True)
class WrappedKey:
    """An AES-256 data key and its RSA wrapping under a key pair's public key."""

    data_key: bytes = field(repr=False)
    wrapped: bytes


def bouncycastle_wrapped_keys(pair: KeyPair, count: int, where: Path) -> list[WrappedKey]:
    """`count` fresh data keys wrapped for `pair` by BouncyCastle as the plugin's `RsaEncryptionProvider` wraps
    them (`tests/oracles/jvm/BcWrapKeys.java`); `where` receives the public key's PEM."""
    where.mkdir(parents=True, exist_ok=True)
    public = where / f"{pair.key_id}-public.pem"
    public.write_bytes(pair.key.publickey().export_key())
    lines = run_java_helper("BcWrapKeys", str(public), str(count), jvm_set="bcprov").split("\n")
    keys = [WrappedKey(bytes.fromhex(key), base64.b64decode(wrapped))
            for key, wrapped in map(str.split, filter(None, lines))]
    assert len(keys) == count, lines
    return keys


def _wrap_fresh_key(pair: KeyPair) -> WrappedKey:
    """`RsaEncryptionProvider.encryptDataKey` of a fresh key, by pycryptodome: OAEP with SHA3-512 as the hash
    and in MGF1."""
    data_key = os.urandom(32)
    oaep = PKCS1_OAEP.new(pair.key.publickey(), hashAlgo=SHA3_512,
                          mgfunc=lambda seed, length: MGF1(seed, length, SHA3_512))
    return WrappedKey(data_key, oaep.encrypt(data_key))


def key_ring(where: Path, *pairs: KeyPair, active: str | None = None) -> Path:
    """A key ring file in the plugin's configuration format (PKCS#8 and X.509 PEMs beside it)."""
    where.mkdir(parents=True, exist_ok=True)
    lines = [f"rsm.config.encryption.key.pair.id={active or pairs[0].key_id}",
             f"rsm.config.encryption.key.pairs={','.join(p.key_id for p in pairs)}"]
    for pair in pairs:
        (where / f"{pair.key_id}-private.pem").write_bytes(pair.key.export_key(pkcs=8))
        (where / f"{pair.key_id}-public.pem").write_bytes(pair.key.publickey().export_key())
        lines += [f"rsm.config.encryption.key.pairs.{pair.key_id}.public.key.file={pair.key_id}-public.pem",
                  f"rsm.config.encryption.key.pairs.{pair.key_id}.private.key.file={pair.key_id}-private.pem"]
    path = where / "keyring.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


def encode_chunk_sizes(values: list[int]) -> bytes:
    """`ChunkSizesBinaryCodec.encode`."""
    if len(values) <= 1:
        return struct.pack(">i", len(values)) + b"".join(struct.pack(">i", v) for v in values)
    base = min(values[:-1])
    width = max(1 if v - base <= 0xFF else 2 if v - base <= 0xFFFF else 3 if v - base <= 0xFFFFFF else 4
                for v in values[:-1])
    return (struct.pack(">iiB", len(values), base, width)
            + b"".join((v - base).to_bytes(width, "big") for v in values[:-1]) + struct.pack(">i", values[-1]))


def _encrypt(data: bytes, key: bytes, aad: bytes) -> bytes:
    iv = os.urandom(12)
    return iv + AESGCM(key).encrypt(iv, data, aad)


def write_upload(part_dir: Path, base_offset: int, uuid: str, log: bytes, indexes: dict[str, bytes], *,
                 chunk_size: int, compression: bool = False, pair: KeyPair | None = None,
                 wrapped_key: WrappedKey | None = None) -> Path:
    """Write one upload (`.log`, `.indexes`, `.rsm-manifest`) as the plugin does; returns the manifest path.
    `indexes`: offset, timestamp, producerSnapshot, leaderEpoch and optionally transaction, as bytes. Encrypted
    under `pair` with `wrapped_key` (for that pair), or a fresh key the writer wraps."""
    assert wrapped_key is None or pair is not None, "a wrapped key goes with the key pair it is wrapped for"
    part_dir.mkdir(parents=True, exist_ok=True)
    key = (wrapped_key or _wrap_fresh_key(pair)) if pair else None
    data_key, aad = (key.data_key, os.urandom(32)) if key else (b"", b"")
    chunks = []
    for at in range(0, len(log), chunk_size):
        chunk = log[at:at + chunk_size]
        if compression:
            chunk = zstandard.ZstdCompressor(write_content_size=True).compress(chunk)
        chunks.append(_encrypt(chunk, data_key, aad) if pair else chunk)
    sizes = [len(c) for c in chunks]
    if compression:
        chunk_index = {"type": "variable", "originalChunkSize": chunk_size, "originalFileSize": len(log),
                       "transformedChunks": base64.b64encode(zstandard.ZstdCompressor(write_content_size=True)
                                                             .compress(encode_chunk_sizes(sizes))).decode()}
    else:
        chunk_index = {"type": "fixed", "originalChunkSize": chunk_size, "originalFileSize": len(log),
                       "transformedChunkSize": sizes[0] if sizes else 0,
                       "finalTransformedChunkSize": sizes[-1] if sizes else 0}
    stem = part_dir / f"{base_offset:020d}-{uuid}"
    Path(f"{stem}.log").write_bytes(b"".join(chunks))
    regions, blob, position = {}, b"", 0
    for name in ("offset", "timestamp", "producerSnapshot", "leaderEpoch", "transaction"):
        if name not in indexes:
            regions[name] = None
            continue
        raw = indexes[name]
        stored = _encrypt(raw, data_key, aad) if pair and raw else raw
        regions[name] = {"position": position, "size": len(stored)}
        blob += stored
        position += len(stored)
    Path(f"{stem}.indexes").write_bytes(blob)
    headers = scan_batches(log).headers
    manifest: dict[str, object] = {"version": "1", "chunkIndex": chunk_index, "segmentIndexes": regions,
                                   "compression": compression}
    if pair and key:
        manifest["encryption"] = {"dataKey": f"{pair.key_id}:{base64.b64encode(key.wrapped).decode()}",
                                  "aad": base64.b64encode(aad).decode()}
    manifest["remoteLogSegmentMetadata"] = {
        "remoteLogSegmentId": {"topicIdPartition": {"topicId": TOPIC_ID, "topicPartition": {
            "topic": part_dir.parent.name.rsplit("-", 1)[0], "partition": int(part_dir.name)}}, "id": uuid},
        "startOffset": base_offset, "endOffset": int(headers.last_offset[-1]),
        "maxTimestampMs": int(headers.max_timestamp.max()), "brokerId": 1, "eventTimestampMs": 0,
        "segmentLeaderEpochs": {"0": base_offset}}
    Path(f"{stem}.rsm-manifest").write_text(json.dumps(manifest))
    return Path(f"{stem}.rsm-manifest")


UUIDS = ["wCh7lSDPSy-dIdBYswqpew", "_ErN8CURTHOgDN1Uesu-Cw", "67MybqKuR2m2kDbNf6KF1w", "GTOPzGE8ReWLmyKMib5R_g"]


def bucket_from_log_dir(source: Path, bucket: Path, *, prefix: str = "tiered/", chunk_size: int = 64 * 1024,
                        compression: bool = False, pair: KeyPair | None = None,
                        wrapped_keys: Sequence[WrappedKey] = ()) -> Path:
    """The segments of a broker's partition directory (`{topic}-{partition}`) as the plugin uploads them
    under `{prefix}{topic}-{topicId}/{partition}/`; returns the partition's upload directory. `wrapped_keys`,
    if given, are the uploads' data keys in turn (one a segment)."""
    topic, partition = source.name.rsplit("-", 1)
    part_dir = bucket / prefix / f"{topic}-{TOPIC_ID}" / partition
    logs = sorted(source.glob("*.log"))[:len(UUIDS)]
    assert not wrapped_keys or len(wrapped_keys) >= len(logs), "one wrapped key a segment"
    for i, (log, uuid) in enumerate(zip(logs, UUIDS, strict=False)):
        sidecar = {name: log.with_suffix(suffix).read_bytes() if log.with_suffix(suffix).exists() else b""
                   for name, suffix in (("offset", ".index"), ("timestamp", ".timeindex"))}
        write_upload(part_dir, int(log.stem), uuid, log.read_bytes(),
                     {**sidecar, "producerSnapshot": b"", "leaderEpoch": b"0\n1\n0 0\n"},
                     chunk_size=chunk_size, compression=compression, pair=pair,
                     wrapped_key=wrapped_keys[i] if wrapped_keys else None)
    return part_dir
