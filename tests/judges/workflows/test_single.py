"""The single-judge workflow against the fake server: verdicts, repair re-asks, few-shot draws."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from clinjudge.judges import (
    CallOutcome,
    JudgeModel,
    ModelSettings,
    ProviderFault,
    SampleVerdict,
    draw_shots,
)
from clinjudge.judges.clients import CallConfig
from clinjudge.judges.workflows import repair_max_tokens
from clinjudge.judges.workflows._single import judge_single_sample
from clinjudge.rubrics import (
    ChatTurn,
    Item,
    JudgmentParseError,
    Rubric,
    Shot,
    parse_judgment,
    render_messages,
    render_repair,
)
from tests.factories import make_items
from tests.fake_openai import FakeOpenAIServer, Fault, pdsqi9_scores

VALID = {
    "citation": 4,
    "accurate": 5,
    "thorough": 3,
    "useful": 4,
    "organized": 4,
    "comprehensible": 5,
    "succinct": 3,
    "abstraction": 1,
    "synthesized": 4,
    "voice_summ": 0,
    "voice_note": 0,
    "rationale": "Accurate and well cited.",
}
MISSING_KEYS = json.dumps({"citation": 4, "accurate": 5})
OUT_OF_RANGE = json.dumps({**VALID, "accurate": 9})
REPAIR_PREFIX = "Your reply could not be accepted"


def judge_with_server(
    srv: FakeOpenAIServer, rubric: Rubric, item: Item, **kw: Any
) -> SampleVerdict:
    settings = ModelSettings(model="openai/local-judge", base_url=srv.base_url, timeout=5.0)

    async def go() -> SampleVerdict:
        model = JudgeModel(settings, rubric)
        try:
            return await judge_single_sample(item, rubric, model.generate, **kw)
        finally:
            await model.close()

    return asyncio.run(go())


@pytest.fixture
def item() -> Item:
    return make_items(1)[0]


def test_valid_reply_is_ok(fake_openai, pdsqi9, item):
    verdict = judge_with_server(fake_openai, pdsqi9, item)
    assert verdict.status == "ok"
    assert verdict.error is None and verdict.raw_text is None
    expected = pdsqi9_scores(render_messages(item, pdsqi9)[-1].content)
    assert verdict.values == {k: v for k, v in expected.items() if k != "rationale"}
    assert verdict.rationale == expected["rationale"]
    assert [t.role for t in verdict.transcript] == ["system", "user", "assistant"]
    assert fake_openai.request_count == 1


@pytest.mark.parametrize("invalid", [MISSING_KEYS, OUT_OF_RANGE, "I think it is fine."])
def test_invalid_then_valid_after_repair(fake_openai, pdsqi9, item, invalid):
    fake_openai.script([invalid, VALID])
    verdict = judge_with_server(fake_openai, pdsqi9, item)

    assert verdict.status == "ok"
    assert verdict.values == {k: v for k, v in VALID.items() if k != "rationale"}
    assert fake_openai.request_count == 2
    roles = [t.role for t in verdict.transcript]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert verdict.transcript[2].content == invalid
    repair = verdict.transcript[3].content
    assert repair.startswith(REPAIR_PREFIX)
    # The re-ask went over the wire with the whole conversation.
    sent = fake_openai.requests[1]["messages"]
    assert [m["role"] for m in sent] == roles[:4]
    assert sent[2]["content"] == invalid
    assert sent[3]["content"] == repair


def test_invalid_twice_with_one_repair_fails_with_raw_text(fake_openai, pdsqi9, item):
    fake_openai.script([MISSING_KEYS, OUT_OF_RANGE])
    verdict = judge_with_server(fake_openai, pdsqi9, item, max_repairs=1)

    assert verdict.status == "failed"
    assert verdict.values == {}
    assert verdict.error.startswith("invalid reply after 1 repair(s): ")
    assert "accurate" in verdict.error  # names what was wrong with the last reply
    assert verdict.raw_text == OUT_OF_RANGE
    assert fake_openai.request_count == 2
    # The transcript ends with the last reply: no unsent repair request is recorded.
    assert [t.role for t in verdict.transcript] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def test_max_repairs_zero_and_two(fake_openai, pdsqi9, item):
    fake_openai.script([MISSING_KEYS])
    verdict = judge_with_server(fake_openai, pdsqi9, item, max_repairs=0)
    assert verdict.status == "failed" and fake_openai.request_count == 1
    assert verdict.error.startswith("invalid reply after 0 repair(s)")

    fake_openai.script([MISSING_KEYS, MISSING_KEYS, VALID])
    verdict = judge_with_server(fake_openai, pdsqi9, item, max_repairs=2)
    assert verdict.status == "ok" and fake_openai.request_count == 4
    repairs = [t for t in verdict.transcript if t.content.startswith(REPAIR_PREFIX)]
    assert len(repairs) == 2


def test_truncated_twice_says_so(fake_openai, pdsqi9, item):
    fake_openai.script([Fault("truncated"), Fault("truncated")])
    verdict = judge_with_server(fake_openai, pdsqi9, item)
    assert verdict.status == "failed"
    assert "finish_reason=length" in verdict.error
    assert verdict.raw_text  # the cut-off reply is kept


def test_wrong_keys_from_server_gets_repaired(fake_openai, pdsqi9, item):
    fake_openai.script([Fault("wrong_keys")])  # then the default valid responder
    verdict = judge_with_server(fake_openai, pdsqi9, item)
    assert verdict.status == "ok"
    assert fake_openai.request_count == 2
    assert "citations_score" in verdict.transcript[2].content
    assert verdict.transcript[3].content.startswith(REPAIR_PREFIX)


def _raising_call(after: list[str]):
    """A call that answers with ``after`` in turn, then raises a ProviderFault."""
    replies = list(after)

    async def call(turns: list[ChatTurn], config: CallConfig) -> CallOutcome:
        if not replies:
            raise ProviderFault("HTTP 503: overloaded", retryable=True)
        return CallOutcome(replies.pop(0), "stop", 10, 5, False, None, 0.01)

    return call


def test_provider_fault_fails_the_sample(pdsqi9, item):
    verdict = asyncio.run(judge_single_sample(item, pdsqi9, _raising_call([])))
    assert verdict.status == "failed"
    assert verdict.error == "provider: HTTP 503: overloaded"
    assert verdict.raw_text is None
    assert [t.role for t in verdict.transcript] == ["system", "user"]


def test_provider_fault_during_repair_keeps_the_last_reply(pdsqi9, item):
    verdict = asyncio.run(judge_single_sample(item, pdsqi9, _raising_call([MISSING_KEYS])))
    assert verdict.status == "failed"
    assert verdict.error.startswith("provider: ")
    assert verdict.raw_text == MISSING_KEYS


def test_explanations_and_shots_reach_the_prompt(fake_openai, pdsqi9, item):
    shot_item = make_items(1, prefix="shot")[0]
    shot_scores = {k: v for k, v in VALID.items() if k != "rationale"}
    shots = [Shot(item=shot_item, scores=shot_scores)]
    judge_with_server(fake_openai, pdsqi9, item, shots=shots, explanations=True)
    sent = fake_openai.requests[0]["messages"]
    expected = render_messages(item, pdsqi9, shots, explanations=True)
    assert [m["content"] for m in sent] == [t.content for t in expected]
    assert shot_item.summary in sent[-1]["content"]


def test_repair_text_is_the_rubric_repair(fake_openai, pdsqi9, item):
    fake_openai.script([MISSING_KEYS, VALID])
    verdict = judge_with_server(fake_openai, pdsqi9, item)
    with pytest.raises(JudgmentParseError) as info:
        parse_judgment(MISSING_KEYS, pdsqi9)
    assert verdict.transcript[3].content == render_repair(str(info.value), pdsqi9)


# -- few-shot draws -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool() -> list[Shot]:
    scores = {k: v for k, v in VALID.items() if k != "rationale"}
    return [Shot(item=i, scores=scores) for i in make_items(12)]


def ids(shots: list[Shot]) -> list[str]:
    return [s.item.id for s in shots]


def test_draw_is_reproducible(pool):
    a = draw_shots(pool, 5, seed=3, item_id="item-0004", sample=2)
    b = draw_shots(list(pool), 5, seed=3, item_id="item-0004", sample=2)
    assert ids(a) == ids(b)
    assert len(set(ids(a))) == 5


def test_draw_never_includes_the_item_itself(pool):
    for item in make_items(12):
        for sample in range(1, 6):
            drawn = draw_shots(pool, 11, seed=0, item_id=item.id, sample=sample)
            assert item.id not in ids(drawn)
            assert len(drawn) == 11


def test_draw_differs_across_samples_seeds_and_items(pool):
    per_sample = {
        tuple(ids(draw_shots(pool, 3, seed=0, item_id="x", sample=s))) for s in range(1, 8)
    }
    assert len(per_sample) > 1
    per_seed = {tuple(ids(draw_shots(pool, 3, seed=s, item_id="x", sample=1))) for s in range(8)}
    assert len(per_seed) > 1


def test_draw_errors_when_pool_too_small(pool):
    small = pool[:3]
    with pytest.raises(ValueError, match="need 3"):
        draw_shots(small, 3, seed=0, item_id=small[0].item.id, sample=1)
    assert len(draw_shots(small, 3, seed=0, item_id="not-in-pool", sample=1)) == 3
    assert draw_shots(small, 0, seed=0, item_id="x", sample=1) == []
    assert draw_shots([], 0, seed=0, item_id="x", sample=1) == []


# -- replies cut at the token limit (issue #28) ----------------------------------------------------


def _judge_capped(srv: FakeOpenAIServer, rubric: Rubric, item: Item, max_tokens: int, **kw: Any):
    settings = ModelSettings(
        model="openai/local-judge", base_url=srv.base_url, timeout=5.0, max_tokens=max_tokens
    )

    async def go() -> SampleVerdict:
        model = JudgeModel(settings, rubric)
        try:
            return await judge_single_sample(item, rubric, model.generate, **kw)
        finally:
            await model.close()

    return asyncio.run(go())


def _truncates_below(cap: int):
    """A server that cuts every reply generated with fewer than ``cap`` tokens allowed."""
    return lambda index, body: Fault("truncated") if body.get("max_tokens", 0) < cap else None


def test_a_truncated_reply_is_repaired_with_more_room(pdsqi9, item):
    # Under greedy decoding the same cap only writes the same cut-off reply again.
    with FakeOpenAIServer(faults=_truncates_below(100)) as srv:
        verdict = _judge_capped(srv, pdsqi9, item, 64)
        caps = [body["max_tokens"] for body in srv.requests]
    assert verdict.status == "ok"
    assert caps == [64, 128]
    repair = verdict.transcript[3].content
    assert repair.startswith(REPAIR_PREFIX)
    assert "reply truncated at the token limit (max_tokens 64" in repair
    assert "cut off at the token limit" in repair


def test_a_reply_truncated_again_says_so_with_the_cap(pdsqi9, item):
    with FakeOpenAIServer(faults=_truncates_below(10_000)) as srv:
        verdict = _judge_capped(srv, pdsqi9, item, 64, max_repairs=2)
        caps = [body["max_tokens"] for body in srv.requests]
    assert verdict.status == "failed"
    assert caps == [64, 128, 256]  # up to 4x the setting
    assert verdict.error.startswith(
        "invalid reply after 2 repair(s): reply truncated at the token limit (max_tokens 256"
    )


@pytest.mark.parametrize(
    ("cut", "first", "grown"),
    [(64, 64, 128), (400, 400, 800), (800, 400, 1600), (1600, 400, 1600), (2000, 2000, 4000),
     (4000, 2000, 4096), (8000, 8000, 8000), (None, None, None)],
)  # fmt: skip
def test_repair_cap_doubles_within_bounds(cut, first, grown):
    assert repair_max_tokens(cut, first) == grown
