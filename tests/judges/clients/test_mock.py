"""The ``mock/`` provider: deterministic, rubric-valid, clearly marked as simulated."""

from __future__ import annotations

import asyncio
import json

import pytest

from clinjudge.judges import SIMULATED_NOTICE, CallOutcome, JudgeModel, ModelSettings
from clinjudge.judges.clients import CallConfig
from clinjudge.judges.clients._mock_client import simulated_scores
from clinjudge.rubrics import ChatTurn, Rubric, parse_judgment, render_messages
from tests.factories import make_items


def ask(
    rubric: Rubric, turns: list[ChatTurn], variations: list[str], model: str = "mock/judge"
) -> list[CallOutcome]:
    async def go() -> list[CallOutcome]:
        judge = JudgeModel(ModelSettings(model=model), rubric)
        try:
            return [await judge.generate(turns, CallConfig(variation=v)) for v in variations]
        finally:
            await judge.close()

    return asyncio.run(go())


def check_gate(rubric: Rubric, values: dict) -> None:
    for attribute in rubric.attributes:
        if attribute.gate is not None:
            gated_off = values[attribute.gate.attribute] == attribute.gate.null_when
            assert (values[attribute.key] is None) == gated_off


def test_same_request_and_variation_is_deterministic(pdsqi9):
    turns = render_messages(make_items(1)[0], pdsqi9)
    first = ask(pdsqi9, turns, ["0|1", "0|1"])
    second = ask(pdsqi9, turns, ["0|1"])
    assert first[0].text == first[1].text == second[0].text


def test_variations_items_and_names_differ(pdsqi9):
    items = make_items(2)
    turns = render_messages(items[0], pdsqi9)
    by_variation = {o.text for o in ask(pdsqi9, turns, [f"0|{s}" for s in range(1, 9)])}
    assert len(by_variation) > 1
    other_item = ask(pdsqi9, render_messages(items[1], pdsqi9), ["0|1"])[0].text
    other_name = ask(pdsqi9, turns, ["0|1"], model="mock/other")[0].text
    base = ask(pdsqi9, turns, ["0|1"])[0].text
    assert other_item != base
    assert other_name != base


def test_replies_are_valid_and_marked_simulated(pdsqi9):
    turns = render_messages(make_items(1)[0], pdsqi9)
    outcomes = ask(pdsqi9, turns, [f"7|{s}" for s in range(1, 6)])
    for outcome in outcomes:
        parsed = parse_judgment(outcome.text, pdsqi9)
        check_gate(pdsqi9, parsed.values)
        assert SIMULATED_NOTICE in json.loads(outcome.text)["rationale"]
        assert SIMULATED_NOTICE in (parsed.rationale or "")
        assert outcome.cost_usd == 0.0
        assert outcome.tokens_estimated is False
        assert outcome.prompt_tokens > 0 and outcome.completion_tokens > 0


def test_simulated_scores_always_valid_over_many_seeds(pdsqi9):
    seen: dict[str, set] = {a.key: set() for a in pdsqi9.attributes}
    for seed in range(500):
        values = simulated_scores(pdsqi9, f"seed-{seed}")
        parsed = parse_judgment(json.dumps(values), pdsqi9)
        assert parsed.values == values
        check_gate(pdsqi9, values)
        for attribute in pdsqi9.attributes:
            value = values[attribute.key]
            if value is not None:
                assert attribute.min <= value <= attribute.max
            seen[attribute.key].add(value)
    # Both gate branches and both ends of every binary scale do occur.
    assert seen["abstraction"] == {0, 1}
    assert None in seen["synthesized"]
    assert {0, 1} <= seen["voice_summ"]
    assert len(seen["accurate"]) >= 4


@pytest.mark.parametrize("seed_text", ["", "x", "é🙂"])
def test_simulated_scores_is_a_pure_function(pdsqi9, seed_text):
    assert simulated_scores(pdsqi9, seed_text) == simulated_scores(pdsqi9, seed_text)
