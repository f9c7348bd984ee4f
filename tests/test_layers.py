"""The house's import contracts (pyproject's [tool.importlinter]) hold, and cover every module they must."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import jobs

ROOT = Path(__file__).resolve().parent.parent


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["name"]: c for c in config["contracts"]}


def test_every_jobs_module_but_the_cli_entry_is_kept_from_the_demo() -> None:
    """A new job module must join the demo contract's sources, or the contract would not look at it."""
    contract = next(c for name, c in _contracts().items() if "demo" in name)
    covered = set(contract["source_modules"])
    modules = {m.name for m in pkgutil.walk_packages(jobs.__path__, "jobs.")}
    outside = {m for m in modules if not m.startswith(("jobs.demo", "jobs.cli.main"))
               and not any(m == c or m.startswith(c + ".") for c in covered) and m not in ("jobs.cli", "jobs.runtime")}
    assert outside == set()


def test_the_import_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in done.stdout
