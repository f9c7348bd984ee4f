"""A stand-in for a job (`jobs/retention.py`; `export.py` links here) that records its command line and
fails its first try.

The Airflow tests submit it with spark-submit to check what the DAG passes to a job and how a retry
behaves, without Spark work. `KLAKE_STUB_LOG` names the JSON-lines file of calls.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", required=True)
    parser.add_argument("--job-id", required=True)
    args, _ = parser.parse_known_args()
    log = os.environ["KLAKE_STUB_LOG"]
    calls = len(Path(log).read_text().splitlines()) if os.path.exists(log) else 0
    with open(log, "a") as f:
        f.write(json.dumps({"argv": sys.argv[1:], "report_existed": os.path.exists(args.report)}) + "\n")
    status = "failed" if calls == 0 else "succeeded"
    failures = [{"topic": "a", "partition": 0, "error": "first try fails"}] if calls == 0 else []
    with open(args.report, "w") as f:
        json.dump({"job": Path(sys.argv[0]).stem, "status": status, "job_id": args.job_id, "partitions": [],
                   "failures": failures, "summary": f"stub try {calls + 1}: {status}"}, f)
    print(f"stub try {calls + 1}: {status}")
    return 1 if calls == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
