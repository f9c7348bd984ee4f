"""Fetch Apache kafka-clients 3.9.1 (and the codec jars it loads) for the JVM oracle test.

Maven is not reachable from CI, but PyPI is, and the wheel `shigawire-apache-flink-libraries`
2.0.0.post1 ships Apache's own `kafka-clients.jar` (3.9.1, the record classes the broker uses) with
`lz4-java`, `snappy-java`, `zstd-jni` and `slf4j-api` beside it in `pyflink/lib/`. This script
downloads that wheel once (`pip download --no-deps`, hash-pinned, ~92 MB), extracts only those five
jars into `<repo>/.cache/kafka-clients-jars/` (git-ignored), checks each jar's SHA-256 and deletes the
wheel. It does nothing when the jars are already there.

It always exits 0: when the download or extraction fails it prints why and records the reason in
`FETCH_ERROR.txt` in the cache directory, and `tests/engine/format/test_kafka_clients_oracle.py` skips with it.

Usage: `.venv/bin/python tests/oracles/fetch_kafka_clients.py` (`make test` runs it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = PROJECT_ROOT / ".cache" / "kafka-clients-jars"
ERROR_NAME = "FETCH_ERROR.txt"

WHEEL_NAME = "shigawire-apache-flink-libraries"
WHEEL_VERSION = "2.0.0.post1"
WHEEL_SHA256 = "aaa65537d3f0c0ff279185d8243024f0efd95788ba044bf249ba0f40b69289cd"
KAFKA_CLIENTS_VERSION = "3.9.1"
JAR_DIR_IN_WHEEL = "pyflink/lib/"
# jar name -> (size, SHA-256) as shipped in the wheel (its RECORD agrees)
JARS = {
    "kafka-clients.jar": (9215194, "7568b998572d256f0b7bc0afdc1b7a2588b8b08415c62ce314c864a6851ae9d9"),
    "lz4-java.jar": (682804, "d74a3334fb35195009b338a951f918203d6bbca3d1d359033dc33edd1cadc9ef"),
    "snappy-java.jar": (2338496, "4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36"),
    "zstd-jni.jar": (6687870, "793ca8734aa15687e7e64564eab8b6ae9ee2720eae27aa663074682144b1c386"),
    "slf4j-api.jar": (41125, "d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0"),
}
DOWNLOAD_TIMEOUT_S = 900


class FetchError(RuntimeError):
    """Why the jars could not be obtained."""


def jar_paths(cache_dir: Path = CACHE_DIR) -> list[Path]:
    return [cache_dir / name for name in JARS]


def jars_present(cache_dir: Path = CACHE_DIR) -> bool:
    """True when every jar is in the cache with its expected size (hashes were checked on extraction)."""
    return all((cache_dir / name).is_file() and (cache_dir / name).stat().st_size == size
               for name, (size, _) in JARS.items())


def fetch_error(cache_dir: Path = CACHE_DIR) -> str | None:
    """The reason the last fetch failed, if it did."""
    path = cache_dir / ERROR_NAME
    return path.read_text().strip() if path.is_file() else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download_wheel(dest: Path) -> Path:
    requirement = dest / "requirements.txt"
    requirement.write_text(f"{WHEEL_NAME}=={WHEEL_VERSION} --hash=sha256:{WHEEL_SHA256}\n")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--progress-bar", "off", "--dest", str(dest), "-r", str(requirement)]
    print(f"fetch_kafka_clients: downloading {WHEEL_NAME}=={WHEEL_VERSION} (~92 MB) from PyPI", flush=True)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise FetchError(f"pip download did not finish within {DOWNLOAD_TIMEOUT_S} s") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        tail = " | ".join([line for line in lines if line.startswith("ERROR")] or lines[-5:])
        raise FetchError(f"pip download exited with code {done.returncode}: {tail}")
    wheels = list(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"pip download produced {len(wheels)} wheels in {dest}, expected one")
    return wheels[0]


def _extract(wheel: Path, staging: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            for name, (size, sha256) in JARS.items():
                member = JAR_DIR_IN_WHEEL + name
                try:
                    info = zf.getinfo(member)
                except KeyError:
                    raise FetchError(f"{wheel.name} has no {member}") from None
                target = staging / name
                with zf.open(info) as src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                actual = _sha256(target)
                if target.stat().st_size != size or actual != sha256:
                    raise FetchError(f"{member} in {wheel.name} has SHA-256 {actual}, expected {sha256}")
    except zipfile.BadZipFile as exc:
        raise FetchError(f"{wheel.name} is not a valid wheel: {exc}") from None
    with zipfile.ZipFile(staging / "kafka-clients.jar") as jar:
        props = jar.read("kafka/kafka-version.properties").decode()
    if f"version={KAFKA_CLIENTS_VERSION}" not in props.split():
        raise FetchError(f"kafka-clients.jar is not version {KAFKA_CLIENTS_VERSION}: {props!r}")


def fetch(cache_dir: Path = CACHE_DIR) -> None:
    """Download and extract the jars into `cache_dir` unless they are there; raise FetchError."""
    if jars_present(cache_dir):
        return
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir.parent, prefix="kafka-clients-download-") as tmp:
        tmp_path = Path(tmp)
        download, staging = tmp_path / "wheel", tmp_path / "jars"
        download.mkdir()
        staging.mkdir()
        wheel = _download_wheel(download)
        _extract(wheel, staging)
        cache_dir.mkdir(exist_ok=True)
        for name in JARS:  # same filesystem: each rename is atomic
            os.replace(staging / name, cache_dir / name)
    (cache_dir / ERROR_NAME).unlink(missing_ok=True)


def main(cache_dir: Path = CACHE_DIR) -> int:
    if jars_present(cache_dir):
        print(f"fetch_kafka_clients: kafka-clients {KAFKA_CLIENTS_VERSION} jars already in {cache_dir}")
        return 0
    try:
        fetch(cache_dir)
    except (FetchError, OSError) as exc:
        reason = f"could not fetch kafka-clients {KAFKA_CLIENTS_VERSION} jars ({WHEEL_NAME}=={WHEEL_VERSION}): {exc}"
        print(f"fetch_kafka_clients: {reason}; the kafka-clients oracle tests will be skipped", file=sys.stderr)
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            (cache_dir / ERROR_NAME).write_text(reason + "\n")
        except OSError:
            pass
        return 0
    print(f"fetch_kafka_clients: extracted {', '.join(JARS)} into {cache_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
