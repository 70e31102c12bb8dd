"""One call contract (issue #40): a workflow passes a ``CallConfig`` to ``JudgeModel.generate``,
and batch request lines are built from the same object; nothing rides on the context.

Requests go to the fake OpenAI server over real HTTP.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any

import pytest

from clinjudge.judges import JudgeModel, ModelSettings, ResponseCache
from clinjudge.judges.clients import (
    PLAIN_CALL,
    CallConfig,
    ReplySchema,
    _structured,
    reply_schema_for,
    request_line,
)
from clinjudge.judges.clients._cache import cache_key
from clinjudge.judges.clients._messages import chat_messages
from clinjudge.judges.workflows import judge_call_config
from clinjudge.judges.workflows._magentic_client import call_config
from clinjudge.judges.workflows._single import judge_single_sample
from clinjudge.rubrics import ChatTurn, Rubric, render_messages, rubric_json_schema
from tests.factories import make_items
from tests.fake_openai import FakeOpenAIServer


def _settings(srv: FakeOpenAIServer, **kw: Any) -> ModelSettings:
    return ModelSettings(model="openai/local-judge", base_url=srv.base_url, timeout=5.0, **kw)


def _turns(rubric: Rubric) -> list[ChatTurn]:
    return render_messages(make_items(1)[0], rubric)


def _generate(
    settings: ModelSettings,
    rubric: Rubric,
    calls: list[tuple[list[ChatTurn], CallConfig]],
    cache: ResponseCache | None = None,
) -> list[Any]:
    async def go() -> list[Any]:
        model = JudgeModel(settings, rubric)
        model.cache = cache
        try:
            return [await model.generate(turns, config) for turns, config in calls]
        finally:
            await model.close()

    return asyncio.run(go())


def _strict(schema: ReplySchema) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": schema.name, "schema": schema.schema_, "strict": True},
    }


def test_no_context_variable_carries_the_schema() -> None:
    # The old side channel is gone: nothing in the module holds a per-context value.
    assert not hasattr(_structured, "structured_reply")
    assert not any(isinstance(value, ContextVar) for value in vars(_structured).values())


@pytest.mark.parametrize("client", ["direct", "autogen"])
def test_the_schema_reaches_the_request_from_the_call_config(pdsqi9: Rubric, client: str) -> None:
    config = judge_call_config(pdsqi9)
    assert config.schema is not None
    with FakeOpenAIServer(check_schemas=True) as srv:
        (outcome,) = _generate(_settings(srv, client=client), pdsqi9, [(_turns(pdsqi9), config)])
        (plain,) = _generate(_settings(srv, client=client), pdsqi9, [(_turns(pdsqi9), PLAIN_CALL)])
    assert (outcome.output_mode, plain.output_mode) == ("json_schema", "off")
    first, second = srv.requests
    assert first["response_format"] == _strict(config.schema)
    assert "json_schema" not in first  # our key is translated, never sent
    assert "response_format" not in second
    assert srv.schema_errors == []


def test_the_single_workflow_passes_the_rubric_schema_on_every_call(pdsqi9: Rubric) -> None:
    # The workflow hands its CallConfig to the call function: no block around the call.
    item = make_items(1)[0]
    with FakeOpenAIServer(check_schemas=True) as srv:

        async def go() -> str:
            model = JudgeModel(_settings(srv), pdsqi9)
            try:
                return (await judge_single_sample(item, pdsqi9, model.generate)).status
            finally:
                await model.close()

        assert asyncio.run(go()) == "ok"
    (body,) = srv.requests
    assert body["response_format"]["json_schema"]["schema"] == rubric_json_schema(pdsqi9)


def test_a_batch_line_and_a_direct_request_carry_the_same_call(pdsqi9: Rubric) -> None:
    config = judge_call_config(pdsqi9).capped(77)
    turns = _turns(pdsqi9)
    with FakeOpenAIServer(check_schemas=True) as srv:
        settings = _settings(srv, client="direct", temperature=0.2)
        (outcome,) = _generate(settings, pdsqi9, [(turns, config)])
    (sent,) = srv.requests
    line = request_line(settings, "s1-c0-0", turns, config)["body"]
    assert outcome.max_tokens == 77
    assert line == sent  # model, messages, sampling settings, the cap and the schema
    assert line["max_tokens"] == 77 and line["response_format"] == _strict(config.schema)


def test_call_settings_reach_the_request_and_key_the_cache(pdsqi9: Rubric) -> None:
    turns = _turns(pdsqi9)
    tuned = CallConfig(temperature=0.9, seed=11, stop=("END",), extra={"top_k": 5})
    cache = ResponseCache()
    with FakeOpenAIServer() as srv:
        settings = _settings(srv)
        _generate(settings, pdsqi9, [(turns, tuned), (turns, PLAIN_CALL)], cache)
        again = _generate(settings, pdsqi9, [(turns, tuned), (turns, PLAIN_CALL)], cache)
    tuned_body, plain_body = srv.requests  # the second round came from the cache
    assert all(outcome.cached for outcome in again)
    picked = {k: tuned_body.get(k) for k in ("temperature", "seed", "stop", "top_k")}
    assert picked == {"temperature": 0.9, "seed": 11, "stop": ["END"], "top_k": 5}
    assert not {"seed", "stop", "top_k"} & set(plain_body)


def test_the_cache_key_is_the_one_existing_caches_hold(pdsqi9: Rubric) -> None:
    # Keys are made from the settings, the messages, the tools, the JSON mode, the variation
    # and the extra arguments with the schema under our key, as before the CallConfig.
    schema = reply_schema_for("pdsqi9", rubric_json_schema(pdsqi9))
    turns = _turns(pdsqi9)
    cache = ResponseCache()
    with FakeOpenAIServer() as srv:
        settings = _settings(srv)
        config = CallConfig(schema=schema, variation="7|1", max_tokens=300)
        _generate(settings, pdsqi9, [(turns, config)], cache)
    capped = settings.model_copy(update={"max_tokens": 300})
    messages = chat_messages(turns)
    expected = cache_key(capped, messages, [], None, "7|1", {"json_schema": schema.as_arg()})
    assert cache.get(expected) is not None
    assert cache.get(cache_key(settings, messages, [], None, "7|1")) is None


def test_the_autogen_adapter_reads_its_arguments_into_a_call_config() -> None:
    arg = {"json_schema": {"name": "my grades!", "schema": {"type": "object"}}, "top_k": 3}
    tool = {"name": "look_up", "description": "", "parameters": {"type": "object"}}
    config = call_config([tool], True, arg)
    assert config.schema == ReplySchema(name="my_grades", schema={"type": "object"})
    assert (config.extra, config.tools, config.json_output) == ({"top_k": 3}, (tool,), True)
    assert config.variation == ""  # the runner's conversation call adds the sample's
    bare = call_config((), None, {})
    assert bare == CallConfig()
    assert bare.request_args() == {}


def test_varied_and_capped_keep_everything_else() -> None:
    schema = ReplySchema(name="x", schema={"type": "object"})
    config = CallConfig(schema=schema, temperature=0.5, stop=("a",), extra={"k": 1})
    assert config.varied("") is config and config.capped(None) is config
    varied = config.varied("3|2").capped(64)
    assert varied == CallConfig(
        schema=schema, max_tokens=64, variation="3|2", temperature=0.5, stop=("a",), extra={"k": 1}
    )
    assert config.variation == "" and config.max_tokens is None  # frozen: copies, not edits
