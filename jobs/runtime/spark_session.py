"""The Spark side of a job: the session, and running per-partition work as Spark tasks.

The execution model (README, "The jobs"): the driver plans, one Spark task per topic-partition does the segment
I/O through fsspec with `engine/`, and returns its step (catalog rows, counters) to the driver, which
commits once. No hadoop-aws or Delta jar is needed: tasks never touch Spark's own filesystems.

A session klake starts logs through the package's `log4j2.properties`: warnings and errors, minus the
ones every local run prints, so a job's output is its summary; `verbose` lowers its level to INFO. The
JVM's own start-up warning about incubator modules is dropped from its stderr
(`launch_jvm_without_incubator_warning`).
Under spark-submit the JVM is configured already: its log4j2 setup rules, at WARN unless `verbose`.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.ops.run import Execute, OutcomeT, PartitionInput, PartitionResult, Prepare, run_prepare
from jobs.runtime.config import KlakeConfig
from layouts.aiven_manifest import KEY_RING_ENV
from layouts.metering import add_counted

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def under_spark_submit() -> bool:
    """spark-submit starts the Python driver with a gateway already running; its --master then rules."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


LOG4J2_PROPERTIES = Path(__file__).with_name("log4j2.properties")
def spark_session(config: KlakeConfig, master: str | None = None, verbose: bool = False) -> SparkSession:
    """The job's session: `spark.master`/`app_name`/`conf` from the config (spark-submit's own
    options win when run under it); local masters bind to loopback and run tasks in this venv's Python.
    Quiet unless `verbose` (module docstring); `KLAKE_SPARK_LOG_LEVEL` sets the level otherwise."""
    from pyspark.sql import SparkSession

    master = master or config.spark_master
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(config.spark_app_name)
    settings = {"spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC",
                "spark.sql.execution.arrow.pyspark.enabled": "true",
                # glibc raises its mmap threshold after each large free, so the tasks' many-MB buffers (staged
                # rows, segments) land on the heap, which it does not give back: a fixed 1 MiB threshold keeps
                # a Python worker's memory to what it holds (issue 14's bound; Dask's workers set the same knob)
                "spark.executorEnv.MALLOC_MMAP_THRESHOLD_": str(1 << 20),
                # Spark keeps one pool of Python workers per environment, and its SQL runners (`mapInArrow`) add
                # this variable where its RDD runners do not: so a job's RDD stage (an append's partition tasks,
                # `spark_execute`) started its workers cold again after its SQL stage, seconds per worker. With
                # it in every task's environment both stages share warm workers (and RDD tasks get the same
                # short tracebacks as SQL's)
                "spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK": "1",
                # the tasks read encrypted Aiven tiered-storage uploads with the key ring the driver's
                # environment names (a path: on a cluster the file must be there too); never in the config
                **({f"spark.executorEnv.{KEY_RING_ENV}": os.environ[KEY_RING_ENV]} if os.environ.get(KEY_RING_ENV)
                   else {}),
                **config.spark_conf}
    if not under_spark_submit():
        builder = builder.master(master)
        logging = (f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES.as_uri()} "  # read by the JVM this process
                   f"-Dklake.spark.log.level={'info' if verbose else 'warn'}")  # launches, before it logs
        settings["spark.driver.extraJavaOptions"] = " ".join(
            filter(None, [settings.get("spark.driver.extraJavaOptions"), logging]))
    for key, value in settings.items():
        builder = builder.config(key, value)
    if not under_spark_submit():
        launch_jvm_without_incubator_warning({"spark.master": master, "spark.app.name": config.spark_app_name,
                                              **settings})
    spark = builder.getOrCreate()
    if not verbose:  # also quiets a session that was already running, and one spark-submit configured
        spark.sparkContext.setLogLevel(os.environ.get("KLAKE_SPARK_LOG_LEVEL", "WARN"))
    return spark


INCUBATOR_WARNING = b"WARNING: Using incubator modules:"


def launch_jvm_without_incubator_warning(settings: dict[str, str]) -> None:
    """Start the driver JVM as `getOrCreate` would (spark-submit with `settings`), its stderr passed through
    to ours but for the JVM's `WARNING: Using incubator modules: jdk.incubator.vector` (issue 26). Spark's
    launcher always adds `--add-modules=jdk.incubator.vector` (`JavaModuleOptions`), and the JVM's module
    system prints that line at boot with no option to silence it (`-Xlog:disable` does not), so the line
    is dropped from the JVM's stderr. A JVM already running (a session before, or spark-submit's) is left
    alone."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf()
    for key, value in settings.items():
        conf.set(key, value)
    read_end, write_end = os.pipe()  # read from the start: a JVM that writes more than a pipe holds never blocks
    threading.Thread(target=_pass_stderr, args=(read_end,), name="klake-jvm-stderr", daemon=True).start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_end})
    finally:
        os.close(write_end)
    SparkContext._ensure_initialized(gateway=gateway)


def _pass_stderr(read_end: int) -> None:
    """Copy the JVM's stderr to ours line by line, without the incubator warning."""
    with os.fdopen(read_end, "rb", buffering=0) as lines:
        for line in iter(lines.readline, b""):
            if not line.startswith(INCUBATOR_WARNING):
                os.write(2, line)  # where the JVM wrote it, as when it inherited our stderr


def spark_execute(spark: SparkSession, prepare: Prepare[OutcomeT], progress: Callable[[int, int], None] | None = None
                  ) -> Execute[OutcomeT]:
    """Run `prepare` on every partition in its own Spark task; failures come back as results."""

    def execute(items: Sequence[PartitionInput[Any]]) -> list[PartitionResult[OutcomeT]]:
        if not items:
            return []
        rdd = spark.sparkContext.parallelize(list(items), len(items)).map(lambda item: run_prepare(prepare, item))
        return counted_on_the_driver(run_with_progress(spark, rdd.collect, len(items), progress))

    return execute


def counted_on_the_driver(results: Sequence[PartitionResult]) -> list[PartitionResult]:
    """The results of tasks that ran in Spark's Python workers (other processes, which metered their own
    traffic), with that traffic added to the driver's meters: the run's totals count every request."""
    for result in results:
        add_counted(result.requests, result.bytes)
    return list(results)


def run_with_progress(spark: SparkSession, action: Callable[[], Any], tasks: int,
                      progress: Callable[[int, int], None] | None) -> Any:
    """Run a Spark action, reporting finished tasks of its stages to `progress` twice a second."""
    if progress is None:
        return action()
    tracker = spark.sparkContext.statusTracker()
    done = threading.Event()

    def poll() -> None:
        while not done.wait(0.5):
            finished = sum(info.numCompletedTasks for stage in tracker.getActiveStageIds()
                           if (info := tracker.getStageInfo(stage)) is not None)
            progress(min(finished, tasks), tasks)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        result = action()
    finally:
        done.set()
        watcher.join()
    progress(tasks, tasks)
    return result
