"""The response cache's keys stay those that existing caches hold (#40): conversations are now
our own messages, and a reply cached while they were AutoGen's must still be found.

The keys below were computed by the code of 2dc1f24 (when the key serialised AutoGen's
messages) for these exact requests; the key form of each message is compared with what AutoGen
itself writes for the message it came from."""

from __future__ import annotations

from typing import Any

import pytest
from autogen_core import FunctionCall
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    SystemMessage,
    UserMessage,
)

from clinjudge.judges.clients import ChatMessage, ModelSettings, reply_schema_for
from clinjudge.judges.clients._cache import _message, cache_key
from clinjudge.judges.clients._messages import chat_messages
from clinjudge.judges.workflows._magentic_client import chat_message
from clinjudge.rubrics import ChatTurn

SETTINGS = ModelSettings(
    model="openai/local-judge", base_url="http://127.0.0.1:9/v1", temperature=0.2, max_tokens=300
)
TURNS = [
    ChatTurn("system", "You grade summaries."),
    ChatTurn("user", "Grade this summary."),
    ChatTurn("assistant", '{"accurate": 3}'),
    ChatTurn("user", "Again."),
]
AGENTS: list[LLMMessage] = [
    SystemMessage(content="Chair's rules."),
    UserMessage(content="The item.", source="user"),
    AssistantMessage(content="I think 4.", source="cardiologist", thought="weighing"),
    AssistantMessage(
        content=[FunctionCall(id="c1", arguments='{"step": 2}', name="prm_score")],
        source="nephrologist",
        thought="Checking.",
    ),
    FunctionExecutionResultMessage(
        content=[
            FunctionExecutionResult(content="0.91", name="prm_score", call_id="c1", is_error=False),
            FunctionExecutionResult(content="n/a", name="prm_score", call_id="c2"),
        ]
    ),
    UserMessage(content="Over to you.", source="orchestrator"),
]
TOOL: dict[str, Any] = {
    "name": "prm_score",
    "description": "Score a step.",
    "parameters": {
        "type": "object",
        "properties": {"step": {"type": "integer"}},
        "required": ["step"],
    },
}
SCHEMA = reply_schema_for(
    "grades",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": False,
    },
    shared=True,
)


def test_a_single_judges_key_is_the_one_its_cache_holds() -> None:
    key = cache_key(
        SETTINGS, chat_messages(TURNS), [], None, "7|1", {"json_schema": SCHEMA.as_arg()}
    )
    assert key == "60a5f55cfaf9f8e0efc964a70b9a66581e7b372b71c45e357abbb36f153a7e79"


def test_a_simulated_judges_key_is_the_one_its_cache_holds() -> None:
    key = cache_key(ModelSettings(model="mock/judge"), chat_messages(TURNS), [], None, "0|2")
    assert key == "93a5f17ab0aefc2a329abebbde3604347ba67ec45ff66af673deaef4b863ba3a"


def test_an_agents_key_with_tools_is_the_one_its_cache_holds() -> None:
    messages = [chat_message(m) for m in AGENTS]
    key = cache_key(SETTINGS, messages, [TOOL], True, "7|1|stance=strict", {"temperature": 0.9})
    assert key == "002877053c04dae1ef0323cb46c07ff00d0e4763fe330500e9ba37e2d4e30ccd"


@pytest.mark.parametrize("message", AGENTS, ids=lambda m: type(m).__name__)
def test_each_message_is_keyed_as_autogen_writes_it(message: LLMMessage) -> None:
    assert _message(chat_message(message)) == message.model_dump(mode="json")


def test_who_said_it_and_what_was_thought_change_the_key() -> None:
    base = [ChatMessage("user", "Same words.", "cardiologist")]
    other_speaker = [ChatMessage("user", "Same words.", "nephrologist")]
    thought = [ChatMessage("assistant", "Same words.", "judge", thought="hmm")]
    plain = [ChatMessage("assistant", "Same words.", "judge")]
    keys = {cache_key(SETTINGS, m, [], None, "0|1") for m in (base, other_speaker, thought, plain)}
    assert len(keys) == 4
