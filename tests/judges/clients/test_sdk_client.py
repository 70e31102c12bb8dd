"""autogen-ext's OpenAI client behind our ModelClient (#40): an agent's conversation (who said
what, a tool call and its result) reaches the server as the same chat request through it as
through our direct client, and its reply comes back as our Completion."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from clinjudge.judges.clients import (
    CallConfig,
    CallOutcome,
    ChatMessage,
    JudgeModel,
    ModelSettings,
    ToolCall,
    ToolResult,
)
from clinjudge.judges.clients._sdk_client import SdkClient
from clinjudge.rubrics import Rubric
from tests.fake_openai import FakeOpenAIServer

TOOL: dict[str, Any] = {
    "name": "prm_score",
    "description": "Score a step.",
    "parameters": {
        "type": "object",
        "properties": {"step": {"type": "integer"}},
        "required": ["step"],
    },
}
CONVERSATION = [
    ChatMessage("system", "Chair's rules."),
    ChatMessage("user", "The item.", "user"),
    ChatMessage(
        "assistant",
        source="nephrologist",
        tool_calls=(ToolCall("c1", "prm_score", '{"step": 2}'),),
        thought="Checking.",
    ),
    ChatMessage("tool", results=(ToolResult("c1", "prm_score", "0.91"),)),
    ChatMessage("user", "Over to you.", "orchestrator"),
]
# OpenAI's chat format, written out here: who said a message is not sent.
EXPECTED_MESSAGES = [
    {"role": "system", "content": "Chair's rules."},
    {"role": "user", "content": "The item."},
    {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "prm_score", "arguments": '{"step": 2}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "0.91"},
    {"role": "user", "content": "Over to you."},
]


def _sent(client: str, rubric: Rubric) -> tuple[dict[str, Any], CallOutcome, type]:
    with FakeOpenAIServer() as srv:
        settings = ModelSettings(
            model="openai/local-judge", base_url=srv.base_url, client=client, timeout=10
        )
        model = JudgeModel(settings, rubric)

        async def go() -> CallOutcome:
            try:
                config = CallConfig(tools=(TOOL,), json_output=True)
                return await model.generate_chat(CONVERSATION, config)
            finally:
                await model.close()

        outcome = asyncio.run(go())
        return srv.requests[0], outcome, type(model.client)


@pytest.mark.parametrize("client", ["direct", "autogen"])
def test_an_agents_conversation_is_the_same_request_through_either_client(
    client: str, pdsqi9: Rubric
) -> None:
    body, outcome, kind = _sent(client, pdsqi9)
    assert (kind is SdkClient) == (client == "autogen")
    assert body["messages"] == EXPECTED_MESSAGES
    [tool] = body["tools"]
    assert tool["type"] == "function"
    function = tool["function"]
    assert (function["name"], function["parameters"]) == ("prm_score", TOOL["parameters"])
    assert body["response_format"] == {"type": "json_object"}
    assert outcome.result is not None and outcome.result.text == outcome.text
    assert outcome.prompt_tokens > 0 and not outcome.tokens_estimated
