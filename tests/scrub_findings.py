"""scrub's findings as its run report's side file lists them (`<report>.findings.parquet`), by finding."""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq

FINDINGS = ("orphan", "debris", "missing", "size-mismatch")


def scrub_findings(report: dict[str, Any]) -> dict[str, Any]:
    """Each finding's rows (`orphan`, `debris`, `missing`, `size-mismatch`), the uris scrub deleted
    (`deleted`) and those it could not delete with the reason (`delete_failed`), read from the side file
    the JSON report names; its row count must be the report's."""
    side_file = report["results"]["files"]["findings"]
    rows = pq.read_table(side_file["path"]).to_pylist()
    assert len(rows) == side_file["rows"]
    found: dict[str, Any] = {name: [r for r in rows if r["finding"] == name] for name in FINDINGS}
    found["deleted"] = [r["uri"] for r in rows if r["deleted"]]
    found["delete_failed"] = {r["uri"]: r["delete_error"] for r in rows if r["delete_error"] is not None}
    return found
