"""`make dist` builds an installable platform wheel holding the compiled record codec (issue 13)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import PROJECT_ROOT


def test_make_dist_builds_a_wheel_with_the_compiled_codec_that_installs_and_decodes(tmp_path: Path) -> None:
    subprocess.run(["make", "dist"], cwd=PROJECT_ROOT, check=True, capture_output=True, timeout=900)
    wheels = sorted((PROJECT_ROOT / "dist").glob("klake-*.whl"))
    assert len(wheels) == 1 and "linux_x86_64" in wheels[0].name, wheels
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert any(n.startswith("engine/format/_codec.") and n.endswith(".so") for n in names)
    assert not any(n.endswith((".pyx", ".c", ".java")) for n in names)
    assert "jobs/ingest/stage.py" in names  # subpackages of jobs ship too (the append's input side)
    assert "jobs/runtime/log4j2.properties" in names  # what keeps a job's output free of Spark's log lines
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(wheels[0])], check=True, timeout=300)
    probe = ("import engine.format.compiled as c, engine.format.builder as b, engine.format.batch as f, "
             "engine.format.records as r\n"
             f"assert c.__file__.startswith({str(target)!r}), c.__file__\n"
             "data = b.encode_batch([b'k'], [b'v'], [7])\n"
             "headers = f.scan_batches(data).headers\n"
             "print(r.decode_records(data, headers).to_arrow(headers).to_pylist()[0]['value'])\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(target)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "b'v'"
