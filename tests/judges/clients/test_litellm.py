"""The litellm adapter, through litellm's OpenAI route, against the fake server on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from clinjudge.judges import CallOutcome, JudgeModel, ModelSettings, ProviderFault
from clinjudge.judges.clients._litellm_client import LiteLLMClient
from clinjudge.rubrics import ChatTurn, Rubric, parse_judgment, render_messages
from tests.factories import make_items
from tests.fake_openai import PDSQI9_KEYS, FakeOpenAIServer, Fault
from tests.model_requests import ask_now


@pytest.fixture(autouse=True)
def _no_openai_key(monkeypatch):
    # A local OpenAI-compatible server needs no key; the adapter must not require one.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture(scope="module")
def turns(pdsqi9: Rubric) -> list[ChatTurn]:
    return render_messages(make_items(1)[0], pdsqi9)


def words(text: str) -> int:
    return len(text.split())


def judge(srv: FakeOpenAIServer, rubric: Rubric, turns: list[ChatTurn], **kw: Any) -> CallOutcome:
    kw.setdefault("timeout", 10.0)
    settings = ModelSettings(model="litellm/openai/local-judge", base_url=srv.base_url, **kw)

    async def go() -> CallOutcome:
        model = JudgeModel(settings, rubric)
        assert isinstance(model.client, LiteLLMClient)
        try:
            return await model.generate(turns)
        finally:
            await model.close()

    return asyncio.run(go())


def test_adapter_direct_use(fake_openai):
    client = LiteLLMClient(
        "openai/local-judge", api_base=fake_openai.base_url, api_key="sk-local", timeout=10
    )
    result = ask_now(client, "You grade.", "grade this")
    assert result.text and not result.tool_calls
    assert result.finish_reason == "stop"
    assert result.prompt_tokens == words("You grade.") + words("grade this")
    assert result.completion_tokens == words(result.text)
    assert fake_openai.requests[0]["model"] == "local-judge"


def test_judge_model_via_litellm(fake_openai, pdsqi9, turns):
    outcome = judge(fake_openai, pdsqi9, turns, seed=11, temperature=0.2, top_p=0.8, max_tokens=77)
    parsed = parse_judgment(outcome.text, pdsqi9)
    assert sorted(parsed.values) == sorted(PDSQI9_KEYS)
    body = fake_openai.requests[0]
    assert body["model"] == "local-judge"
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (
        0.2,
        0.8,
        77,
        11,
    )
    assert outcome.prompt_tokens == sum(words(m["content"]) for m in body["messages"])
    assert outcome.completion_tokens == words(outcome.text)
    assert outcome.tokens_estimated is False
    assert outcome.cost_usd is None


def test_litellm_rate_limit_is_retryable_with_retry_after(fake_openai, pdsqi9, turns):
    fake_openai.script([Fault("rate_limit", retry_after=0.3)])
    with pytest.raises(ProviderFault) as info:
        judge(fake_openai, pdsqi9, turns)
    assert info.value.retryable
    assert info.value.reason.startswith("rate limited")
    assert info.value.retry_after == pytest.approx(0.3, abs=0.01)


@pytest.mark.parametrize("kind", ["server_error", "unavailable", "reset", "empty_choices"])
def test_litellm_transient_faults_are_retryable(fake_openai, pdsqi9, turns, kind):
    fake_openai.script([Fault(kind)])
    with pytest.raises(ProviderFault) as info:
        judge(fake_openai, pdsqi9, turns)
    assert info.value.retryable
    assert fake_openai.request_count == 1  # the fault came from the server, not from config


def test_litellm_hang_times_out(fake_openai, pdsqi9, turns):
    judge(fake_openai, pdsqi9, turns)  # warm litellm up so the short timeout measures the hang
    fake_openai.script([Fault("hang", hang_seconds=3)])
    with pytest.raises(ProviderFault) as info:
        judge(fake_openai, pdsqi9, turns, timeout=0.5)
    assert info.value.retryable
    assert info.value.reason == "timed out"


def test_litellm_truncation_is_an_outcome(fake_openai, pdsqi9, turns):
    fake_openai.script([Fault("truncated")])
    assert judge(fake_openai, pdsqi9, turns).finish_reason == "length"


def test_litellm_client_error_is_not_retryable(pdsqi9, turns):
    with FakeOpenAIServer() as srv:
        settings = ModelSettings(
            model="litellm/openai/local-judge", base_url=srv.base_url + "/nope", timeout=10.0
        )

        async def go() -> None:
            model = JudgeModel(settings, pdsqi9)
            try:
                await model.generate(turns)
            finally:
                await model.close()

        with pytest.raises(ProviderFault) as info:
            asyncio.run(go())
    assert not info.value.retryable
    assert "404" in info.value.reason
