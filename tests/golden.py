"""The golden dumps beside the Kafka fixtures (`tests/fixtures/kafka/README.md`): the large ones are kept
gzip-compressed (`X.golden.jsonl.gz`), the others plain (`X.golden.jsonl`); readers ask here for either."""

from __future__ import annotations

import gzip
from pathlib import Path


def golden_path(data: Path) -> Path:
    """The golden dump of the fixture file `data` (a `.log` or `.records`), compressed or not."""
    plain = data.with_name(f"{data.name}.golden.jsonl")
    return plain if plain.exists() else plain.with_name(f"{plain.name}.gz")


def golden_text(data: Path) -> str:
    """The golden dump of the fixture file `data`: one JSON object per record, in log order."""
    path = golden_path(data)
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
