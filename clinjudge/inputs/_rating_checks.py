"""Checks of one rater's scores of one item against the rubric, as the rating page and the
JSON API receive them (``judge rate serve``): the same rules as a ratings file (known
attributes, points of the scale, null only where the attribute and its gate allow it), with
messages for a person at a form rather than a file and line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from clinjudge.errors import UserError
from clinjudge.rubrics import Rubric

NA_WORDS = {"na", "n/a", "null", "none"}
"""What a form or JSON body may send for "not applicable" (besides JSON null)."""


class RatingRefused(UserError):
    """A save refused, with every reason (one line each)."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def _value(rubric: Rubric, key: str, raw: Any, problems: list[str]) -> tuple[bool, float | None]:
    attribute = rubric.attribute(key)
    scale = f"a whole number from {attribute.min} to {attribute.max}"
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in NA_WORDS):
        return True, None
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        problems.append(f"{attribute.name}: {raw!r} is not a score; it must be {scale}")
        return False, None
    try:
        value = float(raw.strip()) if isinstance(raw, str) else float(raw)
    except ValueError:
        problems.append(f"{attribute.name}: {str(raw)[:40]!r} is not a score; it must be {scale}")
        return False, None
    if not math.isfinite(value) or value != int(value) or int(value) not in attribute.values:
        problems.append(f"{attribute.name}: {raw!r} is outside the scale; it must be {scale}")
        return False, None
    return True, value


def check_item_scores(
    rubric: Rubric,
    given: Mapping[str, Any],
    *,
    complete: bool,
    stored: Mapping[str, float | None] | None = None,
) -> dict[str, float | None]:
    """Validate a rater's scores of one item.

    Args:
        rubric: The rubric of the run.
        given: Attribute key -> score as received (number, numeric text, None or ``na``
            for not applicable).
        complete: Every attribute must be given (the rating page); False lets the JSON API
            send some, the gates then read the rater's stored scores for the others.
        stored: The rater's stored scores of the item (for gates of a partial save).

    Returns:
        Attribute key -> score (None: not applicable), in rubric order.

    Raises:
        RatingRefused: Unknown attributes, scores off the scale, a missing attribute, or N/A
            where the attribute or its gate forbids it.
    """
    problems: list[str] = []
    unknown = [k for k in given if k not in rubric.keys]
    if unknown:
        shown = ", ".join(repr(k[:40]) for k in unknown[:5])
        problems.append(f"unknown attribute(s) {shown}; the rubric's are {', '.join(rubric.keys)}")
    scores: dict[str, float | None] = {}
    for attribute in rubric.attributes:
        if attribute.key not in given:
            if complete:
                problems.append(f"{attribute.name}: not rated")
            continue
        ok, value = _value(rubric, attribute.key, given[attribute.key], problems)
        if ok:
            scores[attribute.key] = value
    known = {**(stored or {}), **scores}
    for key, value in scores.items():
        attribute = rubric.attribute(key)
        gate = attribute.gate
        if gate is not None and gate.attribute in known:
            closed = known[gate.attribute] == gate.null_when
            gating = rubric.attribute(gate.attribute).name
            if closed and value is not None:
                problems.append(f"{attribute.name}: must be N/A when {gating} is {gate.null_when}")
                continue
            if not closed and value is None and known[gate.attribute] is not None:
                problems.append(
                    f"{attribute.name}: N/A only when {gating} is {gate.null_when}; give a score"
                )
                continue
        if value is None and not attribute.nullable:
            problems.append(f"{attribute.name}: N/A is not allowed; give a score")
    if problems:
        raise RatingRefused(problems)
    return scores
