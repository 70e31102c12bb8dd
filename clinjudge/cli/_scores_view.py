"""Rendering of a run's final scores per attribute for `judge runs show` (Likert and binary
rubrics; DocLens runs have their own table)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    # Only for annotations: `judge runs show` loads the analysis when it has scores to show.
    from clinjudge.analysis import ScoreDistribution

BARS = "▁▂▃▄▅▆▇█"
"""Eight heights of a sparkline bar, lowest first."""
EMPTY = "·"
"""A scale point no item got (a lowest bar would read as "a few")."""


def sparkline(counts: list[int]) -> str:
    """One character per scale point, its height proportional to the count (the largest count
    is a full block; any count above zero at least the lowest bar; zero a dot).

    Args:
        counts: Items per scale point, lowest point first.
    """
    top = max(counts, default=0)
    out = []
    for count in counts:
        if count <= 0 or top <= 0:
            out.append(EMPTY)
        else:
            # Rounded up: a count of 1 next to 1000 still shows.
            level = -(-count * len(BARS) // top) - 1
            out.append(BARS[max(0, min(level, len(BARS) - 1))])
    return "".join(out)


def point_counts(entry: ScoreDistribution) -> list[int]:
    """Items at each scale point of one attribute, from its ``min`` to its ``max``.

    Args:
        entry: One attribute of :func:`clinjudge.analysis.score_distributions`.
    """
    return [entry.counts.get(float(v), 0) for v in range(entry.min, entry.max + 1)]


def score_summary(distributions: Sequence[ScoreDistribution]) -> list[dict[str, Any]]:
    """What `judge runs show --json` prints under ``scores``: per attribute on a point scale,
    ``n``, ``mean``, ``median``, ``null``, ``failed`` and ``counts`` (scale point -> items, every
    point of the scale listed).

    Args:
        distributions: What :func:`clinjudge.analysis.score_distributions` returns.
    """
    out = []
    for entry in distributions:
        if entry.scale == "proportion":
            continue  # computed shares (DocLens): no scale points to count
        points = range(entry.min, entry.max + 1)
        out.append(
            {
                "attribute": entry.key,
                "scale": entry.scale,
                "n": entry.n,
                "mean": entry.mean,
                "median": entry.median,
                "null": entry.null,
                "failed": entry.failed,
                "counts": dict(zip((str(p) for p in points), point_counts(entry), strict=True)),
            }
        )
    return out


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def scores_table(summary: list[dict[str, Any]]) -> Table:
    """Final scores per attribute: n, mean, median, the distribution as a one-line bar over the
    scale points (lowest left), then nulls and failed judgments.

    Args:
        summary: What :func:`score_summary` returns.
    """
    table = Table(title="final scores per attribute")
    table.add_column("attribute", overflow="fold")
    for column in ("n", "mean", "median"):
        table.add_column(column, justify="right")
    table.add_column("distribution", no_wrap=True)
    for column in ("null", "failed"):
        table.add_column(column, justify="right")
    for entry in summary:
        points = list(entry["counts"])
        bar = f"{points[0]} {sparkline(list(entry['counts'].values()))} {points[-1]}"
        table.add_row(
            escape(entry["attribute"]),
            str(entry["n"]),
            _num(entry["mean"]),
            _num(entry["median"]),
            bar,
            str(entry["null"]),
            str(entry["failed"]),
        )
    table.caption = "distribution: items per scale point, lowest point left; · none"
    return table
