"""A streamed append's memory is bounded by the chunk and the open segment, not by the partition (issue 14).

The same append of 16 MiB and of 96 MiB into one partition (1 MiB segments, 2 MiB chunks) each runs in
a fresh process; the larger one's peak RSS may not grow with the data (the allowance, 24 MiB, is a
quarter of what holding the input would cost). The input is generated chunk by chunk, never whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import PROJECT_ROOT

SCRIPT = r'''
import json, resource, sys
import numpy as np, pyarrow as pa
from layouts.store.bound import Store
from engine.log.topic_config import TopicConfig
from kernel.names import TopicPartition
from engine.ops.append import prepare_append
from engine.ops.run import PartitionInput

mib, root = int(sys.argv[1]), sys.argv[2]
config = TopicConfig.from_mapping({"segment.bytes": 1 << 20, "message.timestamp.before.max.ms": 10**12})
now, value = 1_790_000_000_000, 100

def chunks():
    per_chunk = (2 << 20) // value
    rng = np.random.default_rng(1)
    for start in range(0, (mib << 20) // value, per_chunk):
        payload = rng.integers(97, 123, per_chunk * value, dtype=np.uint8)
        offsets = np.arange(per_chunk + 1, dtype=np.int32) * value
        values = pa.Array.from_buffers(pa.binary(), per_chunk, [None, pa.py_buffer(offsets), pa.py_buffer(payload)])
        yield pa.table({"value": values, "timestamp": pa.array(np.full(per_chunk, now - 1000), pa.int64())})

step = prepare_append(PartitionInput(TopicPartition("t", 0), (), config), records=chunks(), store=Store(root), now_ms=now,
                      append_id="memory")
print(json.dumps({"accepted": step.outcome.counters.records_accepted, "segments": len(step.change.add),
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def _run(mib: int, root: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(mib), str(root)], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_a_streamed_append_does_not_grow_with_the_partition(tmp_path: Path) -> None:
    small, large = _run(16, tmp_path / "small"), _run(96, tmp_path / "large")
    per_chunk = (2 << 20) // 100
    assert small["accepted"] == -(-(16 << 20) // 100 // per_chunk) * per_chunk and large["segments"] > 80
    assert large["peak_mib"] - small["peak_mib"] < 24, (small, large)
