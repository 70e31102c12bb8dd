"""Replies in the exact shape the reply schema asks for are read without the forgiving steps
(issue 27); every such reply must come out as the forgiving reading makes it."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from clinjudge.rubrics import JudgmentParseError, load_rubric, parse_judgment

RUBRIC = load_rubric("pdsqi9")


def _outcome(text: str) -> tuple[str, Any]:
    try:
        parsed = parse_judgment(text, RUBRIC)
    except JudgmentParseError as exc:
        return "error", str(exc)
    return "ok", (parsed.values, parsed.rationales, parsed.rationale, parsed.coerced)


def _random_value(rng: random.Random) -> Any:
    return rng.choice(
        [
            rng.randint(-1, 6),
            rng.randint(0, 5),
            rng.randint(0, 5),
            None,
            True,
            False,
            2.0,
            3.5,
            "4",
            "N/A",
            [3],
            {"score": 2, "explanation": "why"},
        ]
    )


def _random_reply(rng: random.Random) -> dict[str, Any]:
    attributes = list(RUBRIC.attributes)
    if rng.random() < 0.5:
        rng.shuffle(attributes)
    if rng.random() < 0.1:
        attributes = attributes[: rng.randint(0, len(attributes))]  # some keys missing
    reply: dict[str, Any] = {}
    for attribute in attributes:
        # Mostly scores on the attribute's scale, so that many replies are accepted.
        if rng.random() < 0.97:
            reply[attribute.key] = rng.randint(int(attribute.min), int(attribute.max))
        else:
            reply[attribute.key] = _random_value(rng)
    if rng.random() < 0.8:
        reply["rationale"] = rng.choice(["Short reasons.", "", None, 3, "x" * 50])
    if rng.random() < 0.1:
        reply[rng.choice(["Accurate", "notes", "scores", "extra", "__rationale__citation"])] = 3
    return reply


def test_exact_shape_reads_as_the_forgiving_reading():
    rng = random.Random(27)
    read_ok = 0
    for _ in range(3000):
        text = json.dumps(_random_reply(rng))
        # Prose before the object: the reply is no longer a bare object, so it takes the
        # forgiving extraction, which finds the same object.
        expected = _outcome(f"Here are my scores:\n{text}")
        assert _outcome(text) == expected, text
        assert _outcome(f"  \n{text}\n ") == expected, text
        read_ok += expected[0] == "ok"
    assert read_ok > 300  # the comparison covered accepted replies, not only rejections


def test_exact_shape_values():
    reply = {
        "citation": 4,
        "accurate": 5,
        "thorough": 3,
        "useful": 4,
        "organized": 2,
        "comprehensible": 5,
        "succinct": 3,
        "abstraction": 0,
        "synthesized": 4,  # the gate says null: read as null, the score kept as coerced
        "voice_summ": 0,
        "voice_note": 1,
        "rationale": "Mostly accurate.",
    }
    parsed = parse_judgment(json.dumps(reply), RUBRIC)
    assert parsed.values == {
        **{k: v for k, v in reply.items() if k != "rationale"},
        "synthesized": None,
    }
    assert parsed.coerced == {"synthesized": 4}
    assert parsed.rationale == "Mostly accurate."
    assert list(parsed.values) == RUBRIC.keys


@pytest.mark.parametrize(
    "text",
    [
        '{"citation": NaN, "accurate": 5}',  # orjson refuses NaN; json reads it
        '{"citation": 4, "accurate": 99999999999999999999999}',  # beyond 64 bits
        '{"citation": 4, "rationale": "</think> {\\"citation\\": 2}"}',  # a reasoning tag
        '{"citation": 4}{"citation": 5}',  # two objects
        '{"citation": true}',  # a boolean is no Likert score
    ],
)
def test_shapes_orjson_or_the_fast_reading_refuse_go_the_forgiving_way(text):
    assert _outcome(text) == _outcome(f"Scores: {text}")
