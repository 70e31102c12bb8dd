"""Flag rules as the user writes them: ``attribute <op> value`` on an item's final scores, or
``prm<value`` on its lowest PRM step score. Parsed and checked here, when a run or audit is
prepared; audits and run reports apply them (:mod:`clinjudge.analysis`)."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from clinjudge.errors import UserError
from clinjudge.rubrics import Rubric

PRM_ATTRIBUTE = "prm"
"""Pseudo-attribute of flag rules: an item's lowest PRM step score (from ``prm_steps``)."""
DEFAULT_FLAG_RULES = ("accurate<=2", "voice_summ>=1", "prm<0.5")

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
}
_RULE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*(<=|>=|==|<|>)\s*(-?\d+(?:\.\d+)?)\s*$")


class FlagRuleError(UserError):
    """A flag rule that cannot be parsed or names no attribute of the rubric."""


@dataclass(frozen=True)
class FlagRule:
    """``attribute <op> value``: an item is flagged when its final score satisfies it."""

    attribute: str
    op: str
    value: float

    @property
    def text(self) -> str:
        """The rule as written."""
        return f"{self.attribute}{self.op}{number_text(self.value)}"

    def fires(self, score: float | None) -> bool:
        """Whether a score triggers the rule (a missing score never does)."""
        return score is not None and _OPS[self.op](score, self.value)


def parse_flag_rule(text: str, rubric: Rubric | None = None) -> FlagRule:
    """Parse ``attribute<op>value`` with op one of ``<= >= == < >``; ``prm<0.5`` flags items
    whose lowest PRM step score is below 0.5.

    Args:
        text: The rule.
        rubric: When given, the attribute must be one of its keys (or ``prm``).
    """
    match = _RULE.match(text)
    if not match:
        raise FlagRuleError(
            f"flag rule {text!r}: expected attribute<=value, attribute>=value, attribute==value, "
            "attribute<value or attribute>value (e.g. accurate<=2, prm<0.5)"
        )
    attribute, op, value = match.group(1), match.group(2), float(match.group(3))
    if attribute == PRM_ATTRIBUTE:
        if not 0.0 <= value <= 1.0:
            raise FlagRuleError(f"flag rule {text!r}: a PRM threshold is a probability in [0, 1]")
    elif rubric is not None and attribute not in rubric.keys:
        raise FlagRuleError(
            f"flag rule {text!r}: unknown attribute {attribute!r}; rubric {rubric.name} has "
            f"{', '.join(rubric.keys)} (and {PRM_ATTRIBUTE} for PRM step scores)"
        )
    return FlagRule(attribute, op, value)


def default_flag_rules(rubric: Rubric, prm_used: bool = True) -> list[str]:
    """The default rules that apply to a rubric (an attribute it lacks is skipped).

    Args:
        rubric: The run's rubric.
        prm_used: Whether the run has PRM step scores; without them ``prm<...`` is left out.
    """
    usable = (*rubric.keys, PRM_ATTRIBUTE) if prm_used else tuple(rubric.keys)
    return [rule for rule in DEFAULT_FLAG_RULES if parse_flag_rule(rule).attribute in usable]


def number_text(value: float) -> str:
    """A rule's number as written: ``2``, ``0.5``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
