"""The README's main job (`klake demo`): its figures against a recomputation from its own input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jobs import demo
from jobs.cli import main


@pytest.mark.parametrize("storage", ["--local", "embedded-s3"])
def test_demo_runs_end_to_end_and_its_figures_add_up(tmp_path: Path, storage: str,
                                                     capsys: pytest.CaptureFixture) -> None:
    args = ["demo", "--out", str(tmp_path), "--days", "2", "--records-per-day", "600"]
    assert main(args + ([storage] if storage == "--local" else [])) == 0
    report = json.loads((tmp_path / "demo-report.json").read_text())
    rng = np.random.default_rng(7)
    streams = [s for t in demo.TOPICS for s in demo.generate(t, 2, 600, rng)]
    assert report["records"] == sum(len(s.keys) for s in streams) == 2 * 600 * len(demo.TOPICS)
    assert report["partitions"] == sum(t.partitions for t in demo.TOPICS)
    assert report["lookups"] == 12 * report["partitions"] and report["lookups_wrong"] == 0
    assert report["verify_problems"] == []
    assert report["import"]["rows_added"] == report["segments"] == report["live_segments"]
    assert 0 < report["window_segments"] <= report["live_segments"]
    assert report["scrub"]["orphans"] == [] and report["scrub"]["missing"] == []
    out = capsys.readouterr().out
    assert f"{report['lookups']} lookups, {report['lookups']} equal to a brute-force scan" in out


def test_demo_is_idempotent_on_local_storage(tmp_path: Path) -> None:
    args = ["demo", "--local", "--out", str(tmp_path), "--days", "1", "--records-per-day", "300"]
    assert main(args) == 0
    first = json.loads((tmp_path / "demo-report.json").read_text())
    assert main(args) == 0
    second = json.loads((tmp_path / "demo-report.json").read_text())
    assert second["import"]["rows_added"] == 0
    assert second["import"]["already_registered"] == first["import"]["rows_added"]
    assert second["live_segments"] == first["live_segments"]
