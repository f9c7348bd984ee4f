"""Resolve the pinned JVM oracles (Apache Kafka, Spark's Kafka source, delta-spark, hadoop-aws, BouncyCastle) from Maven Central into `.cache/jvm/`.

Each set is a Maven profile of `tests/oracles/jvm/pom.xml`; `jvm.lock` beside it pins every jar of every
set by name and SHA-256. A set is resolved once with
`mvn -B -P <set> dependency:build-classpath -DincludeScope=runtime` into the local Maven repository (`~/.m2`),
its jars hard-linked from there into a staging directory (copied where the two are on different filesystems:
a checkout does not hold a copy of its own of the 658 MB hadoop-aws set), checked jar by jar against the lock
(the same names, no more, no fewer, the same hashes) and renamed into `.cache/jvm/<set>/` with a `VERIFIED`
stamp; a set already there is re-hashed, not re-resolved.

A failed resolution exits 1 with the reason: `make test` stops there, and the oracle tests, run without
the jars, fail under `CI` (they skip, saying why, only on a developer's machine: `require`).

Usage: `.venv/bin/python tests/oracles/fetch_jvm.py [SET...]` (all sets by default; `make test` runs it);
`--update-lock` rewrites the lock after a pinned version in the pom changes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from xml.etree import ElementTree

PROJECT_ROOT = Path(__file__).resolve().parents[2]
POM = PROJECT_ROOT / "tests" / "oracles" / "jvm" / "pom.xml"
LOCK = PROJECT_ROOT / "tests" / "oracles" / "jvm" / "jvm.lock"
CACHE = PROJECT_ROOT / ".cache" / "jvm"
STAMP = "VERIFIED"
SETS = ("kafka", "spark-kafka", "delta-spark", "hadoop-aws", "bcprov")
RESOLVE_TIMEOUT_S = 900


class FetchError(RuntimeError):
    """Why a set could not be resolved or does not match its lock."""


def set_dir(name: str) -> Path:
    return CACHE / name


def pinned_version(name: str) -> str:
    """The version the pom pins for a set's main artefact (`<name>.version`, e.g. `kafka.version`)."""
    namespace = {"m": "http://maven.apache.org/POM/4.0.0"}
    value = ElementTree.parse(POM).getroot().find(f"m:properties/m:{name.split('-')[0]}.version", namespace)
    if value is None or not value.text:
        raise FetchError(f"{POM} has no <{name.split('-')[0]}.version> property")
    return value.text


def read_lock(lock: Path = LOCK) -> dict[str, dict[str, str]]:
    """set -> jar name -> SHA-256, from lines `set/jar sha256` (`#` comments)."""
    pinned: dict[str, dict[str, str]] = {}
    for line in lock.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            path, digest = line.split()
            set_name, jar = path.split("/", 1)
            pinned.setdefault(set_name, {})[jar] = digest
    return pinned


def jars(name: str) -> list[Path] | None:
    """The jars of a verified set, or None when it has not been fetched (or not all of it is there)."""
    directory = set_dir(name)
    pinned = read_lock().get(name, {})
    if not pinned or not (directory / STAMP).is_file():
        return None
    paths = [directory / jar for jar in sorted(pinned)]
    return paths if all(p.is_file() for p in paths) else None


def classpath(name: str) -> str:
    """The set's jars as a `-cp` value; raises FetchError when the set is missing."""
    paths = jars(name)
    if paths is None:
        raise FetchError(f"the JVM set {name!r} is not in {set_dir(name)}: run .venv/bin/python {_script()} {name}")
    return os.pathsep.join(str(p) for p in paths)


def require(name: str) -> str:
    """The set's classpath for a test: missing jars fail the test under `CI` (an oracle may not quietly skip
    there) and skip it, saying why, elsewhere."""
    import pytest

    missing = pytest.fail if os.environ.get("CI") else pytest.skip
    if shutil.which("java") is None:
        missing("no `java` on PATH for the JVM oracles")
    try:
        return classpath(name)
    except FetchError as exc:
        missing(f"{exc} (the JVM oracles are required when CI is set)")
        raise


def _script() -> str:
    return str(Path(__file__).resolve().relative_to(PROJECT_ROOT))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _digests(directory: Path) -> dict[str, str]:
    return {p.name: _sha256(p) for p in sorted(directory.glob("*.jar"))}


def _check(name: str, found: dict[str, str], pinned: dict[str, str]) -> None:
    if found == pinned:
        return
    problems = [f"missing {jar}" for jar in sorted(pinned.keys() - found.keys())]
    problems += [f"unexpected {jar}" for jar in sorted(found.keys() - pinned.keys())]
    problems += [f"{jar} has SHA-256 {found[jar]}, the lock says {pinned[jar]}"
                 for jar in sorted(found.keys() & pinned.keys()) if found[jar] != pinned[jar]]
    raise FetchError(f"set {name!r} does not match {LOCK.name}: " + "; ".join(problems))


def _resolve(name: str, dest: Path) -> None:
    """Resolve the set into the local Maven repository and link its jars into `dest` (see the module docstring)."""
    if shutil.which("mvn") is None:
        raise FetchError("`mvn` is not on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        listing = Path(tmp) / "classpath"
        command = ["mvn", "-q", "-B", "-f", str(POM), "-P", name, "dependency:build-classpath",
                   "-DincludeScope=runtime", f"-Dmdep.outputFile={listing}"]
        print(f"fetch_jvm: resolving {name!r} from Maven Central: {' '.join(command)}", flush=True)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise FetchError(f"mvn did not finish within {RESOLVE_TIMEOUT_S} s") from None
        if done.returncode != 0:
            lines = (done.stdout + done.stderr).strip().splitlines()
            tail = " | ".join([line for line in lines if "ERROR" in line][:3] or lines[-5:])
            raise FetchError(f"mvn exited with code {done.returncode}: {tail}")
        jars = [Path(p) for p in listing.read_text().strip().split(os.pathsep) if p]
    dest.mkdir(parents=True)
    for jar in jars:
        try:
            os.link(jar, dest / jar.name)
        except OSError:  # another filesystem (or one without hard links)
            shutil.copyfile(jar, dest / jar.name)


def _stamp_text(pinned: dict[str, str]) -> str:
    """What a resolved set's stamp holds: the lock's lines it was resolved for, so that a set resolved for
    an earlier lock (a jar pinned since, a version moved) is resolved again, not refused."""
    return "".join(f"{jar} {digest}\n" for jar, digest in sorted(pinned.items()))


def fetch(name: str, pinned: dict[str, str]) -> str:
    """Make `.cache/jvm/<name>` hold exactly the pinned jars; returns what was done. Raises FetchError: a set
    stamped for the current lock whose jars differ from it (changed on disk) is refused, never used."""
    directory = set_dir(name)
    stamp = directory / STAMP
    if stamp.is_file() and stamp.read_text() == _stamp_text(pinned):
        _check(name, _digests(directory), pinned)
        return "already there, hashes checked"
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=f".{name}-") as tmp:
        staging = Path(tmp) / name
        _resolve(name, staging)
        _check(name, _digests(staging), pinned)
        (staging / STAMP).write_text(_stamp_text(pinned))
        shutil.rmtree(directory, ignore_errors=True)
        os.replace(staging, directory)  # same filesystem: the set appears whole or not at all
    return f"resolved {len(pinned)} jars, hashes checked"


def update_lock(names: list[str]) -> None:
    """Resolve `names` afresh and write their jars' hashes into the lock (other sets' lines are kept)."""
    pinned = read_lock() if LOCK.is_file() else {}
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            _resolve(name, Path(tmp) / name)
            pinned[name] = _digests(Path(tmp) / name)
        shutil.rmtree(set_dir(name), ignore_errors=True)
    lines = ["# The pinned JVM oracles (tests/oracles/jvm/pom.xml): set/jar SHA-256. Rewrite with",
             f"# .venv/bin/python {_script()} --update-lock SET..."]
    lines += [f"{s}/{jar} {digest}" for s in sorted(pinned) for jar, digest in sorted(pinned[s].items())]
    LOCK.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="*", metavar="SET", help=f"any of {', '.join(SETS)} (default: all)")
    parser.add_argument("--update-lock", action="store_true")
    args = parser.parse_args(argv)
    names = list(dict.fromkeys(args.sets or SETS))
    if unknown := [n for n in names if n not in SETS]:
        parser.error(f"unknown set(s) {', '.join(unknown)}; the sets are {', '.join(SETS)}")
    try:
        if args.update_lock:
            update_lock(names)
        pinned = read_lock()
        for name in names:
            if name not in pinned:
                raise FetchError(f"set {name!r} has no lines in {LOCK}")
            print(f"fetch_jvm: {name}: {fetch(name, pinned[name])} ({set_dir(name)})")
    except (FetchError, OSError) as exc:
        print(f"fetch_jvm: could not provide the JVM oracles: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
