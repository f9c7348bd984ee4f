"""The klake DAGs: they import cleanly, are scheduled and wired as their docstrings say, and really run.

The `dag.test()` runs submit jobs to local Spark through `SparkSubmitOperator`: a stub job checks
the command line and the retry path quickly; the real `jobs/retention.py` runs against moto and
must change the catalog as retention should; a job that fails must fail its task and the run.
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import PROJECT_PYTHON, REPO, SPARK_CONN_ID
from klake_common import MUTATING_POOL, KlakeJobOperator, job_id_for, report_path_for

CONTRACT_FIELDS = {"job", "status", "job_id", "partitions", "failures", "summary"}
STORE_SCRIPT = Path(__file__).resolve().parent / "klake_store.py"
STUB_JOBS = Path(__file__).resolve().parent / "stub_jobs"
STUB_CONF = "/etc/klake/prod.yaml"
HOUR = 3_600_000
DAY = 24 * HOUR

EXPECTED = {
    "klake_retention": {
        "schedule": "@hourly",
        "tags": {"klake", "retention", "mutating"},
        "edges": {("retention", "retention_report")},
    },
    "klake_compaction": {
        "schedule": "@daily",
        "tags": {"klake", "compaction", "mutating"},
        "edges": {("compact", "compact_report")},
    },
    "klake_catalog_maintenance": {
        "schedule": "@daily",
        "tags": {"klake", "maintenance", "mutating"},
        "edges": {("scrub", "scrub_report"), ("scrub", "catalog_maintenance"),
                  ("catalog_maintenance", "catalog_maintenance_report")},
    },
    "klake_export": {
        "schedule": None,
        "tags": {"klake", "export"},
        "edges": {("export", "export_report")},
    },
    "klake_archive": {
        "schedule": "@hourly",
        "tags": {"klake", "archive", "mutating"},
        "edges": {("archive", "archive_report")},
    },
    "klake_index_recover": {
        "schedule": None,
        "tags": {"klake", "recovery"},
        "edges": {("verify", "verify_report"), ("verify", "repair_requested"),
                  ("repair_requested", "recover"), ("recover", "recover_report")},
    },
}
COMMON_PARAMS = {"klake_conf": None, "spark_conn_id": None, "report_dir": None, "jobs_dir": None,
                 "topics": [], "settings": [], "dry_run": False, "spark_conf": {}}
DAG_PARAMS = {"klake_index_recover": {"repair"}, "klake_export": {"output", "from_time", "to_time"},
              "klake_archive": {"bootstrap_servers", "from_time", "until_time"}}
JOBS = {"retention": "retention", "compact": "compact", "scrub": "scrub", "export": "export", "archive": "archive",
        "catalog_maintenance": "catalog_maintenance", "verify": "recover", "recover": "recover"}


def edges(dag) -> set[tuple[str, str]]:
    return {(t.task_id, down) for t in dag.tasks for down in t.downstream_task_ids}


def documented_edges(doc: str) -> set[tuple[str, str]]:
    """The edges of the docstring's `Task order:` line (`a >> b >> c; a >> d`)."""
    line = next(line for line in doc.splitlines() if line.startswith("Task order:"))
    found = set()
    for chain in line.removeprefix("Task order:").split(";"):
        names = [name.strip() for name in chain.split(">>")]
        found |= set(zip(names, names[1:], strict=False))
    return found


def klake_store(*args: object) -> dict:
    """Run `klake_store.py` in the project venv (environment inherited) and return its JSON output."""
    result = subprocess.run([str(PROJECT_PYTHON), str(STORE_SCRIPT), *map(str, args)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"klake_store.py {args} failed:\n{result.stderr}"
    return json.loads(result.stdout)


def task_states(run) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


# --- parsing ---------------------------------------------------------------------------------------

def test_dags_import_without_errors(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == set(EXPECTED)


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_schedule_tags_params_and_task_order(dagbag, dag_id: str) -> None:
    dag, expected = dagbag.get_dag(dag_id), EXPECTED[dag_id]
    assert dag.schedule == expected["schedule"]
    assert set(dag.tags) == expected["tags"]
    assert dag.max_active_runs == 1 and dag.catchup is False
    params = {name: dag.params[name] for name in dag.params}
    assert {k: params[k] for k in COMMON_PARAMS} == COMMON_PARAMS
    assert set(params) - set(COMMON_PARAMS) == DAG_PARAMS.get(dag_id, set())
    assert edges(dag) == expected["edges"] == documented_edges(dag.doc_md)


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_jobs_share_one_pool_retry_and_are_reported(dagbag, dag_id: str) -> None:
    dag = dagbag.get_dag(dag_id)
    jobs = [t for t in dag.tasks if isinstance(t, KlakeJobOperator)]
    assert jobs
    for job in jobs:
        assert JOBS[job.task_id] == job.job
        assert job.pool == MUTATING_POOL and job.execution_timeout is not None
        assert job.retries == (0 if job.task_id == "verify" else 2)
        report = dag.get_task(f"{job.task_id}_report")
        assert report.trigger_rule == "one_done" and report.upstream_task_ids == {job.task_id}
    if dag_id == "klake_index_recover":
        assert dag.get_task("verify").extra_args == ["--dry-run"]
        assert dag.get_task("repair_requested").trigger_rule == "all_done"


# --- runs --------------------------------------------------------------------------------------------

@pytest.fixture
def stub_run(fresh_dag, spark_environment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Runs a freshly parsed DAG whose jobs are `stub_jobs/` (no retry delay) with the run conf given; returns the
    run and the stub's tries (its command line, whether a report was there), in order ([]: nothing submitted)."""
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("KLAKE_STUB_LOG", str(calls))
    monkeypatch.setenv("AIRFLOW_VAR_KLAKE_SPARK_CONN_ID", SPARK_CONN_ID)

    def run(dag_id: str, task_id: str, retries: int | None = None, **conf: object) -> tuple[Any, list[dict]]:
        dag = fresh_dag(dag_id)
        monkeypatch.setattr(dag.get_task(task_id), "retry_delay", timedelta(0))
        if retries is not None:
            monkeypatch.setattr(dag.get_task(task_id), "retries", retries)
        done = dag.test(run_conf={"klake_conf": STUB_CONF, "jobs_dir": str(STUB_JOBS),
                                  "report_dir": str(tmp_path / "reports"), **conf})
        tries = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
        return done, tries

    return run


def contract_arguments(tmp_path: Path, dag_id: str, run: Any, task_id: str) -> list[str]:
    """What every job's command line starts with: the config, the report path and the job id of the task."""
    report = report_path_for(tmp_path / "reports", dag_id, run.run_id, task_id)
    return ["--conf", STUB_CONF, "--report", str(report), "--job-id", job_id_for(dag_id, run.run_id, task_id)]


def test_stub_job_gets_the_contract_arguments_and_a_retry_keeps_its_job_id(stub_run, tmp_path: Path) -> None:
    """A retried task resubmits with the same --job-id, and the report task reads the retry's report."""
    run, tries = stub_run("klake_retention", "retention", retries=1, topics=["orders", "clicks"],
                          settings=["retention.ms=1"], dry_run=True, spark_conf={"spark.ui.enabled": "false"})

    assert run.state == "success", task_states(run)
    assert len(tries) == 2
    assert tries[0]["argv"] == tries[1]["argv"] == [
        *contract_arguments(tmp_path, "klake_retention", run, "retention"),
        "--set", "retention.ms=1", "--topic", "orders", "--topic", "clicks", "--dry-run"]
    assert [t["report_existed"] for t in tries] == [False, False]
    report = report_path_for(tmp_path / "reports", "klake_retention", run.run_id, "retention")
    assert json.loads(report.read_text())["summary"] == "stub try 2: succeeded"
    summary = run.get_task_instance("retention_report").xcom_pull(task_ids="retention_report")
    assert summary["status"] == "succeeded" and summary["job_id"] == job_id_for("klake_retention", run.run_id,
                                                                                "retention")


def test_export_passes_its_own_params_as_job_options(stub_run, tmp_path: Path) -> None:
    run, tries = stub_run("klake_export", "export", topics=["orders"], output="s3://archive/kafka-logs",
                          from_time="2026-11-01T00:00:00Z")
    assert run.state == "success", task_states(run)
    assert tries[0]["argv"] == tries[-1]["argv"] == [
        *contract_arguments(tmp_path, "klake_export", run, "export"), "--topic", "orders",
        "--output", "s3://archive/kafka-logs", "--from", "2026-11-01T00:00:00Z"]


def test_export_without_an_output_fails_without_submitting(stub_run) -> None:
    run, tries = stub_run("klake_export", "export")
    assert task_states(run)["export"] == "failed" and tries == []


def test_archive_passes_the_cluster_and_its_range_and_a_retry_keeps_its_job_id(stub_run, tmp_path: Path) -> None:
    run, tries = stub_run("klake_archive", "archive", topics=["orders"], bootstrap_servers="broker:9092",
                          until_time="2026-11-28T05:00:00Z")
    assert run.state == "success", task_states(run)
    argv = [t["argv"] for t in tries]
    assert len(argv) == 2 and argv[0] == argv[1] == [  # the stub's first try fails: the retry is the same job
        *contract_arguments(tmp_path, "klake_archive", run, "archive"), "--topic", "orders",
        "--bootstrap-servers", "broker:9092", "--until", "2026-11-28T05:00:00Z"]


def test_archive_without_a_cluster_or_topics_fails_without_submitting(stub_run) -> None:
    for conf in ({"bootstrap_servers": "broker:9092"}, {"topics": ["orders"]}):
        run, tries = stub_run("klake_archive", "archive", **conf)
        assert task_states(run)["archive"] == "failed" and tries == []


@pytest.fixture
def events_store(moto_endpoint: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict:
    """Topic `events`, partitions 0 and 1: six daily segments (offsets 0..143) from ten days ago.

    With `retention.ms` = 6.5 days the segments of days 0-2 (base offsets 0, 24, 48) are past retention
    by more than 12 hours and those of days 3-5 are within it by more than 10 hours, so the outcome
    does not depend on when the test runs.
    """
    bucket = "klake-" + request.node.name.replace("_", "-")[:40].strip("-")
    root, catalog = f"s3://{bucket}/root", f"s3://{bucket}/catalog"
    t0 = (int(time.time() * 1000) // HOUR) * HOUR - 10 * DAY
    assert klake_store("seed", root, catalog, "events", 2, 6, t0) == {"segments": 12}
    conf = tmp_path / "klake.yaml"
    conf.write_text(f"""\
storage: {{root: "{root}"}}
catalog: {{uri: "{catalog}"}}
spark: {{conf: {{spark.ui.enabled: "false"}}}}
topics:
  events: {{retention.ms: {int(6.5 * DAY)}}}
""")
    return {"root": root, "catalog": catalog, "conf": str(conf)}


def test_retention_run_deletes_the_segments_past_retention(
        fresh_dag, spark_environment, events_store: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings from Variables only, as a deployment sets them; the real job runs on local Spark.

    No retries: a failure must show at once instead of after `dag.test()` waits out the retry delay.
    """
    dag = fresh_dag("klake_retention")
    monkeypatch.setattr(dag.get_task("retention"), "retries", 0)
    monkeypatch.setenv("AIRFLOW_VAR_KLAKE_CONF", events_store["conf"])
    monkeypatch.setenv("AIRFLOW_VAR_KLAKE_SPARK_CONN_ID", SPARK_CONN_ID)
    monkeypatch.setenv("AIRFLOW_VAR_KLAKE_REPORT_DIR", str(tmp_path / "reports"))
    before = klake_store("state", events_store["catalog"], "events")
    assert {p: s["base_offsets"] for p, s in before.items()} == {"0": [0, 24, 48, 72, 96, 120],
                                                               "1": [0, 24, 48, 72, 96, 120]}

    run = dag.test()

    assert run.state == "success", task_states(run)
    after = klake_store("state", events_store["catalog"], "events")
    assert after == {p: {"base_offsets": [72, 96, 120], "log_start_offset": 72, "log_end_offset": 144}
                     for p in ("0", "1")}
    path = report_path_for(tmp_path / "reports", "klake_retention", run.run_id, "retention")
    report = json.loads(path.read_text())
    assert set(report) >= CONTRACT_FIELDS
    assert report["status"] == "succeeded" and report["failures"] == []
    assert report["job_id"] == job_id_for("klake_retention", run.run_id, "retention")
    summary = run.get_task_instance("retention_report").xcom_pull(task_ids="retention_report")
    assert summary["status"] == "succeeded" and summary["summary"] == report["summary"]
    assert summary["partitions"] == 2 and summary["report"] == str(path)


def test_a_failed_partition_fails_the_job_task_and_the_run(
        fresh_dag, spark_environment, events_store: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another job holds partition 1's lease: the job exits 1, both tasks fail, the report says why.

    Retries are off here only because `dag.test()` would wait out the retry delay.
    """
    klake_store("hold-lease", events_store["root"], "events", 1)
    dag = fresh_dag("klake_retention")
    monkeypatch.setattr(dag.get_task("retention"), "retries", 0)

    run = dag.test(run_conf={"klake_conf": events_store["conf"], "spark_conn_id": SPARK_CONN_ID,
                             "report_dir": str(tmp_path / "reports")})

    assert run.state == "failed"
    assert task_states(run) == {"retention": "failed", "retention_report": "failed"}
    after = klake_store("state", events_store["catalog"], "events")
    assert after["0"]["base_offsets"] == [72, 96, 120]
    assert after["1"]["base_offsets"] == [0, 24, 48, 72, 96, 120]
    summary = run.get_task_instance("retention_report").xcom_pull(task_ids="retention_report",
                                                                  key="report_summary")
    assert summary["status"] == "failed"
    assert [f["partition"] for f in summary["failures"]] == ["events-1"]
    assert "another-job" in summary["failures"][0]["error"]


def test_a_bad_config_fails_the_task_without_retrying(
        fresh_dag, spark_environment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit 2 (the config file does not exist) fails at once: a retry could not fix it."""
    dag = fresh_dag("klake_retention")
    monkeypatch.setattr(dag.get_task("retention"), "retry_delay", timedelta(0))

    run = dag.test(run_conf={"klake_conf": str(tmp_path / "missing.yaml"), "spark_conn_id": SPARK_CONN_ID,
                             "report_dir": str(tmp_path / "reports")})

    assert run.state == "failed"
    assert task_states(run) == {"retention": "failed", "retention_report": "failed"}
    assert dag.get_task("retention").retries == 2
    assert run.get_task_instance("retention").try_number == 1
