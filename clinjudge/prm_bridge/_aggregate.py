"""Candidate-level scores from step scores, and best-of-n selection.

``product`` is the sum of log step scores, i.e. the log of the product, as in the clinical-note
PRM's note-level score: a score that is not positive counts as 1e-10 there, and only such a
score (a positive score below 1e-10 keeps its own log); ``min`` is Med-PRM's best-of-n rule and
``last`` its outcome score.
Steps without a score (cut by truncation) are left out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Literal

Aggregate = Literal[
    "product", "min", "last", "mean", "geomean", "median", "max", "sum", "threshold"
]
AGGREGATES: tuple[str, ...] = (
    "product",
    "min",
    "last",
    "mean",
    "geomean",
    "median",
    "max",
    "sum",
    "threshold",
)
DEFAULT_THRESHOLD = 0.5
LOG_FLOOR = 1e-10


def _log(p: float) -> float:
    return math.log(p) if p > 0 else math.log(LOG_FLOOR)


def aggregate(scores: Sequence[float | None], how: str, threshold: float = DEFAULT_THRESHOLD):
    """One candidate-level value from step scores.

    Args:
        scores: P(correct) per step; None for unscored steps.
        how: One of :data:`AGGREGATES`.
        threshold: For ``threshold``: steps scoring at least this count.

    Returns:
        The value, or None when no step has a score.
    """
    values = [s for s in scores if s is not None]
    if how not in _FUNCTIONS:
        raise ValueError(f"unknown aggregate {how!r}; choose from {', '.join(AGGREGATES)}")
    if not values:
        return None
    if how == "threshold":
        return float(sum(v >= threshold for v in values))
    return _FUNCTIONS[how](values)


_FUNCTIONS: dict[str, Callable[[list[float]], float]] = {
    "product": lambda v: math.fsum(_log(p) for p in v),
    "min": min,
    "last": lambda v: v[-1],
    "mean": statistics.fmean,
    "geomean": lambda v: math.exp(math.fsum(_log(p) for p in v) / len(v)),
    "median": statistics.median,
    "max": max,
    "sum": math.fsum,
    "threshold": lambda v: 0.0,  # computed in aggregate(), which knows the threshold
}


def all_aggregates(
    scores: Sequence[float | None], threshold: float = DEFAULT_THRESHOLD
) -> dict[str, float | None]:
    """Every aggregate of one candidate's step scores."""
    return {how: aggregate(scores, how, threshold) for how in AGGREGATES}


def best_candidate(values: Sequence[tuple[str, float | None]]) -> int | None:
    """Index of the best candidate: highest value, ties to the earliest; None if none scored.

    Args:
        values: (candidate, aggregate value) in input order.
    """
    best: int | None = None
    for index, (_, value) in enumerate(values):
        if value is None:
            continue
        if best is None or value > values[best][1]:  # type: ignore[operator]
            best = index
    return best
