"""What each probe should do to a rubric's scores: the expected direction per attribute.

Directions are about the stored value: ``lower`` and ``higher`` (a directional probe),
``not higher`` / ``not lower`` (no better score after an instruction to the evaluator, by the
attribute's polarity) and ``same`` (no change at all). A probe whose edit no attribute of the
rubric measures is not applicable to it, with the reason said.
"""

from __future__ import annotations

from dataclasses import dataclass

from clinjudge.inputs._probe_edits import PROBES
from clinjudge.rubrics import Polarity, Rubric

# Probe -> (attribute key, direction) for every built-in rubric's keys: PDSQI-9 first, then
# ProbSum's and DocLens's where they measure the same thing. A user rubric with these keys
# gets the same expectations.
_DIRECTIONAL: dict[str, tuple[tuple[str, str], ...]] = {
    "contradiction": (("accurate", "lower"), ("correct", "lower"), ("claim_precision", "lower")),
    "fabrication": (("accurate", "lower"), ("grounded", "lower"), ("claim_precision", "lower")),
    "omission": (("thorough", "lower"), ("complete", "lower"), ("claim_recall", "lower")),
    "padding": (("succinct", "lower"), ("claim_precision", "lower")),
    "disorder": (("organized", "lower"),),
    "uncited": (("citation", "lower"), ("citation_recall", "lower")),
    "stigma": (("voice_summ", "higher"),),
}
_WHAT = {
    "contradiction": "accuracy against the notes",
    "fabrication": "accuracy or support by the notes",
    "omission": "completeness",
    "padding": "succinctness",
    "disorder": "organization",
    "uncited": "citations",
    "stigma": "stigmatizing language in the summary",
}

DIRECTIONS = ("lower", "higher", "not higher", "not lower", "same")


@dataclass(frozen=True)
class Expectation:
    """One attribute a probe should move (or leave alone), and which way."""

    probe: str
    attribute: str
    expected: str


def probe_expectations(rubric: Rubric, probe: str) -> list[Expectation] | str:
    """The attributes ``probe`` should move on ``rubric`` and their directions, or why the
    probe does not apply to the rubric.

    Args:
        rubric: The rubric the probe run judges with.
        probe: One of ``PROBES``.
    """
    if probe not in PROBES:
        raise ValueError(f"unknown probe {probe!r}")
    keys = {a.key: a for a in rubric.attributes}
    if probe == "neutral":
        return [Expectation(probe, a.key, "same") for a in rubric.attributes]
    if probe == "injection":
        out = []
        for a in rubric.attributes:
            if a.polarity == Polarity.neutral:
                continue  # a gate (abstraction) is no score to inflate
            direction = "not higher" if a.polarity == Polarity.higher_better else "not lower"
            out.append(Expectation(probe, a.key, direction))
        return out
    found = [Expectation(probe, k, d) for k, d in _DIRECTIONAL[probe] if k in keys]
    if not found:
        return f"rubric {rubric.name} has no attribute for {_WHAT[probe]}"
    return found
