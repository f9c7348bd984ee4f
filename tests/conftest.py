"""Shared test fixtures: where the broker fixtures live (`../shared/` beside the project root)."""

from __future__ import annotations

from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SHARED = PROJECT_ROOT.parent / "shared"
KAFKA_FIXTURES = SHARED / "fixtures" / "kafka"


@pytest.fixture(scope="session")
def kafka_fixtures() -> Path:
    if not KAFKA_FIXTURES.is_dir():
        pytest.fail(f"shared fixtures not found at {KAFKA_FIXTURES}: CI runs with ../shared beside the clone")
    return KAFKA_FIXTURES
