"""JudgeModel and model settings against the fake OpenAI server, over real HTTP on loopback.

Both OpenAI code paths are exercised: our lean ``direct`` aiohttp client (the default when a
``base_url`` is set) and autogen-ext's OpenAI SDK client (``client="autogen"``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic import ValidationError

from clinjudge.judges import (
    CallOutcome,
    JudgeModel,
    ModelConfigError,
    ModelSettings,
    ProviderFault,
    count_message_tokens,
    count_tokens,
)
from clinjudge.judges.clients import Completion, Generation, ModelClient, provider_for
from clinjudge.judges.clients._faults import classify_fault
from clinjudge.judges.clients._settings import Price
from clinjudge.rubrics import ChatTurn, Rubric, parse_judgment, render_messages
from tests.factories import make_items
from tests.fake_openai import PDSQI9_KEYS, FakeOpenAIServer, Fault

pytestmark = pytest.mark.filterwarnings("ignore:Resolved model mismatch:UserWarning")

CLIENTS = ["direct", "autogen"]


@pytest.fixture(scope="module")
def turns(pdsqi9: Rubric) -> list[ChatTurn]:
    return render_messages(make_items(1)[0], pdsqi9)


def settings_for(srv: FakeOpenAIServer, model: str = "openai/local-judge", **kw: Any):
    kw.setdefault("timeout", 5.0)
    return ModelSettings(model=model, base_url=srv.base_url, **kw)


def complete(
    settings: ModelSettings, rubric: Rubric, turns: list[ChatTurn], client: Any = None
) -> CallOutcome:
    async def go() -> CallOutcome:
        model = JudgeModel(settings, rubric, client=client)
        try:
            return await model.generate(turns)
        finally:
            await model.close()

    return asyncio.run(go())


def fault_from(
    srv: FakeOpenAIServer, rubric: Rubric, turns: list[ChatTurn], fault: Fault, **kw: Any
) -> ProviderFault:
    srv.script([fault])
    with pytest.raises(ProviderFault) as info:
        complete(settings_for(srv, **kw), rubric, turns)
    return info.value


def fake_usage(body: dict[str, Any], content: str) -> tuple[int, int]:
    """Token counts as the fake server computes them (whitespace words)."""
    prompt = sum(len(m["content"].split()) for m in body["messages"])
    return prompt, len(content.split())


def bundled_price(name: str) -> tuple[float, float]:
    spec = importlib.util.find_spec("litellm")
    assert spec is not None and spec.origin is not None
    path = Path(spec.origin).parent / "model_prices_and_context_window_backup.json"
    entry = json.loads(path.read_text(encoding="utf-8"))[name]
    return entry["input_cost_per_token"], entry["output_cost_per_token"]


# -- successful calls ---------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_completion_parses_and_uses_api_usage(fake_openai, pdsqi9, turns, client):
    outcome = complete(settings_for(fake_openai, client=client), pdsqi9, turns)

    parsed = parse_judgment(outcome.text, pdsqi9)
    assert sorted(parsed.values) == sorted(PDSQI9_KEYS)
    assert outcome.finish_reason == "stop"
    assert fake_openai.request_count == 1
    body = fake_openai.requests[0]
    assert body["model"] == "local-judge"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert (outcome.prompt_tokens, outcome.completion_tokens) == fake_usage(body, outcome.text)
    assert outcome.tokens_estimated is False
    assert outcome.cost_usd is None  # "local-judge" is in no price map
    assert outcome.latency_s > 0


def test_price_override_sets_cost(fake_openai, pdsqi9, turns):
    price = Price(input_per_mtok=2.0, output_per_mtok=8.0)
    outcome = complete(settings_for(fake_openai, price=price), pdsqi9, turns)
    expected = outcome.prompt_tokens * 2.0 / 1e6 + outcome.completion_tokens * 8.0 / 1e6
    assert outcome.cost_usd == pytest.approx(expected)
    assert outcome.cost_usd > 0


@pytest.mark.parametrize("client", CLIENTS)
def test_cost_from_litellm_bundled_price_map(fake_openai, pdsqi9, turns, client):
    settings = settings_for(fake_openai, "openai/gpt-4o-mini", client=client)
    outcome = complete(settings, pdsqi9, turns)
    assert fake_openai.requests[0]["model"] == "gpt-4o-mini"
    per_in, per_out = bundled_price("gpt-4o-mini")
    expected = outcome.prompt_tokens * per_in + outcome.completion_tokens * per_out
    assert outcome.cost_usd == pytest.approx(expected)
    assert outcome.cost_usd > 0


def test_price_as_names_the_priced_model(fake_openai, pdsqi9, turns):
    outcome = complete(settings_for(fake_openai, price_as="openai/gpt-4o-mini"), pdsqi9, turns)
    per_in, per_out = bundled_price("gpt-4o-mini")
    assert outcome.cost_usd == pytest.approx(
        outcome.prompt_tokens * per_in + outcome.completion_tokens * per_out
    )


@pytest.mark.parametrize("client", CLIENTS)
def test_sampling_args_reach_the_server(fake_openai, pdsqi9, turns, client):
    settings = settings_for(
        fake_openai,
        client=client,
        temperature=0.3,
        top_p=0.9,
        max_tokens=123,
        seed=42,
        json_mode=True,
    )
    complete(settings, pdsqi9, turns)
    body = fake_openai.requests[0]
    assert body["temperature"] == 0.3
    assert body["top_p"] == 0.9
    assert body["max_tokens"] == 123
    assert body["seed"] == 42
    assert body["response_format"] == {"type": "json_object"}
    assert not body.get("stream")


@pytest.mark.parametrize("client", CLIENTS)
def test_paper_defaults_are_sent(fake_openai, pdsqi9, turns, client):
    complete(settings_for(fake_openai, client=client), pdsqi9, turns)
    body = fake_openai.requests[0]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.01, 0.95, 400)
    assert "seed" not in body
    assert "response_format" not in body


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("model", ["openai/o3-mini", "openai/o1", "openai/gpt-5-mini"])
def test_reasoning_models_get_no_temperature_or_top_p(fake_openai, pdsqi9, turns, client, model):
    settings = settings_for(
        fake_openai,
        model,
        client=client,
        temperature=0.3,
        top_p=0.9,
        max_tokens=321,
        seed=5,
        reasoning_effort="low",
    )
    complete(settings, pdsqi9, turns)
    body = fake_openai.requests[0]
    assert "temperature" not in body
    assert "top_p" not in body
    assert body["reasoning_effort"] == "low"
    assert body["seed"] == 5
    # OpenAI's reasoning models reject max_tokens; the cap goes as max_completion_tokens.
    assert "max_tokens" not in body
    assert body["max_completion_tokens"] == 321


# -- faults through the real clients ----------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_rate_limit_is_retryable_with_retry_after(fake_openai, pdsqi9, turns, client):
    fault = fault_from(
        fake_openai, pdsqi9, turns, Fault("rate_limit", retry_after=0.25), client=client
    )
    assert fault.retryable
    assert fault.reason.startswith("rate limited")
    assert fault.retry_after == pytest.approx(0.25, abs=0.01)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("kind", "status"), [("server_error", 500), ("bad_gateway", 502), ("unavailable", 503)]
)
def test_server_errors_are_retryable(fake_openai, pdsqi9, turns, client, kind, status):
    fault = fault_from(fake_openai, pdsqi9, turns, Fault(kind), client=client)
    assert fault.retryable
    assert f"HTTP {status}" in fault.reason
    assert fault.retry_after is None


@pytest.mark.parametrize("client", CLIENTS)
def test_client_error_status_is_not_retryable(fake_openai, pdsqi9, turns, client):
    # The fake server answers 404 for an unknown path: a real 4xx through the real client.
    settings = ModelSettings(
        model="openai/local-judge",
        base_url=fake_openai.base_url + "/nope",
        client=client,
        timeout=5.0,
    )
    with pytest.raises(ProviderFault) as info:
        complete(settings, pdsqi9, turns)
    assert not info.value.retryable
    assert "HTTP 404" in info.value.reason


@pytest.mark.parametrize("client", CLIENTS)
def test_hang_times_out_retryably(fake_openai, pdsqi9, turns, client):
    fault = fault_from(
        fake_openai, pdsqi9, turns, Fault("hang", hang_seconds=3), client=client, timeout=0.3
    )
    assert fault.retryable
    assert fault.reason == "timed out"


@pytest.mark.parametrize("client", CLIENTS)
def test_reset_is_a_retryable_connection_failure(fake_openai, pdsqi9, turns, client):
    fault = fault_from(fake_openai, pdsqi9, turns, Fault("reset"), client=client)
    assert fault.retryable
    assert fault.reason.startswith("connection failed")


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("kind", ["malformed_json", "empty_choices"])
def test_malformed_bodies_are_retryable(fake_openai, pdsqi9, turns, client, kind):
    fault = fault_from(fake_openai, pdsqi9, turns, Fault(kind), client=client)
    assert fault.retryable
    assert fault.reason.startswith("malformed response")


@pytest.mark.parametrize("client", CLIENTS)
def test_truncated_reply_is_an_outcome_not_a_fault(fake_openai, pdsqi9, turns, client):
    fake_openai.script([Fault("truncated")])
    outcome = complete(settings_for(fake_openai, client=client), pdsqi9, turns)
    assert outcome.finish_reason == "length"
    assert outcome.text
    assert outcome.completion_tokens > 0


@pytest.mark.parametrize("client", CLIENTS)
def test_server_recovers_after_each_fault(fake_openai, pdsqi9, turns, client):
    """One model object keeps working after every kind of transport fault."""
    settings = settings_for(fake_openai, client=client, timeout=0.3)
    kinds = ["rate_limit", "server_error", "reset", "malformed_json", "empty_choices"]

    async def go() -> list[str]:
        model = JudgeModel(settings, pdsqi9)
        seen = []
        try:
            for kind in [*kinds, "hang"]:
                fake_openai.script([Fault(kind, hang_seconds=2)])
                with pytest.raises(ProviderFault):
                    await model.generate(turns)
                outcome = await model.generate(turns)
                seen.append(outcome.finish_reason)
        finally:
            await model.close()
        return seen

    assert asyncio.run(go()) == ["stop"] * (len(kinds) + 1)


# -- classify_fault on exceptions built directly ------------------------------------------------


def _response(status: int, headers: dict[str, str] | None = None) -> httpx.Response:
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    return httpx.Response(status, headers=headers or {}, request=request)


@pytest.mark.parametrize(
    ("cls", "status"),
    [
        (openai.BadRequestError, 400),
        (openai.AuthenticationError, 401),
        (openai.PermissionDeniedError, 403),
        (openai.NotFoundError, 404),
        (openai.UnprocessableEntityError, 422),
    ],
)
def test_openai_client_errors_are_not_retryable(cls, status):
    fault = classify_fault(cls("bad request", response=_response(status), body=None))
    assert not fault.retryable
    assert f"HTTP {status}" in fault.reason


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({}, None),
    ],
)
def test_openai_rate_limit_reads_retry_after(headers, expected):
    exc = openai.RateLimitError("slow down", response=_response(429, headers), body=None)
    fault = classify_fault(exc)
    assert fault.retryable
    assert fault.reason.startswith("rate limited")
    assert fault.retry_after == expected


def test_retry_after_http_date_is_converted_to_seconds():
    import email.utils
    import time

    stamp = email.utils.formatdate(time.time() + 30, usegmt=True)
    exc = openai.RateLimitError("slow", response=_response(429, {"retry-after": stamp}), body=None)
    assert 25 <= classify_fault(exc).retry_after <= 31


def test_other_exceptions():
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    assert classify_fault(openai.APITimeoutError(request)).reason == "timed out"
    assert classify_fault(TimeoutError()).retryable
    conn = classify_fault(openai.APIConnectionError(request=request))
    assert conn.retryable and conn.reason.startswith("connection failed")
    assert classify_fault(ConnectionResetError(104, "reset")).retryable
    assert classify_fault(json.JSONDecodeError("x", "", 0)).reason.startswith("malformed")
    unknown = classify_fault(RuntimeError("boom"))
    assert not unknown.retryable and "boom" in unknown.reason
    same = ProviderFault("x", retryable=False)
    assert classify_fault(same) is same


def test_status_code_attribute_without_openai_base():
    class VendorError(Exception):
        status_code = 529
        message = "overloaded"

    fault = classify_fault(VendorError())
    assert fault.retryable and "HTTP 529" in fault.reason


# -- providers that omit usage -----------------------------------------------------------------


class NoUsageServer(FakeOpenAIServer):
    """The fake server, answering without a ``usage`` block (as some local servers do)."""

    def _completion(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        payload = super()._completion(*args, **kwargs)
        payload.pop("usage")
        return payload


class NoUsageClient(ModelClient):
    def __init__(self, reply: str):
        self.reply = reply

    async def generate(self, call: Generation) -> Completion:
        return Completion(self.reply)  # no usage: the call path estimates it


def _assert_estimated(outcome: CallOutcome, turns: list[ChatTurn]) -> None:
    assert outcome.tokens_estimated is True
    assert outcome.prompt_tokens == count_message_tokens([t.content for t in turns])
    assert outcome.completion_tokens == count_tokens(outcome.text)
    assert outcome.prompt_tokens > 100 and outcome.completion_tokens > 10


def test_injected_client_without_usage_is_estimated(pdsqi9, turns):
    reply = json.dumps({k: 1 for k in PDSQI9_KEYS})
    price = Price(input_per_mtok=1.0, output_per_mtok=1.0)
    settings = ModelSettings(
        model="openai/local-judge", base_url="http://127.0.0.1:9/v1", price=price
    )
    outcome = complete(settings, pdsqi9, turns, client=NoUsageClient(reply))
    assert outcome.text == reply
    _assert_estimated(outcome, turns)
    assert outcome.cost_usd == pytest.approx(
        (outcome.prompt_tokens + outcome.completion_tokens) / 1e6
    )


@pytest.mark.parametrize("client", CLIENTS)
def test_server_without_usage_is_estimated(pdsqi9, turns, client):
    with NoUsageServer() as srv:
        outcome = complete(settings_for(srv, client=client), pdsqi9, turns)
        assert "usage" not in json.dumps(srv.requests[0])  # sanity: request side untouched
    parse_judgment(outcome.text, pdsqi9)
    _assert_estimated(outcome, turns)


# -- settings, keys and client selection --------------------------------------------------------


class HeaderRecordingServer(FakeOpenAIServer):
    """The fake server, also recording each request's Authorization header."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.auth: list[str | None] = []

    def _handle_chat(self, handler: Any, body: dict[str, Any]) -> None:
        self.auth.append(handler.headers.get("Authorization"))
        super()._handle_chat(handler, body)


@pytest.mark.parametrize("model", ["gpt-4o-mini", "openai", "openai/", "/gpt-4o", ""])
def test_model_without_provider_is_rejected(model):
    with pytest.raises(ValidationError) as info:
        ModelSettings(model=model)
    message = str(info.value)
    assert "provider/model" in message
    assert "openai/gpt-4o-mini" in message  # the message shows an example


def test_settings_have_no_field_for_a_key():
    with pytest.raises(ValidationError):
        ModelSettings(model="openai/gpt-4o-mini", api_key="sk-should-not-be-accepted")


def test_model_string_parts():
    settings = ModelSettings(model="litellm/anthropic/claude-x")
    assert settings.provider == "litellm"
    assert settings.name == "anthropic/claude-x"
    assert provider_for(ModelSettings(model="mock/judge")).simulated
    assert ModelSettings(model="openai/o3-mini").is_reasoning_model
    assert not ModelSettings(model="openai/gpt-4o").is_reasoning_model


def test_public_dict_never_holds_the_key(monkeypatch, pdsqi9):
    secret = "sk-test-SECRET-0123456789"
    monkeypatch.setenv("MY_JUDGE_KEY", secret)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    settings = ModelSettings(model="openai/gpt-4o-mini", api_key_env="MY_JUDGE_KEY")
    JudgeModel(settings, pdsqi9)  # builds a client holding the key
    public = settings.public_dict()
    assert public["api_key_env"] == "MY_JUDGE_KEY"
    assert secret not in json.dumps(public)
    assert secret not in settings.model_dump_json()


@pytest.mark.parametrize("client", CLIENTS)
def test_api_key_comes_from_the_named_env_var(monkeypatch, pdsqi9, turns, client):
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-from-env-42")
    with HeaderRecordingServer() as srv:
        complete(settings_for(srv, client=client, api_key_env="MY_JUDGE_KEY"), pdsqi9, turns)
    assert srv.auth == ["Bearer sk-from-env-42"]


@pytest.mark.parametrize("client", CLIENTS)
def test_local_server_needs_no_key(monkeypatch, pdsqi9, turns, client):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with HeaderRecordingServer() as srv:
        outcome = complete(settings_for(srv, client=client), pdsqi9, turns)
    assert outcome.finish_reason == "stop"
    assert srv.auth[0] in (None, "Bearer not-needed")


def test_missing_key_for_api_openai_com_is_a_config_error(monkeypatch, pdsqi9):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY"):
        JudgeModel(ModelSettings(model="openai/gpt-4o-mini"), pdsqi9)
    monkeypatch.delenv("MY_MISSING_KEY", raising=False)
    with pytest.raises(ModelConfigError, match="MY_MISSING_KEY"):
        JudgeModel(ModelSettings(model="openai/gpt-4o-mini", api_key_env="MY_MISSING_KEY"), pdsqi9)


def test_other_config_errors(monkeypatch, pdsqi9):
    with pytest.raises(ModelConfigError, match="base_url"):
        JudgeModel(ModelSettings(model="openai/local-judge", client="direct"), pdsqi9)
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT", raising=False)
    with pytest.raises(ModelConfigError, match="AZURE_OPENAI_ENDPOINT"):
        JudgeModel(ModelSettings(model="azure/my-deployment"), pdsqi9)


def test_client_selection(monkeypatch, pdsqi9):
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    from clinjudge.judges.clients._direct_client import DirectClient
    from clinjudge.judges.clients._litellm_client import LiteLLMClient
    from clinjudge.judges.clients._mock_client import MockClient
    from clinjudge.judges.clients._sdk_client import SdkClient

    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    url = "http://127.0.0.1:9/v1"

    def kind(**kw: Any) -> type:
        client = JudgeModel(ModelSettings(**kw), pdsqi9).client
        # autogen-ext's clients sit behind our edge of them.
        return type(client.sdk_client) if isinstance(client, SdkClient) else type(client)

    assert kind(model="openai/x", base_url=url) is DirectClient
    assert kind(model="openai/x", base_url=url, client="autogen") is OpenAIChatCompletionClient
    assert kind(model="openai/gpt-4o-mini") is OpenAIChatCompletionClient
    assert kind(model="mock/judge") is MockClient
    assert kind(model="anthropic/claude-x") is LiteLLMClient
