"""AutoGen's model-client interface for the agents of a magentic discussion: the one place where
AutoGen's messages become clinjudge's and a reply becomes AutoGen's result.

An agent (a persona, the chair) calls ``create()``; :class:`AgentClient` turns its arguments
into a :class:`~clinjudge.judges.clients.CallConfig`, its messages into
:class:`~clinjudge.judges.clients.ChatMessage` s, and hands them to the run's recorded,
retried conversation call for that agent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, TypeGuard, cast

from autogen_core import CancellationToken, FunctionCall
from autogen_core.models import (
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelInfo,
    RequestUsage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import Tool, ToolSchema

from clinjudge.judges.clients import (
    CallConfig,
    ChatMessage,
    Completion,
    ReplySchema,
    ToolCall,
    ToolResult,
    count_message_tokens,
    reply_schema,
)
from clinjudge.judges.workflows._contract import AgentChatFn
from clinjudge.rubrics import STRUCTURED_OUTPUT_KEY


def _text(content: Any) -> str:
    """The text of a message's content (parts joined, one per line)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(getattr(part, "content", part)) for part in content)
    return str(content)


def _is_tool_request(content: Any) -> TypeGuard[list[FunctionCall]]:
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(part, FunctionCall) for part in content)
    )


def chat_message(message: LLMMessage) -> ChatMessage:
    """An AutoGen message as a :class:`ChatMessage` (who said it, tool calls and results kept).

    Args:
        message: The agent's message.
    """
    if isinstance(message, SystemMessage):
        return ChatMessage("system", message.content)
    if isinstance(message, UserMessage):
        return ChatMessage("user", _text(message.content), message.source)
    if isinstance(message, FunctionExecutionResultMessage):
        results = tuple(
            ToolResult(r.call_id, r.name, r.content, r.is_error) for r in message.content
        )
        return ChatMessage("tool", results=results)
    content = message.content
    if _is_tool_request(content):
        calls = tuple(ToolCall(c.id, c.name, c.arguments) for c in content)
        return ChatMessage("assistant", "", message.source, calls, message.thought)
    return ChatMessage("assistant", _text(content), message.source, thought=message.thought)


def create_result(completion: Completion) -> CreateResult:
    """A reply as AutoGen's result, for the agent that asked.

    Args:
        completion: The reply.
    """
    content: str | list[FunctionCall] = completion.text
    if completion.tool_calls:
        content = [
            FunctionCall(id=c.id, name=c.name, arguments=c.arguments) for c in completion.tool_calls
        ]
    return CreateResult(
        finish_reason=completion.finish_reason,
        content=content,
        usage=RequestUsage(
            prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens
        ),
        cached=completion.cached,
        thought=completion.thought,
    )


def call_config(
    tools: Sequence[Tool | ToolSchema], json_output: Any, extra: Mapping[str, Any]
) -> CallConfig:
    """The call an agent's ``create()`` arguments ask for: tools as their schemas, a reply
    schema under :data:`STRUCTURED_OUTPUT_KEY` (``{"name", "schema"}`` or a
    :class:`ReplySchema`) as the call's schema, AutoGen's structured output (a pydantic class
    for ``json_output``) as a schema too, and the other extra arguments sent as they are.

    Args:
        tools: The tools offered.
        json_output: AutoGen's JSON-mode flag, or a pydantic class the reply must follow.
        extra: AutoGen's extra request arguments.
    """
    schemas = tuple(dict(t.schema if isinstance(t, Tool) else t) for t in tools)
    asked = extra.get(STRUCTURED_OUTPUT_KEY)
    if isinstance(json_output, type) and hasattr(json_output, "model_json_schema"):
        asked = {"name": json_output.__name__, "schema": json_output.model_json_schema()}
        json_output = None
    rest = {k: v for k, v in extra.items() if k != STRUCTURED_OUTPUT_KEY}
    return CallConfig(
        schema=reply_schema(asked),
        json_output=json_output,
        tools=schemas,
        extra=rest or None,
    )


class AgentClient(ChatCompletionClient):
    """An agent's AutoGen client: each ``create()`` is one recorded, retried conversation call.

    Args:
        chat: The run's conversation call for the agent.
        schema: A reply schema every call asks for (see :meth:`asking`).
    """

    def __init__(self, chat: AgentChatFn, schema: ReplySchema | None = None) -> None:
        self._chat = chat
        self._schema = schema
        self._model_info = cast(ModelInfo, dict(chat.model_info))
        self._last = (0, 0)
        self._total = (0, 0)

    def asking(self, schema: ReplySchema) -> AgentClient:
        """This agent's client for calls whose replies must follow ``schema`` (AutoGen's
        final-answer call passes no extra arguments: the chair's decision is asked for so).

        Args:
            schema: The reply schema.
        """
        return AgentClient(self._chat, schema)

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = (),
        tool_choice: Any = "auto",
        json_output: Any = None,
        extra_create_args: Mapping[str, Any] = {},  # noqa: B006 - signature fixed by AutoGen
        cancellation_token: CancellationToken | None = None,
    ) -> CreateResult:
        config = call_config(tools, json_output, extra_create_args)
        if self._schema is not None:
            config = dataclasses.replace(config, schema=self._schema)
        completion = await self._chat([chat_message(m) for m in messages], config)
        result = create_result(completion)
        self._count(result)
        return result

    def _count(self, result: CreateResult) -> None:
        usage = result.usage
        self._last = (usage.prompt_tokens, usage.completion_tokens)
        self._total = (self._total[0] + self._last[0], self._total[1] + self._last[1])

    async def create_stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = (),
        tool_choice: Any = "auto",
        json_output: Any = None,
        extra_create_args: Mapping[str, Any] = {},  # noqa: B006 - signature fixed by AutoGen
        cancellation_token: CancellationToken | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[str | CreateResult, None]:
        result = await self.create(
            messages, tools=tools, json_output=json_output, extra_create_args=extra_create_args
        )
        if isinstance(result.content, str):
            yield result.content
        yield result

    async def close(self) -> None:
        return None

    def actual_usage(self) -> RequestUsage:
        return RequestUsage(prompt_tokens=self._last[0], completion_tokens=self._last[1])

    def total_usage(self) -> RequestUsage:
        return RequestUsage(prompt_tokens=self._total[0], completion_tokens=self._total[1])

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Any] = ()) -> int:
        return count_message_tokens([chat_message(m).text for m in messages])

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Any] = ()) -> int:
        return max(128_000 - self.count_tokens(messages), 0)

    @property
    def capabilities(self) -> ModelInfo:  # type: ignore[override]
        return self._model_info

    @property
    def model_info(self) -> ModelInfo:
        return self._model_info
