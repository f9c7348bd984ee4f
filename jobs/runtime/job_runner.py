"""What every job shares: its command line, configuration, catalog, Spark session, report and exit code.

A job is a `JobSpec`: its arguments and a `run(ctx)` that fills the report. The same spec is a
`klake <job>` subcommand (local Spark) and a `spark-submit jobs/<job>.py` entry point (`main`).

Common options: `--conf FILE`, `--set key=value` (repeatable), `--root`/`--catalog` (override the
file), `--topic` / `--partition` (repeatable; default every catalogued partition), `--now` (epoch ms
or ISO-8601, UTC unless it names a zone; default the wall clock), `--dry-run` (jobs that change
data), `--allow-external-deletes` (jobs that delete segments: also delete their objects outside the root),
`--report PATH`, `--job-id` (stable id: a retried run with the same id finishes the work
without duplicating it), `--master`, `--no-progress`, `--verbose` (Spark's own log on stderr, per-item detail on stdout).
Exit codes: 0 every partition succeeded; 1 some partition failed (the report says which and why);
2 bad configuration, usage or input: one line on stderr naming the key, file, column, bucket or topic
at fault, and nothing written. What needs no data is checked before the job starts any work
(`check_before_work`: the --topic names, the root and catalog reachable with the credentials, a
local root creatable); each job checks its own input before it starts Spark.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Concatenate

from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import Catalog, CatalogNotFoundError
from engine.ops.run import (
    Execute,
    JobRun,
    OutcomeT,
    PartitionInput,
    PartitionResult,
    PartitionStep,
    Planner,
    PlanT,
    Prepare,
    run_partition_job,
    serial_execute,
)
from engine.ops.tiered import refuse_broker_owned
from engine.ops.topic_store import load_topic_config, save_topic_config
from jobs.runtime.config import KlakeConfig, load_config
from jobs.runtime.progress import job_progress
from jobs.runtime.report import RunReport
from jobs.runtime.spark_session import spark_execute, spark_session
from kernel.errors import KlakeError
from kernel.names import InvalidNameError, TopicPartition, validate_topic
from kernel.times import InvalidTimeError, format_time, parse_time
from layouts.metering import metered
from layouts.store import describe_error, normalize_uri
from layouts.store.bound import Store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class JobSpec:
    name: str
    help: str
    run: Callable[[JobContext], None]
    add_arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    mutates: bool = True
    example: str = ""
    """A command line that runs on the README tour's local root (`klake demo --local`), shown by --help."""
    dry_run: bool = True
    retires: bool = True
    """Its runs delete the segments they retire (`engine.ops.run`): it takes `--allow-external-deletes`."""
    deletes_after_commit: bool = False
    """Its steps may retire segments, deleted after the run's commit: its leases outlive the commit
    (`engine.ops.run.lease_is_spent`)."""


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum`."""
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text}: expected an integer >= {minimum}")
        return value

    return parse


def time_argument(text: str) -> int:
    """An argparse type: a time as epoch ms or ISO-8601, no zone meaning UTC (`kernel.times.parse_time`)."""
    try:
        return parse_time(text)
    except InvalidTimeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class HelpFormatter(argparse.HelpFormatter):
    """--help's layout: the description wrapped, the epilog (an example, a note) kept line by line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(("example:", "every job")):
            return text
        return super()._fill_text(text, width, indent)


COMMON_OPTIONS = ("--conf FILE", "--set KEY=VALUE", "--root DIR", "--catalog URI", "--topic NAME", "--partition N",
                  "--now TIME", "--dry-run", "--allow-external-deletes", "--report PATH", "--job-id ID",
                  "--master URL", "--no-progress", "--verbose")
"""The options every job shares (README, "The jobs"), named once at the end of each job's --help."""


def add_common_arguments(parser: argparse.ArgumentParser, spec: JobSpec) -> None:
    """The options every job takes (README, "The jobs"); --help names them in one note (`help_epilog`)."""
    group = parser.add_argument_group("configuration and run control")
    hidden = argparse.SUPPRESS
    group.add_argument("--conf", metavar="FILE", help=hidden)
    group.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=hidden)
    group.add_argument("--root", help=hidden)
    group.add_argument("--catalog", help=hidden)
    group.add_argument("--topic", dest="topics", action="append", default=[], metavar="NAME", help=hidden)
    group.add_argument("--partition", dest="partition_ids", action="append", type=int, default=[], metavar="N",
                       help=hidden)
    group.add_argument("--now", type=time_argument, metavar="TIME", help=hidden)
    if spec.mutates and spec.dry_run:
        group.add_argument("--dry-run", action="store_true", help=hidden)
    if spec.mutates and spec.retires:
        group.add_argument("--allow-external-deletes", action="store_true", help=hidden)
    group.add_argument("--report", metavar="PATH", help=hidden)
    group.add_argument("--job-id", help=hidden)
    group.add_argument("--master", help=hidden)
    group.add_argument("--no-progress", action="store_true", help=hidden)
    group.add_argument("--verbose", action="store_true", help=hidden)


def help_epilog(spec: JobSpec) -> str:
    """The end of a job's --help: its example on the tour's root, then the options every job takes."""
    dropped = {"--dry-run"} if not (spec.mutates and spec.dry_run) else set()
    dropped |= {"--allow-external-deletes"} if not (spec.mutates and spec.retires) else set()
    options = ", ".join(option for option in COMMON_OPTIONS if option not in dropped)
    note = textwrap.fill(f"every job also takes: {options} (README, \"The jobs\")", 78, subsequent_indent="  ",
                         break_on_hyphens=False)
    return (example_epilog(spec.example) + "\n" if spec.example else "") + note


def example_epilog(example: str) -> str:
    """An example command line as the end of --help shows it (`HelpFormatter` keeps it as written)."""
    return f"example:\n  {example}"


def add_command(commands: argparse._SubParsersAction, name: str, summary: str, description: str, example: str,
                handler: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """A `klake` command's parser, run by `handler`; its --help laid out as a job's: `summary` in `klake --help`,
    then the description and an example."""
    command = commands.add_parser(name, help=summary, description=description, epilog=example_epilog(example),
                                  formatter_class=HelpFormatter)
    command.set_defaults(handler=handler)
    return command


class JobContext:
    """One run: configuration, clock, report, and lazily the catalog and the Spark session."""

    def __init__(self, spec: JobSpec, args: argparse.Namespace, config: KlakeConfig,
                 spark: SparkSession | None = None) -> None:
        """`spark`: a session the caller already has (Python callers); else one is started when needed."""
        self.spec, self.args, self.config = spec, args, config
        self.now_ms: int = args.now if args.now is not None else time.time_ns() // 1_000_000
        self.dry_run: bool = bool(getattr(args, "dry_run", False))
        self.allow_external_deletes: bool = bool(getattr(args, "allow_external_deletes", False))
        self.job_id: str = args.job_id or f"{spec.name}-{uuid.uuid4().hex[:12]}"
        self.report = RunReport(spec.name, self.job_id, self.dry_run, self.now_ms, config.to_dict())
        self._master = args.master
        self._topic_configs: dict[str, TopicConfig] = {}
        self._catalog: Catalog | None = None
        self._spark = spark
        self.store = Store(config.root, config.storage)
        """The root, bound to its storage once for the run: the ops and the tasks take it, not (root, options)."""
        self.catalog_store = self.store.at(config.catalog_uri)

    @property
    def catalog(self) -> Catalog:
        """The catalog, opened once."""
        if self._catalog is None:
            try:
                self._catalog = Catalog.open(self.catalog_store)
            except CatalogNotFoundError:
                raise KlakeError(f"no catalog at {self.config.catalog_uri}: import or append to create it") from None
        return self._catalog

    def catalog_or_create(self) -> Catalog:
        try:
            return self.catalog
        except KlakeError:
            self._catalog = Catalog.create(self.catalog_store)
            return self._catalog

    @property
    def spark(self) -> SparkSession:
        """The Spark session, started once (at the first job step that needs one)."""
        if self._spark is None:
            self._spark = spark_session(self.config, self._master, verbose=self.args.verbose)
        return self._spark

    def progress(self) -> Callable[[int, int], None] | None:
        return job_progress(self.spec.name, enabled=not self.args.no_progress)

    def execute(self, prepare: Prepare[OutcomeT]) -> Execute[OutcomeT]:
        return spark_execute(self.spark, prepare, self.progress())

    def runs_in_driver(self, planned_bytes: int) -> bool:
        """Whether work that reads `planned_bytes` runs in this process: a small question (an offset for a
        time, an hour of one topic) is answered in a second where Spark's start-up alone takes ten (issue
        26); `jobs.driver_max_bytes` sets the limit, above it the work goes to Spark."""
        return planned_bytes <= self.config.jobs.driver_max_bytes

    def execute_by_size(self, prepare: Prepare[OutcomeT], planned_bytes: Callable[[Sequence[PartitionInput[Any]]], int],
                        ) -> Execute[OutcomeT]:
        """`execute`, or the partitions one after another in this process when their plan is small
        (`runs_in_driver`); decided on the partitions' inputs, so the catalog is read once. The report's
        `results.executed_in` says which ("driver" or "spark")."""
        def execute(items: Sequence[PartitionInput[Any]]) -> list[PartitionResult[OutcomeT]]:
            in_driver = self.runs_in_driver(planned_bytes(items))
            self.report.results["executed_in"] = "driver" if in_driver else "spark"
            return (serial_execute(prepare) if in_driver else self.execute(prepare))(items)
        return execute

    def catalogued_partitions(self) -> list[TopicPartition]:
        """The catalog's partitions; none before an append or import created it (asking creates nothing)."""
        try:
            return self.catalog.partitions()
        except KlakeError:
            return []

    def selected_partitions(self) -> list[TopicPartition]:
        """The catalogued partitions the job's --topic/--partition select (all by default). A --partition
        no selected topic has is a typo, refused (issue 26): Kafka answers UNKNOWN_TOPIC_OR_PARTITION. A job
        that changes data refuses partitions a broker's tiered storage owns (exit 2)."""
        found = self.catalog.partitions()
        topics, numbers = set(self.args.topics), set(self.args.partition_ids)
        if missing := topics - {tp.topic for tp in found}:
            raise KlakeError(f"topic(s) not in the catalog {self.config.catalog_uri}: {sorted(missing)}")
        check_partitions(found, topics, numbers, self.config)
        selected = [tp for tp in found if (not topics or tp.topic in topics) and (not numbers or tp.partition in numbers)]
        if self.spec.mutates:
            self.check_changeable(selected)
        return selected

    def check_changeable(self, tps: Iterable[TopicPartition]) -> None:
        """Refuse (exit 2), before any work or Spark, to change partitions a broker's tiered storage owns."""
        if self.catalogued_partitions():
            refuse_broker_owned(self.catalog, tps, self.spec.name)

    def topic_config(self, topic: str) -> TopicConfig:
        """Declared in the config file (and then stored beside the data for other jobs), else the topic's
        stored settings, else Kafka's defaults; read (and saved) once per run."""
        if topic not in self._topic_configs:
            self._topic_configs[topic] = self._resolve_topic_config(topic)
        return self._topic_configs[topic]

    def _resolve_topic_config(self, topic: str) -> TopicConfig:
        declared = self.config.topic(topic)
        stored = load_topic_config(self.store, topic)
        if declared is None:
            return stored
        if declared.config != stored and self.spec.mutates and not self.dry_run:
            save_topic_config(self.store, topic, declared.config)
        return declared.config

    def run_partitions(self, tps: Iterable[TopicPartition], prepare: Prepare[OutcomeT]) -> JobRun[OutcomeT]:
        """Run `prepare` over `tps` as Spark tasks with one driver commit, and fold it into the report."""
        return self.run_partitions_with(tps, self.execute(prepare))

    def run_planned(self, tps: Iterable[TopicPartition],
                    prepare: Callable[Concatenate[PartitionInput[PlanT], ...], PartitionStep[OutcomeT]],
                    planner: Planner[PlanT]) -> JobRun[OutcomeT]:
        """A job the driver plans (`planner`: compact, roll, retention) whose `prepare` takes its partition's
        slice of that plan (`PlanT`) with the run's store, clock, job id and dry run; a dry run plans and
        reports only (it reads no segment, writes nothing), so its partitions run one after another in this
        process and start no Spark task."""
        bound = partial(prepare, store=self.store, now_ms=self.now_ms, job_id=self.job_id, dry_run=self.dry_run)
        execute = serial_execute(bound) if self.dry_run else self.execute(bound)
        return self.run_partitions_with(tps, execute, planner=planner)

    def run_partitions_with(self, tps: Iterable[TopicPartition], execute: Execute[OutcomeT], **kwargs: Any,
                            ) -> JobRun[OutcomeT]:
        """`run_partitions` with the job's own way of running the partitions' tasks; a run that changes
        nothing (a dry run) creates no catalog either, and a job that never commits has no ledger to ask. A
        job that changes data refuses partitions a broker's tiered storage owns, dry run or not (exit 2),
        when it selects them (`selected_partitions`, `check_changeable`)."""
        by_tp = {tp: self.topic_config(tp.topic) for tp in tps}
        mutate = self.spec.mutates and not self.dry_run
        kwargs.setdefault("ledger", self.spec.mutates)
        catalog = self.catalog_or_create() if mutate else self.catalog if self.catalogued_partitions() else None
        run = run_partition_job(catalog, self.store, by_tp, execute,
                                operation=self.spec.name, job_id=self.job_id,
                                mutate=mutate,
                                lease_ttl_ms=self.config.jobs.lease_ttl_ms,
                                allow_external_deletes=self.allow_external_deletes,
                                deletes_after_commit=self.spec.deletes_after_commit, **kwargs)
        self.report.add_run(run)
        return run


def check_partitions(found: Iterable[TopicPartition], topics: set[str], numbers: set[int],
                     config: KlakeConfig | None) -> None:
    """Refuse a --partition number none of the selected topics (all when `topics` is empty) has, by the
    catalog or the configuration's declared count: a typo, where Kafka answers UNKNOWN_TOPIC_OR_PARTITION
    (issue 26), not a run that selects nothing and succeeds."""
    counts: dict[str, int] = {}
    for tp in found:
        if not topics or tp.topic in topics:
            declared = config.topic(tp.topic) if config is not None else None
            declared_count = (declared.partitions or 0) if declared is not None else 0
            counts[tp.topic] = max(counts.get(tp.topic, 0), tp.partition + 1, declared_count)
    if counts and (unknown := sorted(n for n in numbers if all(n >= count for count in counts.values()))):
        have = ", ".join(f"{topic} has partitions 0..{count - 1}" for topic, count in sorted(counts.items()))
        raise KlakeError(f"--partition {', '.join(map(str, unknown))}: no such partition ({have})")


RANGE_FLAGS = (("from_ms", "to_ms", "--from", "--to"), ("from_offset", "to_offset", "--from-offset", "--to-offset"))


def check_range(args: argparse.Namespace, end_inclusive: bool = False) -> None:
    """A range (`RANGE_FLAGS`) whose end is before its start selects nothing: a typo, refused by name
    (issue 26). An exclusive end equal to the start is refused too: that range is empty as well."""
    for first_attr, end_attr, first_flag, end_flag in RANGE_FLAGS:
        first, end = getattr(args, first_attr, None), getattr(args, end_attr, None)
        if first is None or end is None or first < end or (end_inclusive and first == end):
            continue
        show = format_time if first_attr == "from_ms" else str
        raise KlakeError(f"{first_flag} {show(first)} is {'after' if first > end else 'equal to'} {end_flag} "
                         f"{show(end)}: the range selects nothing")


def check_before_work(ctx: JobContext) -> None:
    """Bad input that needs no data, found before a job reads, writes or starts Spark: an invalid
    --topic name, an empty --from/--to range, and a root or catalog out of reach (S3: credentials,
    endpoint, bucket; one LIST each) or, for a run that writes, a local root that cannot be created."""
    for topic in ctx.args.topics:
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            raise KlakeError(f"--topic: {exc}") from None
    check_range(ctx.args)
    write = ctx.spec.mutates and not ctx.dry_run
    ctx.store.check_access(write)
    if not ctx.config.catalog_uri.startswith(ctx.config.root + "/"):
        ctx.catalog_store.check_access(write)


def run_job(spec: JobSpec, args: argparse.Namespace) -> int:
    """Run `spec`: exit code 0, 1 (partitions failed) or 2 (configuration/usage/input error)."""
    try:
        config = load_config(args.conf, args.overrides, root=args.root)
        if args.catalog:
            config = replace(config, catalog_uri=normalize_uri(args.catalog))
        ctx = JobContext(spec, args, config)
    except KlakeError as exc:
        print(f"klake {spec.name}: configuration error: {exc}", file=sys.stderr)
        return 2
    code = 0
    with metered() as traffic:  # the driver's requests; Spark tasks' are added as their results arrive
        try:
            check_before_work(ctx)
        except KlakeError as exc:
            print(f"klake {spec.name}: error: {exc}", file=sys.stderr)
            return 2
        try:
            spec.run(ctx)
        except (KlakeError, OSError) as exc:
            ctx.report.fail("*", f"{type(exc).__name__}: {describe_error(exc)}" if isinstance(exc, OSError)
                            else str(exc))
            code = 2
        except Exception as exc:  # a bug: reported and non-zero, with the traceback for the operator
            traceback.print_exc()
            ctx.report.fail("*", f"{type(exc).__name__}: {exc}")
    ctx.report.requests.update(traffic.requests)
    ctx.report.bytes.update(traffic.bytes)
    ctx.report.finish()
    if args.report:
        ctx.report.write(args.report, ctx.store)
    if code == 2:  # bad input: the one line says it all (the report, if asked for, has the rest)
        print(f"klake {spec.name}: error: {ctx.report.failures[-1]['error']}", file=sys.stderr)
        return 2
    print("\n".join([*ctx.report.details, *ctx.report.summary]))
    return 1 if ctx.report.failures else 0


def build_parser(spec: JobSpec, parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog=f"spark-submit jobs/{spec.name.replace('-', '_')}.py",
                                               description=spec.help, epilog=help_epilog(spec),
                                               formatter_class=HelpFormatter)
    spec.add_arguments(parser)
    add_common_arguments(parser, spec)
    parser.set_defaults(handler=lambda args: run_job(spec, args))
    return parser


def register(subparsers: argparse._SubParsersAction, spec: JobSpec) -> None:
    parser = subparsers.add_parser(spec.name, help=spec.help, description=spec.help, epilog=help_epilog(spec),
                                   formatter_class=HelpFormatter)
    build_parser(spec, parser)


def main(spec: JobSpec, argv: list[str] | None = None) -> int:
    """The spark-submit entry point of `spec`."""
    args = build_parser(spec).parse_args(argv)
    return run_job(spec, args)
