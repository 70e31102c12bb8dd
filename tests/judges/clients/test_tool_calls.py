"""Tool calls through our own clients: schemas out, tool calls back, history kept."""

from __future__ import annotations

import json
from typing import Any

import pytest
from autogen_core import FunctionCall
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    UserMessage,
)
from autogen_core.tools import FunctionTool

from clinjudge.judges import ProviderFault
from clinjudge.judges.clients import CallConfig, ToolCall
from clinjudge.judges.clients._litellm_client import LiteLLMClient
from clinjudge.judges.clients._messages import wire_messages
from clinjudge.judges.clients._replies import openai_result
from clinjudge.judges.workflows._magentic_client import chat_message, create_result
from tests.model_requests import ask_now


async def prm_steps(item_id: str) -> str:
    """Step scores for an item."""
    return json.dumps({"item_id": item_id, "flagged": [2]})


TOOL = FunctionTool(prm_steps, description="PRM step scores for the item under judgment.")

TOOL_REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "local",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "Checking the PRM first.",
                "tool_calls": [
                    {
                        "id": "call_7",
                        "type": "function",
                        "function": {"name": "prm_steps", "arguments": '{"item_id": "n1"}'},
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39},
}


def test_openai_result_turns_tool_calls_into_our_tool_calls() -> None:
    result = openai_result(TOOL_REPLY)
    assert result.finish_reason == "function_calls"
    assert result.text == ""
    call = ToolCall(id="call_7", name="prm_steps", arguments='{"item_id": "n1"}')
    assert result.tool_calls == (call,)
    assert result.thought == "Checking the PRM first."
    assert (result.prompt_tokens, result.completion_tokens) == (30, 9)
    # Agents get them back as AutoGen's function calls.
    assert create_result(result).content == [
        FunctionCall(id="call_7", name="prm_steps", arguments='{"item_id": "n1"}')
    ]
    with pytest.raises(ProviderFault, match="no choices") as caught:
        openai_result({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}})
    assert caught.value.usage == (12, 3) and caught.value.retryable


def test_tool_round_trip_history_is_valid_openai_chat() -> None:
    call = FunctionCall(id="call_7", name="prm_steps", arguments='{"item_id": "n1"}')
    history = [
        UserMessage(content="grade", source="user"),
        AssistantMessage(content=[call], thought="Checking.", source="judge"),
        FunctionExecutionResultMessage(
            content=[FunctionExecutionResult(call_id="call_7", content="{}", name="prm_steps")]
        ),
    ]
    converted = wire_messages([chat_message(m) for m in history])
    assert converted[1] == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "call_7",
                "type": "function",
                "function": {"name": "prm_steps", "arguments": '{"item_id": "n1"}'},
            }
        ],
    }
    assert converted[2] == {"role": "tool", "tool_call_id": "call_7", "content": "{}"}


def test_litellm_adapter_sends_tools_and_returns_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    import litellm

    seen: dict[str, Any] = {}

    async def fake_acompletion(**kwargs: Any) -> Any:
        seen.update(kwargs)
        return litellm.ModelResponse(**TOOL_REPLY)

    monkeypatch.setattr(litellm, "acompletion", fake_acompletion)
    client = LiteLLMClient("anthropic/some-judge", api_key="sk-test")
    result = ask_now(client, "grade", config=CallConfig(tools=(dict(TOOL.schema),)))
    assert seen["tools"][0]["function"]["name"] == "prm_steps"
    assert seen["tools"][0]["function"]["parameters"]["required"] == ["item_id"]
    assert [call.name for call in result.tool_calls] == ["prm_steps"]
    assert result.prompt_tokens == 30
