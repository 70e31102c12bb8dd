"""autogen-ext's OpenAI and Azure clients behind our :class:`ModelClient`: the one place under
``judges.clients`` where AutoGen's types are made and read.

Requests arrive as a :class:`Generation` and leave as AutoGen messages through autogen-ext's
``create``; its result comes back as a :class:`Completion`. autogen-ext keeps only prompt and
completion tokens of a reply, dropping ``prompt_tokens_details.cached_tokens``: the SDK client
under it is wrapped so that each reply's usage object reaches the call that made it through a
context variable (set per call; the SDK runs in a task that inherits it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any, cast

from autogen_core import FunctionCall
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelInfo,
    SystemMessage,
    UserMessage,
)

from clinjudge.judges.clients._client import GENERIC_MODEL_INFO, Generation, ModelClient
from clinjudge.judges.clients._completion import Completion, ToolCall
from clinjudge.judges.clients._messages import ChatMessage
from clinjudge.judges.clients._replies import prompt_cache_counts
from clinjudge.judges.clients._structured import openai_response_format

SDK_USAGE: ContextVar[list[Any] | None] = ContextVar("clinjudge_sdk_usage", default=None)
"""Where the SDK under an autogen-ext client leaves each reply's usage object, per call."""


def autogen_messages(conversation: Sequence[ChatMessage]) -> list[LLMMessage]:
    """A conversation as AutoGen's messages (what autogen-ext's clients take).

    Args:
        conversation: The conversation.
    """
    converted: list[LLMMessage] = []
    for message in conversation:
        role = message.role
        if role == "system":
            converted.append(SystemMessage(content=message.content))
        elif role == "user":
            converted.append(UserMessage(content=message.content, source=message.source))
        elif role == "tool":
            results = [
                FunctionExecutionResult(
                    content=r.content, name=r.name, call_id=r.call_id, is_error=r.is_error
                )
                for r in message.results
            ]
            converted.append(FunctionExecutionResultMessage(content=results))
        elif message.tool_calls:
            calls = [FunctionCall(c.id, c.arguments, c.name) for c in message.tool_calls]
            converted.append(
                AssistantMessage(content=calls, thought=message.thought, source=message.source)
            )
        else:
            converted.append(
                AssistantMessage(
                    content=message.content, thought=message.thought, source=message.source
                )
            )
    return converted


def completion_of(result: CreateResult, usage: Any = None) -> Completion:
    """autogen-ext's result as a :class:`Completion`, with the prompt-cache counts of the
    reply its SDK received where they are known.

    Args:
        result: What the client's ``create`` returned.
        usage: The SDK's usage object of the reply (None: not seen).
    """
    content, counted = result.content, result.usage
    prompt_tokens = counted.prompt_tokens if counted else 0
    cached = written = 0
    dump = getattr(usage, "model_dump", None)
    if dump is not None and counted is not None:
        cached, written = prompt_cache_counts(dump(), prompt_tokens)
    calls: tuple[ToolCall, ...] = ()
    text = content if isinstance(content, str) else ""
    if not isinstance(content, str):  # the tool calls of an agent's turn
        calls = tuple(ToolCall(c.id, c.name, c.arguments) for c in content)
    return Completion(
        text,
        prompt_tokens,
        counted.completion_tokens if counted else 0,
        result.finish_reason,
        cached,
        written,
        calls,
        result.thought,
        result.cached,
    )


def _reporting_usage(client: ChatCompletionClient) -> ChatCompletionClient:
    """Let an autogen-ext client's replies report their whole usage (see the module)."""
    sdk = getattr(client, "_client", None)
    if sdk is None:
        return client
    for owner, name in ((sdk.chat.completions, "create"), (sdk.beta.chat.completions, "parse")):
        original = getattr(owner, name)

        async def reporting(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            reply = await _original(*args, **kwargs)
            sink = SDK_USAGE.get()
            if sink is not None:
                sink.append(getattr(reply, "usage", None))
            return reply

        setattr(owner, name, reporting)
    return client


class SdkClient(ModelClient):
    """An autogen-ext OpenAI or Azure client as a :class:`ModelClient`.

    Args:
        client: The autogen-ext client.
    """

    def __init__(self, client: ChatCompletionClient) -> None:
        self.sdk_client = _reporting_usage(client)
        self.model_info: Mapping[str, Any] = dict(client.model_info)

    async def generate(self, call: Generation) -> Completion:
        """One request through autogen-ext's ``create``: the reply schema as the SDK's
        ``response_format``, JSON mode as its ``json_output``.

        Args:
            call: The request.
        """
        extra = dict(call.args)
        schema = call.reply_schema
        if schema is not None:
            extra["response_format"] = openai_response_format(schema)
        sink: list[Any] = []
        token = SDK_USAGE.set(sink)
        try:
            result = await self.sdk_client.create(
                autogen_messages(call.conversation),
                tools=cast(Any, call.config.tools),
                json_output=True if call.mode == "json_object" else None,
                extra_create_args=extra,
            )
        finally:
            SDK_USAGE.reset(token)
        return completion_of(result, sink[-1] if sink else None)

    async def close(self) -> None:
        """Close the SDK's connections."""
        await self.sdk_client.close()


def openai_sdk_client(model: str, **kwargs: Any) -> SdkClient:
    """autogen-ext's OpenAI client for ``model`` (its capabilities from autogen-ext's table,
    generic ones for a model it does not know).

    Args:
        model: The model's name at the endpoint.
        **kwargs: The client's other arguments (key, base_url, HTTP client, sampling).
    """
    from autogen_ext.models.openai import OpenAIChatCompletionClient
    from autogen_ext.models.openai._model_info import get_info

    try:
        get_info(model)
    except (KeyError, ValueError):
        kwargs["model_info"] = cast(ModelInfo, GENERIC_MODEL_INFO)
    return SdkClient(OpenAIChatCompletionClient(model=model, **kwargs))


def azure_sdk_client(**kwargs: Any) -> SdkClient:
    """autogen-ext's Azure OpenAI client (generic capabilities: a deployment's name says
    nothing of its model).

    Args:
        **kwargs: The client's arguments (deployment, endpoint, API version, key, sampling).
    """
    from autogen_ext.models.openai import AzureOpenAIChatCompletionClient

    return SdkClient(
        AzureOpenAIChatCompletionClient(model_info=cast(ModelInfo, GENERIC_MODEL_INFO), **kwargs)
    )
