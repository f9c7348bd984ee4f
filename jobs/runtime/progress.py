"""A job's progress on stderr: a rich progress bar on a terminal, plain lines in a log.

A scheduler's log (Airflow, spark-submit's driver log) is no terminal: a bar's carriage returns would
be noise there, so a long job writes a plain `label: done/total partitions (elapsed)` line at most every
`log_every_s` instead, and a short one writes nothing beyond its summary.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

import humanize

LOG_EVERY_S = 30.0


class TerminalProgress:
    """A rich bar of finished partitions, started at the first report and closed when all are done."""

    def __init__(self, label: str, stream: TextIO) -> None:
        from rich.console import Console  # imported for a terminal only: a job's start-up waits for no bar
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._label = label
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("partitions"), TimeElapsedColumn(), console=Console(file=stream),
                             transient=False)
        self._task: int | None = None

    def __call__(self, done: int, total: int) -> None:
        if self._task is None:
            self._bar.start()
            self._task = self._bar.add_task(self._label, total=total)
        self._bar.update(self._task, completed=done, total=total)
        if done >= total:
            self._bar.stop()
            self._task = None


class LogProgress:
    """Plain lines for a log: one when `log_every_s` has passed since the last, and one at the end of a
    job that wrote any (a job shorter than `log_every_s` stays quiet)."""

    def __init__(self, label: str, stream: TextIO, log_every_s: float = LOG_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._label = label
        self._stream = stream
        self._every = log_every_s
        self._clock = clock
        self._start = clock()
        self._last = self._start
        self._wrote = False

    def __call__(self, done: int, total: int) -> None:
        now = self._clock()
        if now - self._last < self._every and not (done >= total and self._wrote):
            return
        self._last = now
        self._wrote = done < total
        elapsed = humanize.naturaldelta(now - self._start)
        self._stream.write(f"{self._label}: {done}/{total} partitions done ({elapsed})\n")
        self._stream.flush()


def job_progress(label: str, enabled: bool = True, stream: TextIO | None = None
                 ) -> Callable[[int, int], None] | None:
    """The progress reporter for a job writing to `stream` (stderr): a bar on a terminal, lines in a log."""
    if not enabled:
        return None
    stream = stream or sys.stderr
    return TerminalProgress(label, stream) if stream.isatty() else LogProgress(label, stream)
