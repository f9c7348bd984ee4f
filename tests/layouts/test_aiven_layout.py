"""The Aiven tiered-storage reader (issue 31) against the plugin's specification: the chunk-size codec on the
plugin's own test example, a hand-checked upload (`tests/fixtures/aiven/README.md`), and uploads written by
the test-only writer `tests/aiven_uploads.py` (fixed and variable chunk indexes, zstd, AES-256-GCM with an
RSA-wrapped data key) read back byte for byte from a broker's segments, local and on moto S3; data keys
BouncyCastle wrapped (the plugin's provider, `tests/oracles/jvm/BcWrapKeys.java`) unwrap to its bytes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from Crypto.PublicKey import RSA

from engine.format.batch import scan_batches
from layouts import aiven_layout
from layouts.aiven_manifest import (
    AivenObjectError,
    ChunkIndex,
    KeyRing,
    SegmentManifest,
    chunk_sizes,
    parse_manifest,
    unwrap_data_key,
)
from layouts.store import read_bytes
from layouts.store.aiven_file_io import aiven_uri
from layouts.store.bound import Store
from tests.aiven_uploads import (
    KeyPair,
    bouncycastle_wrapped_keys,
    bucket_from_log_dir,
    encode_chunk_sizes,
    key_ring,
)
from tests.conftest import PROJECT_ROOT, Backend

HAND_CHECKED = PROJECT_ROOT / "tests" / "fixtures" / "aiven" / "bucket"
HAND_STEM = "_confluent-command-lZ6vvmajTWKDBUTV6SQAtQ/0/00000000000000000000-adh9f8BMS4anaUnD8KWfWg"
PAIR = KeyPair("key-pair-1", RSA.generate(2048))


def test_chunk_sizes_decode_the_plugins_own_example_by_hand() -> None:
    # ChunkSizesBinaryCodecTest.provideMultipleValues: (0, 1000, 2, 44002, 369) at 2 bytes a value. By hand:
    # count 5, base 0 (the least but the last), 2 bytes a value, 0 1000 2 44002 less the base, 369 in full.
    encoded = bytes.fromhex("00000005" "00000000" "02" "0000" "03e8" "0002" "abe2" "00000171")
    assert chunk_sizes(encoded, "t") == [0, 1000, 2, 44002, 369]
    assert chunk_sizes(bytes.fromhex("00000000"), "t") == []
    assert chunk_sizes(bytes.fromhex("00000001000000d5"), "t") == [213]  # singleValue: only count and value
    # a base: (1, 0xFF + 10, 0xFF + 20, MAX) is 1 base and offsets 0, 264, 274: two bytes a value
    assert chunk_sizes(bytes.fromhex("00000004" "00000001" "02" "0000" "0108" "0112" "7fffffff"), "t") == [
        1, 0xFF + 10, 0xFF + 20, 2**31 - 1]
    with pytest.raises(AivenObjectError, match="end early"):
        chunk_sizes(encoded[:-1], "t")


def test_the_hand_checked_upload_reads_as_its_broker_segment() -> None:
    stem = HAND_CHECKED / HAND_STEM
    manifest = parse_manifest(Path(f"{stem}.rsm-manifest").read_bytes(), "m")
    index = manifest.chunk_index
    assert [(c.original_position, c.original_size, c.transformed_position, c.transformed_size)
            for c in index.chunks_for(0, 231)] == [(0, 100, 0, 100), (100, 100, 100, 100), (200, 31, 200, 31)]
    assert [c.number for c in index.chunks_for(150, 201)] == [1, 2] and index.chunks_for(231, 300) == []
    assert not manifest.compression and not manifest.encrypted and "transaction" not in manifest.indexes
    assert (manifest.start_offset, manifest.end_offset) == (0, 1)
    broker = PROJECT_ROOT / "tests" / "fixtures" / "kafka" / "broker" / "_confluent-command-0" / "00000000000000000000.log"
    assert read_bytes(aiven_uri(f"{stem}.log")) == broker.read_bytes()
    assert read_bytes(aiven_uri(f"{stem}.log"), None, 95, 205) == broker.read_bytes()[95:205]
    assert read_bytes(aiven_uri(f"{stem}.index")) == b""


@pytest.mark.parametrize("bits", [2048, 3072])
def test_data_keys_bouncycastle_wrapped_unwrap_to_its_bytes(tmp_path: Path, bits: int) -> None:
    """`RSA/NONE/OAEPWithSHA3-512AndMGF1Padding` under provider BC, as `RsaEncryptionProvider` wraps: the reader's
    OAEP must take SHA3-512 for both the label hash and MGF1, as BouncyCastle does (not SHA-512, not SHA-1)."""
    pair = PAIR if bits == 2048 else KeyPair("key-pair-3072", RSA.generate(bits))
    ring = KeyRing("ring", {pair.key_id: pair.key})
    wrapped = bouncycastle_wrapped_keys(pair, 16, tmp_path)
    assert len({k.data_key for k in wrapped}) == 16 and all(len(k.wrapped) == bits // 8 for k in wrapped)
    for key in wrapped:
        manifest = SegmentManifest("m", ChunkIndex(1, 0, ()), {}, False, wrapped_key=(pair.key_id, key.wrapped))
        assert unwrap_data_key(manifest, ring) == key.data_key


VARIANTS = {"plain": {}, "zstd": {"compression": True}, "encrypted": {"pair": PAIR},
            "zstd+encrypted": {"compression": True, "pair": PAIR}}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_uploads_read_back_byte_for_byte_and_by_range(kafka_fixtures: Path, tmp_path: Path, backend: Backend,
                                                      variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLAKE_AIVEN_KEY_RING", str(key_ring(tmp_path / "ring", PAIR)))
    source = kafka_fixtures / "broker" / "docker-connect-status-0"
    bucket = backend.upload_tree(bucket_from_log_dir(source, tmp_path / "made", prefix="", chunk_size=4096,
                                                     **VARIANTS[variant]).parent.parent,
                                 backend.uri("bucket"), skip_suffixes=())
    _, parts, _ = aiven_layout.scan_bucket(bucket, backend.options)
    (part,) = parts
    ((upload,),) = part.uploads.values()
    manifest = aiven_layout.read_manifest(part, upload, backend.options)
    assert manifest.compression == ("zstd" in variant) and manifest.encrypted == ("encrypted" in variant)
    log = aiven_layout.segment_files(part, upload, manifest).log.uri
    original = (source / "00000000000000000000.log").read_bytes()
    assert read_bytes(log, backend.options) == original
    for start, end in ((0, 1), (4095, 4097), (5000, 13000), (len(original) - 3, len(original) + 50)):
        assert read_bytes(log, backend.options, start, end) == original[start:end], (start, end)
    epoch = log.removesuffix(".log") + ".index"  # an empty offset index: pages of it are empty
    assert read_bytes(epoch, backend.options) == b"" == read_bytes(epoch, backend.options, 0, 8)


def test_a_page_of_a_plain_index_is_a_ranged_get_of_that_page(kafka_fixtures: Path, tmp_path: Path) -> None:
    from layouts.metering import metered

    source = kafka_fixtures / "broker" / "timeindex_test-0"
    part = bucket_from_log_dir(source, tmp_path / "bucket", chunk_size=64 * 1024)
    index = aiven_uri(str(next(part.glob("00000000000000007729-*.log")).with_suffix(".index")))
    broker = (source / "00000000000000007729.index").read_bytes()
    read_bytes(index, None, 0, 8)  # the manifest, read once
    with metered() as meter:
        assert read_bytes(index, None, 800, 816) == broker[800:816]
    assert meter.requests["GET"] == 1 and meter.bytes["read"] == 16
    assert read_bytes(index, None, len(broker) - 4, len(broker) + 50) == broker[-4:]


def test_a_variable_chunk_index_must_hold_every_chunk() -> None:
    import base64

    import zstandard

    doc = {"chunkIndex": {"type": "variable", "originalChunkSize": 100, "originalFileSize": 250, "transformedChunks":
                          base64.b64encode(zstandard.ZstdCompressor().compress(encode_chunk_sizes([90, 95]))).decode()},
           "segmentIndexes": {n: {"position": 0, "size": 0} for n in ("offset", "timestamp", "producerSnapshot",
                                                                        "leaderEpoch")},
           "compression": True}
    with pytest.raises(AivenObjectError, match="has 2 chunks, originalFileSize 250 in chunks of 100 bytes needs 3"):
        parse_manifest(json.dumps(doc).encode(), "x.rsm-manifest")
    doc["chunkIndex"]["originalFileSize"] = 190
    assert [c.transformed_position for c in parse_manifest(json.dumps(doc).encode(), "x").chunk_index.chunks_for(0, 190)] \
        == [0, 90]
    del doc["segmentIndexes"]["offset"]
    with pytest.raises(AivenObjectError, match="x.rsm-manifest: not a SegmentManifestV1: field segmentIndexes.offset."
                                               "position missing"):
        parse_manifest(json.dumps(doc).encode(), "x.rsm-manifest")


def test_nothing_is_ever_written_through_an_upload_name(tmp_path: Path) -> None:
    shutil.copytree(HAND_CHECKED, tmp_path / "bucket")
    store = Store(str(tmp_path))
    name = aiven_uri(str(tmp_path / "bucket" / f"{HAND_STEM}.log"))
    for write in (lambda: store.put_if_absent(name, b"x"), lambda: store.write(name, b"x"), lambda: store.delete(name)):
        with pytest.raises(AivenObjectError, match="klake never writes into a bucket a broker owns"):
            write()
    assert (tmp_path / "bucket" / f"{HAND_STEM}.log").read_bytes() == (HAND_CHECKED / f"{HAND_STEM}.log").read_bytes()
    assert scan_batches(read_bytes(name)).headers.last_offset[-1] == 1
