"""Times for people: what a person types (epoch ms or ISO-8601, no zone = UTC) and what klake prints."""

from __future__ import annotations

import time

import pytest

from kernel.times import InvalidTimeError, format_duration, format_time, parse_time

NOV_2 = 1_793_577_600_000  # 2026-11-02T00:00:00Z


@pytest.mark.parametrize(("text", "ms"), [
    ("1793577600000", NOV_2),
    ("2026-11-02T00:00:00Z", NOV_2),
    ("2026-11-02T00:00:00", NOV_2),  # no zone: UTC, whatever the machine's zone
    ("2026-11-02", NOV_2),
    ("2026-11-02 10:00", NOV_2 + 10 * 3_600_000),
    ("2026-11-01T19:00:00-05:00", NOV_2),
    ("2026-11-02T00:00:00.001Z", NOV_2 + 1),
    ("2026-11-02T00:00:00.000999Z", NOV_2),  # below the millisecond: floored, as Kafka keeps ms
    ("1987-05-10T10:40:21.915Z", 547_641_621_915),  # float seconds * 1000 gives ...914: exact arithmetic
    ("1969-12-31T23:59:59.999Z", -1),  # before 1970: negative (valid for KIP-228 topics)
    ("-86400000", -86_400_000),
    (" 0 ", 0),
])
def test_a_time_is_epoch_ms_or_iso_and_naive_iso_is_utc(text: str, ms: int) -> None:
    assert parse_time(text) == ms


def test_naive_iso_does_not_depend_on_the_machines_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = []
    try:
        for zone in ("America/New_York", "Asia/Kolkata", "UTC"):
            monkeypatch.setenv("TZ", zone)
            time.tzset()
            answers.append((parse_time("2026-11-02T00:00:00"), format_time(NOV_2)))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert answers == [(NOV_2, "2026-11-02T00:00:00Z")] * 3


@pytest.mark.parametrize("text", ["abc", "1.5", "", "2026-13-01", "99999999999999999999"])
def test_anything_else_is_refused_saying_what_a_time_looks_like(text: str) -> None:
    with pytest.raises(InvalidTimeError, match="is not a time"):
        parse_time(text)


@pytest.mark.parametrize(("ms", "text"), [
    (NOV_2, "2026-11-02T00:00:00Z"),
    (NOV_2 + 250, "2026-11-02T00:00:00.250Z"),
    (0, "1970-01-01T00:00:00Z"),
    (-1, "1969-12-31T23:59:59.999Z"),
    (-62_135_596_800_000, "0001-01-01T00:00:00Z"),
    (2**63 - 1, "9223372036854775807"),  # beyond datetime's years (e.g. nanoseconds taken for ms): the number
])
def test_a_time_prints_as_iso_utc_with_milliseconds_only_when_not_zero(ms: int, text: str) -> None:
    assert format_time(ms) == text
    if text.endswith("Z"):
        assert parse_time(text) == ms


@pytest.mark.parametrize(("ms", "natural", "precise"), [
    (16 * 60_000, "16 minutes", "16 minutes"),
    (1_406_113, "23 minutes", "23 minutes, 26 seconds and 113 milliseconds"),
    (7 * 86_400_000 + 1, "7 days", "7 days and 1 millisecond"),
    (3_153_600_000, "a month", "1 month, 5 days and 12 hours"),
    (0, "a moment", "0 milliseconds"),
    (-5_000, "-5 seconds", "-5 seconds"),
    (2**63 - 1, "9223372036854775807 ms", "9223372036854775807 ms"),  # Kafka's "no limit"
])
def test_a_duration_prints_in_words(ms: int, natural: str, precise: str) -> None:
    assert format_duration(ms) == natural
    assert format_duration(ms, precise=True) == precise
