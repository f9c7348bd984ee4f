"""What the klake DAGs share: how a job is submitted, where its report goes, how the report is surfaced.

Settings are resolved when a task runs, never while the file is parsed (so parsing makes no
Variable lookups): a value given in the run's params wins, then the Airflow Variable, then the
default. One deployment sets the Variables once; a manual trigger can override any of them.

| param | Variable | default |
|---|---|---|
| `klake_conf` | `klake_conf` | none: required |
| `spark_conn_id` | `klake_spark_conn_id` | `spark_default` |
| `report_dir` | `klake_report_dir` | `$AIRFLOW_HOME/klake-reports` |
| `jobs_dir` | `klake_jobs_dir` | the repository's `jobs/` beside this folder |

The Spark connection names the master (e.g. `local[2]`, `yarn`) and `spark-binary`, which the provider
only accepts as `spark-submit`, `spark2-submit` or `spark3-submit` found on the worker's PATH. Jobs run
in client mode, so the driver writes the JSON report on the worker, where the report task reads it.
Credentials (AWS_*, KLAKE_S3_ENDPOINT_URL) reach the job through the worker's environment.

Every job that mutates partitions runs in the pool `klake_mutating`, which must exist with ONE slot
(`airflow pools set klake_mutating 1 "klake jobs that mutate partitions"`): jobs run over all
catalogued topics by default, so one slot shared by every klake DAG is what keeps two mutating jobs off
the same topic; each job's per-partition leases remain the last guard.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, TriggerRule, Variable, get_current_context, task
from airflow.sdk.exceptions import AirflowException, AirflowFailException

MUTATING_POOL = "klake_mutating"
USAGE_EXIT_CODE = 2
REPO_JOBS_DIR = Path(__file__).resolve().parent.parent / "jobs"
REPORT_XCOM_KEY = "report_path"
JOB_ID_XCOM_KEY = "job_id"
SUMMARY_XCOM_KEY = "report_summary"
SHOWN_FAILURES = 20

log = logging.getLogger(__name__)

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "klake",
    "retries": 2,
    "retry_delay": timedelta(minutes=5),
}

_TOPIC = r"^[a-zA-Z0-9._-]{1,249}$"
_OPTIONAL = ["null", "string"]
_OVERRIDABLE = {
    "klake_conf": ("klake_conf", None),
    "spark_conn_id": ("klake_spark_conn_id", "spark_default"),
    "report_dir": ("klake_report_dir", None),
    "jobs_dir": ("klake_jobs_dir", None),
}


def dag_settings(dag_id: str, schedule: str | None, tags: list[str], doc_md: str | None,
                 params: dict[str, Param] | None = None) -> dict[str, Any]:
    """`@dag`'s arguments for a klake DAG: `max_active_runs=1` (a slow run never overlaps the next), no catchup,
    `DEFAULT_ARGS`, and the common params with the DAG's own."""
    return {"dag_id": dag_id, "schedule": schedule, "start_date": pendulum.datetime(2026, 1, 1, tz="UTC"),
            "catchup": False, "max_active_runs": 1, "default_args": DEFAULT_ARGS,
            "params": {**common_params(), **(params or {})}, "tags": tags, "doc_md": doc_md}


def optional_param(description: str) -> Param:
    """A string param that is empty (None) unless the run gives it."""
    return Param(None, type=_OPTIONAL, description=description)


def common_params() -> dict[str, Param]:
    """The params every klake DAG takes; empty ones fall back to Variables (see the module docstring)."""
    return {
        "klake_conf": optional_param("klake YAML config path (else Variable klake_conf)"),
        "spark_conn_id": optional_param("Spark connection (else Variable klake_spark_conn_id, else spark_default)"),
        "report_dir": optional_param("run reports go under {report_dir}/{dag_id}/{run_id}/ (else Variable "
                                     "klake_report_dir)"),
        "jobs_dir": optional_param("folder holding the job entry points (else Variable klake_jobs_dir, else the "
                                   "repository's jobs/)"),
        "topics": Param([], type="array", items={"type": "string", "pattern": _TOPIC},
                        description="topics to process; empty: every catalogued topic"),
        "settings": Param([], type="array", items={"type": "string", "pattern": r"^[^=\s]+=.*$"},
                          description="key=value overrides passed to the job as --set"),
        "dry_run": Param(False, type="boolean", description="plan and report only, change nothing"),
        "spark_conf": Param({}, type="object", description="extra Spark properties for spark-submit"),
    }


@dataclass(frozen=True)
class Settings:
    klake_conf: str
    spark_conn_id: str
    report_dir: Path
    jobs_dir: Path
    topics: list[str]
    settings: list[str]
    dry_run: bool
    spark_conf: dict[str, str]

    @classmethod
    def resolve(cls, params: dict[str, Any]) -> Settings:
        values = {}
        for name, (variable, default) in _OVERRIDABLE.items():
            value = params.get(name)
            values[name] = value if value else Variable.get(variable, default=default)
        if not values["klake_conf"]:
            raise AirflowFailException("no klake config: set the param klake_conf or the Variable klake_conf")
        home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
        return cls(
            klake_conf=values["klake_conf"],
            spark_conn_id=values["spark_conn_id"],
            report_dir=Path(values["report_dir"] or os.path.join(home, "klake-reports")),
            jobs_dir=Path(values["jobs_dir"] or REPO_JOBS_DIR),
            topics=list(params.get("topics") or []),
            settings=list(params.get("settings") or []),
            dry_run=bool(params.get("dry_run")),
            spark_conf={str(k): _spark_value(v) for k, v in (params.get("spark_conf") or {}).items()},
        )


def _spark_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def job_id_for(dag_id: str, run_id: str, task_id: str) -> str:
    """The same id for every try of one task in one run, so a retried job finishes its own work."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{dag_id}.{task_id}.{run_id}")


def report_path_for(report_dir: Path, dag_id: str, run_id: str, task_id: str) -> Path:
    return report_dir / dag_id / run_id / f"{task_id}.json"


def job_arguments(settings: Settings, *, report: Path, job_id: str, extra: list[str]) -> list[str]:
    """The job's command line per the job contract (`--conf`, `--set`, `--topic`, `--report`, ...)."""
    args = ["--conf", settings.klake_conf, "--report", str(report), "--job-id", job_id]
    for setting in settings.settings:
        args += ["--set", setting]
    for topic in settings.topics:
        args += ["--topic", topic]
    flags = list(extra)
    if settings.dry_run and "--dry-run" not in flags:
        flags.append("--dry-run")
    return args + flags


class KlakeJobOperator(SparkSubmitOperator):
    """spark-submit `{jobs_dir}/{job}.py`; the job's exit code decides the task's state.

    Exit 1 (a partition failed) fails the task and lets Airflow retry: leases and catalog commits make a
    re-run finish the work without duplicates. Exit 2 (bad config, usage or input) fails it without
    retries, since a retry cannot fix it. A report left by an earlier try is removed before submitting,
    so the report task never reads a stale one.
    """

    def __init__(self, *, job: str, task_id: str | None = None, mutating: bool = True,
                 extra_args: list[str] | None = None, param_options: dict[str, str] | None = None,
                 required_params: tuple[str, ...] = (), **kwargs: Any) -> None:
        if mutating:
            kwargs.setdefault("pool", MUTATING_POOL)
        super().__init__(task_id=task_id or job, name=f"klake-{job}", **kwargs)
        self.job = job
        self.extra_args = list(extra_args or [])
        self.param_options = dict(param_options or {})  # a DAG's own param -> the job option it sets
        self.required_params = tuple(required_params)

    def run_options(self, params: dict[str, Any]) -> list[str]:
        """The job options the run's own params give (`param_options`), empty ones left out."""
        missing = [name for name in self.required_params if not params.get(name)]
        if missing:
            raise AirflowFailException(f"klake {self.job} needs the param(s) {', '.join(missing)}")
        return [arg for name, option in self.param_options.items() if params.get(name)
                for arg in (option, str(params[name]))]

    def execute(self, context: Any) -> None:
        settings = Settings.resolve(context["params"])
        dag_id, run_id = context["dag"].dag_id, context["run_id"]
        job_id = job_id_for(dag_id, run_id, self.task_id)
        report = report_path_for(settings.report_dir, dag_id, run_id, self.task_id)
        report.parent.mkdir(parents=True, exist_ok=True)
        report.unlink(missing_ok=True)
        context["ti"].xcom_push(key=REPORT_XCOM_KEY, value=str(report))
        context["ti"].xcom_push(key=JOB_ID_XCOM_KEY, value=job_id)

        self.application = str(settings.jobs_dir / f"{self.job}.py")
        self.application_args = job_arguments(settings, report=report, job_id=job_id,
                                              extra=[*self.run_options(context["params"]), *self.extra_args])
        self.conf = {**(self.conf or {}), **settings.spark_conf}
        # `conn_id` is not a template field of the provider's operator; a run may choose it, so set it
        # before the hook is built.
        self._conn_id = settings.spark_conn_id
        self._hook = None
        try:
            super().execute(context)
        except AirflowException as exc:
            if self._exit_code() == USAGE_EXIT_CODE:
                raise AirflowFailException(
                    f"klake {self.job} rejected its config, usage or input (exit {USAGE_EXIT_CODE}); "
                    f"not retrying: {exc}") from exc
            raise

    def _exit_code(self) -> int | None:
        process = getattr(self._hook, "_submit_sp", None)
        return None if process is None else process.returncode


def report_summary(report: dict[str, Any], path: str) -> dict[str, Any]:
    """The part of a run report worth an XCom: status, summary and the first failures."""
    failures = list(report.get("failures") or [])
    return {
        "job": report.get("job"),
        "status": report.get("status"),
        "job_id": report.get("job_id"),
        "summary": report.get("summary"),
        "partitions": len(report.get("partitions") or []),
        "failures": failures[:SHOWN_FAILURES],
        "failure_count": len(failures),
        "report": path,
    }


def surface_report(job_task: KlakeJobOperator):
    """A task that reads `job_task`'s JSON report, logs it, pushes it as XCom and fails unless it succeeded.

    The summary is pushed under `report_summary` before the verdict (so a failed run's is kept too) and
    returned on success. It runs once the job has succeeded or failed (ONE_DONE), so a failed job's
    report, which says which partitions failed and why, is shown too; if the job never ran, it is
    skipped. Report tasks are the DAGs' leaves, so a failed report fails the run.
    """

    @task(task_id=f"{job_task.task_id}_report", trigger_rule=TriggerRule.ONE_DONE, retries=0)
    def read_report() -> dict[str, Any]:
        ti = get_current_context()["ti"]
        path = ti.xcom_pull(task_ids=job_task.task_id, key=REPORT_XCOM_KEY)
        expected_job_id = ti.xcom_pull(task_ids=job_task.task_id, key=JOB_ID_XCOM_KEY)
        if not path or not os.path.exists(path):
            raise AirflowException(f"{job_task.task_id}: the job wrote no report (expected at {path}); "
                                   "see the job task's log")
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
        summary = report_summary(report, path)
        ti.xcom_push(key=SUMMARY_XCOM_KEY, value=summary)
        log.info("%s report %s: status %s\n%s", summary["job"], path, summary["status"], summary["summary"])
        for failure in summary["failures"]:
            log.error("failed: %s", failure)
        if summary["failure_count"] > SHOWN_FAILURES:
            log.error("... and %d more failures in %s", summary["failure_count"] - SHOWN_FAILURES, path)
        if report.get("job_id") != expected_job_id:
            raise AirflowException(f"{path} belongs to job {report.get('job_id')!r}, not {expected_job_id!r}")
        if summary["status"] != "succeeded":
            raise AirflowException(f"klake {summary['job']} {summary['status']}: {summary['summary']}")
        return summary

    report = read_report()
    job_task >> report
    return report
