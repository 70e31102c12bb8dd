"""The provider owns how one request is made (#40): ``JudgeModel`` hands every attempt to the
client its provider built (:meth:`ModelClient.generate`), and a provider may be written as one
plain ``generate`` method, which the contract serves as a client (and the magentic workflow
adapts to AutoGen's interface for its agents)."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from autogen_core.models import CreateResult, UserMessage

from clinjudge.judges.clients import (
    CallConfig,
    CallOutcome,
    ChatMessage,
    Completion,
    Generation,
    JudgeModel,
    ModelClient,
    ModelSettings,
    Provider,
    ProviderFault,
    register_provider,
    reply_schema_for,
)
from clinjudge.judges.clients import _model as model_module
from clinjudge.judges.clients._structured import OutputMode
from clinjudge.judges.clients.providers import _registry
from clinjudge.judges.workflows._magentic_client import AgentClient
from clinjudge.rubrics import STRUCTURED_OUTPUT_KEY, ChatTurn, Rubric

SCHEMA = reply_schema_for("reply", {"type": "object", "properties": {"x": {"type": "integer"}}})
TURNS = [ChatTurn(role="system", content="be brief"), ChatTurn(role="user", content="score it")]


class PlainProvider(Provider):
    """Written in the plain form: remembers each request, answers with a fixed reply."""

    names = ("plain-test",)

    def __init__(self) -> None:
        self.calls: list[Generation] = []
        self.refuse_schemas = False

    async def generate(self, call: Generation) -> Completion:
        self.calls.append(call)
        if self.refuse_schemas and call.mode == "json_schema":
            raise ProviderFault(
                "HTTP 400: response_format json_schema is not supported", retryable=False
            )
        return Completion('{"x": 1}', prompt_tokens=12, completion_tokens=3)


class ModeClient(ModelClient):
    """A client of its own: sees every attempt's output mode, answers through the provider."""

    def __init__(self, provider: PlainProvider) -> None:
        self.provider = provider
        self.modes: list[OutputMode] = []

    async def generate(self, call: Generation) -> Completion:
        self.modes.append(call.mode)
        return await self.provider.generate(call)


class ClientProvider(PlainProvider):
    """Builds a client of its own."""

    names = ("client-test",)

    def build_client(
        self, settings: ModelSettings, rubric: Rubric, *, bounded: bool = False
    ) -> ModeClient:
        self.client = ModeClient(self)
        return self.client


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Providers registered by a test are gone after it."""
    monkeypatch.setattr(_registry, "_PROVIDERS", dict(_registry._PROVIDERS))
    yield


def _generate(model: JudgeModel, *configs: CallConfig) -> list[CallOutcome]:
    async def go() -> list[CallOutcome]:
        try:
            return [await model.generate(TURNS, config) for config in configs]
        finally:
            await model.close()

    return asyncio.run(go())


def test_a_plain_provider_serves_judge_model_calls(registry: None, pdsqi9: Rubric) -> None:
    provider = register_provider(PlainProvider())
    settings = ModelSettings(model="plain-test/m", temperature=0.3, seed=7)
    config = CallConfig(temperature=0.9, max_tokens=64, variation="7|1")
    model = JudgeModel(settings, pdsqi9)
    [outcome] = _generate(model, config)
    assert (outcome.text, outcome.prompt_tokens, outcome.completion_tokens) == ('{"x": 1}', 12, 3)
    assert not outcome.tokens_estimated and outcome.finish_reason == "stop"
    [call] = provider.calls
    # The call's own config, not one rebuilt from AutoGen's arguments.
    assert call.config is config
    assert call.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "score it"},
    ]
    assert call.rubric is pdsqi9 and call.settings is settings and call.mode == "off"
    # The model's sampling settings, overridden by the call's.
    assert call.args["temperature"] == 0.9 and call.args["seed"] == 7
    assert call.args["max_tokens"] == 64


def test_a_plain_provider_gets_the_schema_and_its_mode(registry: None, pdsqi9: Rubric) -> None:
    provider = register_provider(PlainProvider())
    model = JudgeModel(ModelSettings(model="plain-test/m"), pdsqi9)
    schema_call, json_call = CallConfig(schema=SCHEMA), CallConfig(json_output=True)
    outcomes = _generate(model, schema_call, json_call)
    assert [o.output_mode for o in outcomes] == ["json_schema", "json_object"]
    first, second = provider.calls
    assert (first.mode, first.config.schema) == ("json_schema", SCHEMA)
    assert (second.mode, second.config.schema) == ("json_object", None)
    # The schema travels as the call's, never as a request argument.
    assert STRUCTURED_OUTPUT_KEY not in first.args


def test_every_attempt_goes_through_the_providers_client(registry: None, pdsqi9: Rubric) -> None:
    provider = register_provider(ClientProvider())
    provider.refuse_schemas = True
    model = JudgeModel(ModelSettings(model="client-test/m"), pdsqi9)
    [outcome] = _generate(model, CallConfig(schema=SCHEMA))
    # The refused schema request falls back to JSON mode, each attempt through the client.
    assert provider.client.modes == ["json_schema", "json_object"]
    assert [c.mode for c in provider.calls] == ["json_schema", "json_object"]
    assert outcome.output_mode == "json_object" and model.schema_refused


def test_unknown_usage_is_estimated(registry: None, pdsqi9: Rubric) -> None:
    class Silent(Provider):
        names = ("silent-test",)

        async def generate(self, call: Generation) -> Completion:
            return Completion("no usage here")

    register_provider(Silent())
    [outcome] = _generate(JudgeModel(ModelSettings(model="silent-test/m"), pdsqi9), CallConfig())
    assert outcome.tokens_estimated and outcome.prompt_tokens > 0 and outcome.completion_tokens > 0


def test_a_provider_needs_generate_or_a_client(pdsqi9: Rubric) -> None:
    class Empty(Provider):
        names = ("empty-test",)

    with pytest.raises(NotImplementedError, match="generate or build_client"):
        Empty().build_client(ModelSettings(model="empty-test/m"), pdsqi9)


class _ModelChat:
    """An agent's conversation call straight to a model (the runner's, without records)."""

    def __init__(self, model: JudgeModel) -> None:
        self.model = model

    @property
    def model_info(self) -> Mapping[str, Any]:
        return self.model.client.model_info

    async def __call__(self, messages: Sequence[ChatMessage], config: CallConfig) -> Completion:
        outcome = await self.model.generate_chat(messages, config)
        assert outcome.result is not None
        return outcome.result


def test_autogen_callers_reach_generate_through_the_adapter(registry: None, pdsqi9: Rubric) -> None:
    """The magentic agents' side: AutoGen's create() arguments become the Generation."""
    provider = register_provider(PlainProvider())
    model = JudgeModel(ModelSettings(model="plain-test/m", top_p=0.5), pdsqi9)
    client = AgentClient(_ModelChat(model))
    messages = [UserMessage(content="hi", source="user")]

    async def go() -> list[CreateResult]:
        return [
            await client.create(
                messages, extra_create_args={STRUCTURED_OUTPUT_KEY: SCHEMA.as_arg(), "seed": 3}
            ),
            await client.create(messages, json_output=True),
        ]

    results = asyncio.run(go())
    assert [r.content for r in results] == ['{"x": 1}', '{"x": 1}']
    assert client.total_usage().prompt_tokens == 24
    first, second = provider.calls
    assert first.mode == "json_schema" and first.config.schema == SCHEMA
    assert first.args["seed"] == 3 and first.args["top_p"] == 0.5
    assert second.mode == "json_object" and first.messages == [{"role": "user", "content": "hi"}]
    assert first.conversation == [ChatMessage("user", "hi", "user")]


def test_judge_model_names_no_client_type() -> None:
    """How a request is put together is the client's, which its provider builds."""
    source = inspect.getsource(model_module)
    for needle in ("autogen", "openai_response_format", "SDK_USAGE", "DirectClient"):
        assert needle not in source, needle


def test_completion_counts_reach_the_cache_columns(registry: None, pdsqi9: Rubric) -> None:
    class Cached(Provider):
        names = ("cached-test",)

        async def generate(self, call: Generation) -> Completion:
            reply = json.dumps({"n": len(call.messages)})
            return Completion(reply, 100, 5, cached_input_tokens=60, cache_write_tokens=10)

    register_provider(Cached())
    [outcome] = _generate(JudgeModel(ModelSettings(model="cached-test/m"), pdsqi9), CallConfig())
    assert outcome.text == '{"n": 2}'
    assert (outcome.cached_input_tokens, outcome.cache_write_tokens) == (60, 10)
