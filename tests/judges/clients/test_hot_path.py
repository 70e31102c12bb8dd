"""The direct client's hot path (issue 27): work done once per run stays done once, and the
shortcuts taken on every call keep the behaviour of the long way."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from clinjudge.judges import JudgeModel, ModelSettings, ProviderFault
from clinjudge.judges.clients import _structured
from clinjudge.judges.clients._model import build_client
from clinjudge.judges.clients._settings import Price
from clinjudge.judges.workflows._single import judge_single_sample
from clinjudge.rubrics import ChatTurn, Rubric, rubric_json_schema
from tests.factories import make_items
from tests.fake_openai import FakeOpenAIServer, Fault
from tests.model_requests import ask


def _settings(srv: FakeOpenAIServer, **kw: Any) -> ModelSettings:
    kw.setdefault("timeout", 5.0)
    return ModelSettings(model="openai/local-judge", base_url=srv.base_url, **kw)


def test_the_reply_schema_is_validated_once_for_a_whole_run(
    fake_openai: FakeOpenAIServer, pdsqi9: Rubric, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rubric object of its own: its shared schema has never been validated before.
    rubric = pdsqi9.model_copy()
    validations: list[Any] = []
    original = _structured.ReplySchema.model_validate.__func__  # type: ignore[attr-defined]

    def counting(cls: type, obj: Any, *args: Any, **kwargs: Any) -> Any:
        validations.append(obj)
        return original(cls, obj, *args, **kwargs)

    monkeypatch.setattr(_structured.ReplySchema, "model_validate", classmethod(counting))
    items = make_items(6)

    async def go() -> list[str]:
        model = JudgeModel(_settings(fake_openai), rubric)

        try:
            verdicts = [await judge_single_sample(item, rubric, model.generate) for item in items]
        finally:
            await model.close()
        return [v.status for v in verdicts]

    assert asyncio.run(go()) == ["ok"] * len(items)
    assert len(validations) == 1  # not two per call (the workflow's and the client's)
    # Every request still carries the rubric's schema in OpenAI's strict form.
    expected = {
        "type": "json_schema",
        "json_schema": {"name": "pdsqi9", "schema": rubric_json_schema(rubric), "strict": True},
    }
    assert len(fake_openai.requests) == len(items)
    for body in fake_openai.requests:
        assert body["response_format"] == expected
        assert "json_schema" not in body


def test_a_standalone_direct_client_still_times_out_by_itself(pdsqi9: Rubric) -> None:
    # Under JudgeModel the call is bounded by the model; a client built alone keeps its own bound.
    with FakeOpenAIServer(faults=[Fault("hang", hang_seconds=5.0)]) as srv:
        client = build_client(_settings(srv, timeout=0.3), pdsqi9)

        async def go() -> BaseException:
            try:
                await ask(client, "hi")
            except BaseException as exc:  # noqa: BLE001 - the fault is what we inspect
                return exc
            finally:
                await client.close()
            raise AssertionError("a hanging server answered")

        fault = asyncio.run(asyncio.wait_for(go(), timeout=4.0))
    assert isinstance(fault, ProviderFault)
    assert fault.reason == "timed out" and fault.timed_out


def test_a_price_set_on_new_settings_prices_the_next_call(
    fake_openai: FakeOpenAIServer, pdsqi9: Rubric
) -> None:
    # Prices are looked up once per settings object: replacing the settings must be seen.
    turns = [ChatTurn("user", "Grade this.")]

    async def go() -> tuple[float | None, float | None, int, int]:
        model = JudgeModel(_settings(fake_openai), pdsqi9)
        try:
            unpriced = await model.generate(turns)
            model.settings = model.settings.model_copy(
                update={"price": Price(input_per_mtok=2.0, output_per_mtok=8.0)}
            )
            priced = await model.generate(turns)
        finally:
            await model.close()
        return unpriced.cost_usd, priced.cost_usd, priced.prompt_tokens, priced.completion_tokens

    unpriced, priced, prompt, completion = asyncio.run(go())
    assert unpriced is None  # a local model has no known price
    assert priced == pytest.approx(prompt * 2.0 / 1e6 + completion * 8.0 / 1e6)


@pytest.mark.parametrize("size", [1000, 64 * 1024 - 1, 64 * 1024, 3 * 64 * 1024 + 7])
def test_a_reply_of_declared_length_is_read_whole(size: int, pdsqi9: Rubric) -> None:
    # A reply with Content-Length is read in one piece; it must come out byte for byte, at
    # any size around the chunk the capped reader uses otherwise.
    content = "x" * size

    with FakeOpenAIServer(responder=lambda body: content) as srv:

        async def go() -> str:
            model = JudgeModel(_settings(srv, max_reply_bytes=4 * size + 4096), pdsqi9)
            try:
                outcome = await model.generate([ChatTurn("user", "hi")])
            finally:
                await model.close()
            return outcome.text

        assert asyncio.run(go()) == content


def test_a_declared_length_over_the_cap_is_refused(pdsqi9: Rubric) -> None:
    with FakeOpenAIServer(responder=lambda body: "y" * 50_000) as srv:

        async def go() -> ProviderFault:
            model = JudgeModel(_settings(srv, max_reply_bytes=10_000), pdsqi9)
            try:
                with pytest.raises(ProviderFault) as info:
                    await model.generate([ChatTurn("user", "hi")])
            finally:
                await model.close()
            return info.value

        fault = asyncio.run(go())
    assert "reply too large" in fault.reason and "10000" in fault.reason
    assert not fault.retryable
