"""A reply in the schema's exact shape is accepted in one pass when it breaks no rule (issue 27);
what that pass accepts, and everything it leaves to the full reading, must come out exactly as
the forgiving reading makes it, on every rubric and gate setting, gates chained or not.

The forgiving reading is reached by putting prose before the object (then the reply is no
longer a bare object); it finds the same object and applies every rule from the rubric.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from clinjudge.rubrics import (
    JudgmentParseError,
    Rubric,
    builtin_rubric_names,
    load_rubric,
    parse_judgment,
)


def _variant(base: str, name: str, edit: Any) -> Rubric:
    data = load_rubric(base).model_dump()
    data["name"] = name
    edit(data)
    return Rubric.model_validate(data)


def _strict(data: dict[str, Any]) -> None:
    data["settings"] = {"gate": "strict"}


def _chained(data: dict[str, Any]) -> None:
    by_key = {a["key"]: a for a in data["attributes"]}
    by_key["synthesized"]["gate"] = {"attribute": "abstraction", "null_when": 1}
    by_key["organized"].update(
        nullable=True,
        null_meaning="Not applicable when synthesized is 2.",
        gate={"attribute": "synthesized", "null_when": 2},
    )


def _chained_strict(data: dict[str, Any]) -> None:
    _chained(data)
    _strict(data)


def _gated_likert(data: dict[str, Any]) -> None:
    data["attributes"][-1].update(
        nullable=True,
        null_meaning="Not applicable when correctness is 3.",
        gate={"attribute": "correct", "null_when": 3},
    )


RUBRICS = [load_rubric(name) for name in builtin_rubric_names() if name != "doclens"] + [
    _variant("pdsqi9", "strict", _strict),
    _variant("pdsqi9", "chained", _chained),
    _variant("pdsqi9", "chained-strict", _chained_strict),
    _variant("probsum", "gated-likert", _gated_likert),
]


def _outcome(text: str, rubric: Rubric) -> tuple[str, Any]:
    try:
        parsed = parse_judgment(text, rubric)
    except JudgmentParseError as exc:
        return "error", str(exc)
    return "ok", (
        list(parsed.values.items()),
        parsed.rationales,
        parsed.rationale,
        list(parsed.coerced.items()),
    )


def _reply(rng: random.Random, rubric: Rubric) -> dict[str, Any]:
    gates = {a.gate.attribute for a in rubric.attributes if a.gate is not None}
    attributes = list(rubric.attributes)
    if rng.random() < 0.5:
        rng.shuffle(attributes)
    if rng.random() < 0.05:
        attributes = attributes[: rng.randint(0, len(attributes) - 1)]
    reply: dict[str, Any] = {}
    for attribute in attributes:
        roll = rng.random()
        if attribute.gate is not None or attribute.key in gates:
            # Gates and gated keys at the values that matter: null, 0, the gate's value.
            reply[attribute.key] = rng.choice(
                [None, 0, attribute.min, attribute.max, rng.randint(attribute.min, attribute.max)]
            )
        elif roll < 0.96:
            reply[attribute.key] = rng.randint(attribute.min, attribute.max)
        else:
            reply[attribute.key] = rng.choice([None, -1, 9, True, 2.0, "3", [2]])
    if rng.random() < 0.8:
        reply["rationale"] = rng.choice(["Reasons.", "", None, 7])
    if rng.random() < 0.05:
        reply[rng.choice(["extra", "scores", rubric.attributes[0].name])] = 1
    return reply


@pytest.mark.parametrize("rubric", RUBRICS, ids=lambda r: r.name)
def test_exact_replies_read_as_the_forgiving_reading(rubric: Rubric):
    rng = random.Random(f"exact-{rubric.name}")
    outcomes = {"ok": 0, "error": 0}
    coerced = 0
    for _ in range(2500):
        text = json.dumps(_reply(rng, rubric))
        expected = _outcome(f"My scores follow.\n{text}", rubric)
        assert _outcome(text, rubric) == expected, text
        outcomes[expected[0]] += 1
        coerced += expected[0] == "ok" and bool(expected[1][3])
    # Both sides of every rule were compared: accepted replies (coerced ones too, where the
    # rubric coerces) and rejected ones.
    assert outcomes["ok"] > 300 and outcomes["error"] > 300, outcomes
    gated = any(a.gate is not None for a in rubric.attributes)
    if gated and rubric.settings.gate == "coerce":
        assert coerced > 20


def test_accepted_values_follow_the_rubric_order():
    rubric = load_rubric("pdsqi9")
    reply = {key: 1 for key in reversed(rubric.keys)}
    reply["synthesized"] = 3
    parsed = parse_judgment(json.dumps(reply), rubric)
    assert list(parsed.values) == rubric.keys
    assert parsed.rationales == {} and parsed.rationale is None and parsed.coerced == {}
