"""The demo's timeline picture: each partition's segments along time, coloured by what became of them.

One row per topic-partition; a segment is a bar from its smallest to its largest record timestamp (the
catalog's `base_timestamp` and `largest_timestamp`), so late records show as overlapping bars. Bars
alternate between two lanes so that overlaps stay visible; what compaction wrote sits on a thin lane
below. A topic's retention cut-off (now - retention.ms) is a dashed line across its rows. The axis
stops shortly after `now`: a segment reaching far beyond (a far-future timestamp) ends in an arrow
labelled with its largest timestamp, instead of squeezing the rest of the picture into a corner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kernel.times import format_time

if TYPE_CHECKING:
    from matplotlib.axes import Axes

KEPT, RETENTION, COMPACTED, OUTPUT = "kept", "deleted by retention", "replaced by compaction", "written by compaction"
COLOURS = {KEPT: "#3a923a", RETENTION: "#d62728", COMPACTED: "#ff9f1c", OUTPUT: "#1f77b4"}
HOUR_MS = 3_600_000
MARGIN_AFTER_NOW_MS = 18 * HOUR_MS


@dataclass(frozen=True)
class SegmentBar:
    partition: str
    log_key: str
    base_offset: int
    next_offset: int
    first_ms: int
    last_ms: int
    fate: str
    held_back: bool = False


def _x(ms: int) -> float:
    from matplotlib import dates

    return float(dates.date2num(datetime.fromtimestamp(ms / 1000, UTC)))


def draw_timeline(bars: Sequence[SegmentBar], partitions: Sequence[str], cutoffs: Mapping[str, int], now_ms: int,
                  path: Path, topic_labels: Mapping[str, str] | None = None) -> Path:
    """Write the PNG to `path` (see the module docstring); `cutoffs` maps a topic to its retention cut-off."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import dates
    from matplotlib import pyplot as plt

    rows = {name: i for i, name in enumerate(partitions)}
    right_ms = now_ms + MARGIN_AFTER_NOW_MS
    left_ms = min((b.first_ms for b in bars), default=now_ms) - 3 * HOUR_MS
    fig, ax = plt.subplots(figsize=(15, 1.15 * len(partitions) + 2.2), dpi=110)
    for name, row in rows.items():
        own = sorted((b for b in bars if b.partition == name), key=lambda b: b.base_offset)
        for lane, bar in enumerate(b for b in own if b.fate != OUTPUT):
            _draw_bar(ax, bar, row, lane % 2, right_ms)
        for bar in (b for b in own if b.fate == OUTPUT):
            _draw_bar(ax, bar, row, 2, right_ms)
    _draw_cutoffs(ax, cutoffs, partitions, topic_labels or {})
    ax.axvline(_x(now_ms), color="black", linewidth=1.6)
    ax.text(_x(now_ms), -0.78, f" now\n {format_time(now_ms)}", fontsize=9, va="top", ha="left", fontweight="bold")
    ax.set_xlim(_x(left_ms), _x(right_ms))
    ax.set_ylim(len(partitions) - 0.4, -0.8)
    ax.set_yticks(range(len(partitions)), partitions, fontsize=10)
    _separate_topics(ax, partitions)
    ax.set_axisbelow(True)
    ax.xaxis.set_major_locator(dates.DayLocator())
    ax.xaxis.set_major_formatter(dates.DateFormatter("%b %d"))
    ax.xaxis.set_minor_locator(dates.HourLocator(byhour=[6, 12, 18]))
    ax.grid(axis="x", which="major", color="#cccccc", linewidth=0.8)
    ax.grid(axis="x", which="minor", color="#eeeeee", linewidth=0.5)
    ax.set_xlabel("record timestamps (UTC)")
    ax.set_title("klake demo: each segment from its smallest to its largest record timestamp, coloured by what "
                 "retention and compaction did to it", fontsize=12)
    _legend(ax)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


LANES = ((-0.17, 0.22), (0.07, 0.22), (0.3, 0.12))  # (offset from the row, height): two for the log, one for output


def _draw_bar(ax: Axes, bar: SegmentBar, row: int, lane: int, right_ms: int) -> None:
    """A segment on a lane of its row; clipped at the right edge with an arrow and its real end."""
    offset, height = LANES[lane]
    y = row + offset
    end = min(bar.last_ms, right_ms)
    width = max(_x(end) - _x(bar.first_ms), 0.01)
    ax.barh(y, width, left=_x(bar.first_ms), height=height, color=COLOURS[bar.fate], edgecolor="black",
            linewidth=0.4, hatch="//" if bar.held_back else None, align="center")
    if bar.last_ms > right_ms:
        ax.annotate("", xy=(_x(right_ms), y), xytext=(_x(right_ms) - 0.12, y),
                    arrowprops={"arrowstyle": "-|>", "color": "black", "linewidth": 1.2})
        ax.text(_x(right_ms) - 0.14, y - height / 2 - 0.03,
                f"largest timestamp {format_time(bar.last_ms)} (far future)", fontsize=8, ha="right", va="bottom")
    if bar.held_back:
        ax.text(_x(bar.first_ms) + 0.05, y, "held back by its far-future timestamp: time retention stops here "
                "(KAFKA-4340)", fontsize=8, ha="left", va="center", color="#8b0000",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1})


def _draw_cutoffs(ax: Axes, cutoffs: Mapping[str, int], partitions: Sequence[str],
                  labels: Mapping[str, str]) -> None:
    """A dashed retention cut-off across each topic's rows, with the topic's setting beside it."""
    for topic, cutoff in cutoffs.items():
        rows = [i for i, name in enumerate(partitions) if name.rsplit("-", 1)[0] == topic]
        if not rows:
            continue
        ax.vlines(_x(cutoff), min(rows) - 0.45, max(rows) + 0.45, colors="#444444", linestyles="--", linewidth=1.4)
        ax.text(_x(cutoff), min(rows) - 0.42, f" cut-off ({labels.get(topic, topic)})", fontsize=8, va="top",
                ha="left", color="#222222", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 1})


def _separate_topics(ax: Axes, partitions: Sequence[str]) -> None:
    topics = [name.rsplit("-", 1)[0] for name in partitions]
    for i in range(1, len(topics)):
        if topics[i] != topics[i - 1]:
            ax.axhline(i - 0.5, color="#999999", linewidth=0.8)


def _legend(ax: Axes) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=colour, edgecolor="black", linewidth=0.4, label=fate) for fate, colour in COLOURS.items()]
    handles += [Patch(facecolor="white", edgecolor="black", hatch="//", label="held back by a future timestamp"),
                Line2D([], [], color="#444444", linestyle="--", label="retention cut-off (now - retention.ms)"),
                Line2D([], [], color="black", linewidth=1.6, label="now (simulated clock)")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4, fontsize=9, frameon=False)
