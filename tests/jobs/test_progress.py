"""Progress: a bar on a terminal, plain lines in a log, nothing from a short job in a log."""

from __future__ import annotations

import io

from jobs.runtime.progress import LogProgress, TerminalProgress, job_progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_short_job_writes_no_progress_to_a_log() -> None:
    log, clock = io.StringIO(), Clock()
    progress = LogProgress("retention", log, log_every_s=30, clock=clock)
    for done in range(9):
        clock.now += 1
        progress(done, 8)
    assert log.getvalue() == ""


def test_a_long_job_writes_a_plain_line_every_interval_and_one_at_the_end() -> None:
    log, clock = io.StringIO(), Clock()
    progress = LogProgress("compact", log, log_every_s=30, clock=clock)
    for done in range(5):
        clock.now += 20
        progress(done, 4)
    lines = log.getvalue().splitlines()
    assert lines == ["compact: 1/4 partitions done (40 seconds)",
                     "compact: 3/4 partitions done (a minute)",
                     "compact: 4/4 partitions done (2 minutes)"]
    assert "\r" not in log.getvalue()


def test_a_terminal_gets_a_bar_that_ends_at_the_total() -> None:
    tty = Tty()
    progress = job_progress("append", stream=tty)
    assert isinstance(progress, TerminalProgress)
    for done in range(4):
        progress(done, 3)
    assert "append" in tty.getvalue() and "3/3" in tty.getvalue()


def test_no_progress_means_none_and_a_log_gets_lines() -> None:
    assert job_progress("read", enabled=False) is None
    assert isinstance(job_progress("read", stream=io.StringIO()), LogProgress)
