"""A small base for our own AutoGen ``ChatCompletionClient`` implementations."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard, overload

from autogen_core import CancellationToken, FunctionCall
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    CreateResult,
    FinishReasons,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelInfo,
    RequestUsage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import Tool, ToolSchema

from clinjudge.judges.clients._accounting import count_message_tokens
from clinjudge.judges.clients._completion import Completion, ToolCall
from clinjudge.judges.clients._faults import ProviderFault
from clinjudge.rubrics import ChatTurn

GENERIC_MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=True,
    structured_output=False,
    family="unknown",
    multiple_system_messages=False,
)


def message_text(message: LLMMessage) -> str:
    """Plain text of an AutoGen message (tool calls rendered as text)."""
    content = message.content
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(getattr(part, "content", part)) for part in content)
    return str(content)


_SYSTEM_MESSAGES: dict[int, tuple[str, SystemMessage]] = {}
"""System messages by the identity of their text: a run's system prompt is one string object
(rendered once per rubric), sent with every call. The entry holds the text, so its id is never
reused while the entry lives; nothing changes a message after it is built."""


def _system_message(content: str) -> SystemMessage:
    known = _SYSTEM_MESSAGES.get(id(content))
    if known is not None and known[0] is content:
        return known[1]
    if len(_SYSTEM_MESSAGES) >= 256:  # texts made per call (a persona's prefix) come and go
        _SYSTEM_MESSAGES.clear()
    message = SystemMessage(content=content)
    _SYSTEM_MESSAGES[id(content)] = (content, message)
    return message


def to_autogen_messages(turns: Sequence[ChatTurn], agent: str = "judge") -> list[LLMMessage]:
    """Convert rendered turns into AutoGen messages (a role other than system or assistant is
    the user's).

    Args:
        turns: The rendered conversation.
        agent: Source named on assistant messages.
    """
    converted: list[LLMMessage] = []
    for turn in turns:
        if turn.role == "system":
            converted.append(_system_message(turn.content))
        elif turn.role == "assistant":
            converted.append(AssistantMessage(content=turn.content, source=agent))
        else:
            converted.append(UserMessage(content=turn.content, source="user"))
    return converted


class TurnMessages(Sequence[LLMMessage]):
    """Rendered turns read as AutoGen messages, which are made only when something reads them.

    A client that sends chat-format dicts (ours) takes the turns straight from
    :attr:`turns` through :func:`to_openai_messages`, with no AutoGen object made and taken
    apart again on every call; whatever else reads the sequence (a cache key, a token
    estimate) sees the messages :func:`to_autogen_messages` makes.

    Args:
        turns: The rendered conversation (copied: the caller may go on appending to its list).
    """

    __slots__ = ("_messages", "turns")

    def __init__(self, turns: Sequence[ChatTurn]):
        self.turns = tuple(turns)
        self._messages: list[LLMMessage] | None = None

    def _built(self) -> list[LLMMessage]:
        if self._messages is None:
            self._messages = to_autogen_messages(self.turns)
        return self._messages

    def __len__(self) -> int:
        return len(self.turns)

    @overload
    def __getitem__(self, index: int) -> LLMMessage: ...
    @overload
    def __getitem__(self, index: slice) -> list[LLMMessage]: ...
    def __getitem__(self, index: int | slice) -> LLMMessage | list[LLMMessage]:
        return self._built()[index]

    def __iter__(self) -> Iterator[LLMMessage]:
        return iter(self._built())


def to_openai_messages(messages: Sequence[LLMMessage]) -> list[dict[str, Any]]:
    """Convert AutoGen messages into OpenAI chat-format dicts."""
    if type(messages) is TurnMessages:
        # What the conversion below makes of to_autogen_messages(turns), without making it.
        return [
            {"role": t.role if t.role in _TURN_ROLES else "user", "content": t.content}
            for t in messages.turns
        ]
    converted: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            converted.append({"role": "system", "content": message.content})
        elif isinstance(message, UserMessage):
            converted.append({"role": "user", "content": message_text(message)})
        elif isinstance(message, AssistantMessage) and _is_tool_request(message.content):
            # The tool results that follow must answer a real tool_calls message.
            converted.append(
                {
                    "role": "assistant",
                    "content": message.thought,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        }
                        for call in message.content
                    ],
                }
            )
        elif isinstance(message, AssistantMessage):
            converted.append({"role": "assistant", "content": message_text(message)})
        elif isinstance(message, FunctionExecutionResultMessage):
            converted.extend(
                {"role": "tool", "tool_call_id": r.call_id, "content": r.content}
                for r in message.content
            )
    return converted


_TURN_ROLES = frozenset({"system", "assistant"})
"""Turn roles kept as they are in chat format; any other turn is the user's."""


def _is_tool_request(content: Any) -> TypeGuard[list[FunctionCall]]:
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(part, FunctionCall) for part in content)
    )


def tool_schema(tool: Tool | ToolSchema) -> dict[str, Any]:
    """An AutoGen tool as an OpenAI ``tools`` entry."""
    schema = tool.schema if isinstance(tool, Tool) else tool
    return {
        "type": "function",
        "function": {
            "name": schema["name"],
            "description": schema.get("description", ""),
            "parameters": schema.get("parameters", {"type": "object", "properties": {}}),
        },
    }


_FINISH: dict[str, FinishReasons] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "function_calls",
    "function_call": "function_calls",
    "content_filter": "content_filter",
}


MAX_TOKENS_PER_CALL = 50_000_000
"""More tokens than any model reads or writes in one call: a count beyond it is a broken reply."""


def check_token_count(name: str, value: Any) -> int:
    """A token count from a reply, as an int within [0, MAX_TOKENS_PER_CALL].

    Args:
        name: The usage field, for the error.
        value: What the reply said.

    Raises:
        ProviderFault: The count is not a number, negative or absurdly large (retryable: the
            reply is malformed, not the request).
    """
    if type(value) is int and 0 <= value <= MAX_TOKENS_PER_CALL:
        return value  # what every well-formed reply sends
    if value is None:
        return 0
    try:
        count = float(value)
    except (TypeError, ValueError):
        count = float("nan")
    if not 0 <= count <= MAX_TOKENS_PER_CALL or count != int(count):
        raise ProviderFault(f"malformed response: usage {name}={value!r}"[:200], retryable=True)
    return int(count)


@dataclass
class PromptUsage(RequestUsage):
    """Usage with the provider's prompt-cache counts (``prompt_tokens`` includes both).

    Args:
        cached_input_tokens: Prompt tokens read from the provider's prompt cache.
        cache_write_tokens: Prompt tokens written to it (Anthropic's cache creation).
    """

    cached_input_tokens: int = 0
    cache_write_tokens: int = 0


def prompt_cache_counts(usage: Mapping[str, Any], prompt_tokens: int) -> tuple[int, int]:
    """Cached and cache-written prompt tokens of a usage block, at most ``prompt_tokens``.

    OpenAI and Azure report ``prompt_tokens_details.cached_tokens``; Anthropic (as litellm
    returns it) ``cache_read_input_tokens`` and ``cache_creation_input_tokens``, both already
    counted in ``prompt_tokens``. A count above the prompt is cut to it: the reply is billed,
    so it is kept, and no share of a prompt can exceed the whole.

    Args:
        usage: The decoded ``usage`` object.
        prompt_tokens: The call's validated prompt tokens.
    """
    details = usage.get("prompt_tokens_details")
    read = usage.get("cache_read_input_tokens")
    write = usage.get("cache_creation_input_tokens")
    if details is None and read is None and write is None:
        return 0, 0  # a reply that reports no prompt cache (a local server's)
    details = details if isinstance(details, Mapping) else {}
    if read is None:
        read = details.get("cached_tokens")
    if write is None:
        write = details.get("cache_creation_tokens")
    cached = min(check_token_count("cached_tokens", read), prompt_tokens)
    written = min(check_token_count("cache_creation_input_tokens", write), prompt_tokens - cached)
    return cached, written


def reply_usage(usage: Any) -> PromptUsage | None:
    """The usage block of a chat-completions reply, validated; None when absent.

    Args:
        usage: The decoded ``usage`` object.
    """
    if not isinstance(usage, dict):
        return None
    prompt_tokens = usage.get("prompt_tokens")
    if type(prompt_tokens) is not int or not 0 <= prompt_tokens <= MAX_TOKENS_PER_CALL:
        prompt_tokens = check_token_count("prompt_tokens", prompt_tokens)
    completion_tokens = usage.get("completion_tokens")
    if type(completion_tokens) is not int or not 0 <= completion_tokens <= MAX_TOKENS_PER_CALL:
        completion_tokens = check_token_count("completion_tokens", completion_tokens)
    cached, written = prompt_cache_counts(usage, prompt_tokens)
    return PromptUsage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_input_tokens=cached,
        cache_write_tokens=written,
    )


def openai_result(data: Any) -> Completion:
    """A chat-completions response body (dict) as a :class:`Completion`.

    Args:
        data: The decoded response.

    Raises:
        ProviderFault: The body has no usable choice.
        ValueError: A tool call or the content is not of the form a reply takes.
    """
    if isinstance(data, dict):
        choices = data.get("choices")
        usage = reply_usage(data.get("usage"))
    else:
        choices, usage = None, None
    if not choices or not isinstance(choices[0], dict):
        # A 200 without a choice is still billed: keep its usage so the cost is counted.
        raise ProviderFault(
            "malformed response: no choices",
            retryable=True,
            usage=(usage.prompt_tokens, usage.completion_tokens) if usage else None,
        )
    choice = choices[0]
    message = choice.get("message") or {}
    tool_calls = message.get("tool_calls")
    content: Any = message.get("content") or ""
    if tool_calls or type(content) is not str:
        # Tool calls (an agent's turn) and odd content are checked by AutoGen's result, with
        # the errors a malformed reply has always raised.
        return completion_of(_tool_result(choice, message, tool_calls, content, usage))
    if usage is None:
        return Completion(content, finish_reason=_finish(choice))
    return Completion(
        content,
        usage.prompt_tokens,
        usage.completion_tokens,
        _finish(choice),
        usage.cached_input_tokens,
        usage.cache_write_tokens,
    )


def _finish(choice: dict[str, Any]) -> FinishReasons:
    return _FINISH.get(choice.get("finish_reason") or "stop", "unknown")


def _tool_result(
    choice: dict[str, Any],
    message: Any,
    tool_calls: Any,
    content: Any,
    usage: PromptUsage | None,
) -> CreateResult:
    """A reply with tool calls (or content that is no string) as AutoGen's validated result."""
    if tool_calls:
        content = [
            FunctionCall(
                id=c.get("id") or "",
                name=c["function"]["name"],
                arguments=c["function"].get("arguments") or "{}",
            )
            for c in tool_calls
        ]
    return CreateResult(
        finish_reason=_finish(choice),
        content=content,
        usage=usage or RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
        thought=message.get("content") if tool_calls else None,
    )


def autogen_result(completion: Completion) -> CreateResult:
    """A :class:`Completion` as AutoGen's result (for callers of AutoGen's interface).

    Args:
        completion: The reply.
    """
    usage = PromptUsage(
        prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens,
        cached_input_tokens=completion.cached_input_tokens,
        cache_write_tokens=completion.cache_write_tokens,
    )
    content: str | list[FunctionCall] = completion.text
    if completion.tool_calls:
        content = [
            FunctionCall(id=c.id, name=c.name, arguments=c.arguments) for c in completion.tool_calls
        ]
    return CreateResult(
        finish_reason=completion.finish_reason,
        content=content,
        usage=usage,
        cached=completion.cached,
        thought=completion.thought,
    )


def completion_of(result: CreateResult) -> Completion:
    """An AutoGen client's result as a :class:`Completion` (the edge where AutoGen's types
    end).

    Args:
        result: What the client's ``create`` returned.
    """
    content, usage = result.content, result.usage
    cached_input = getattr(usage, "cached_input_tokens", 0)
    written = getattr(usage, "cache_write_tokens", 0)
    calls: tuple[ToolCall, ...]
    if isinstance(content, str):
        text, calls = content, ()
    else:  # the tool calls of an agent's turn
        text = ""
        calls = tuple(ToolCall(c.id, c.name, c.arguments) for c in content)
    return Completion(
        text,
        usage.prompt_tokens if usage else 0,
        usage.completion_tokens if usage else 0,
        result.finish_reason,
        cached_input,
        written,
        calls,
        result.thought,
        result.cached,
    )


class SimpleChatCompletionClient(ChatCompletionClient):
    """Implements usage bookkeeping and streaming on top of one ``_complete`` method."""

    def __init__(self, model_info: ModelInfo | None = None) -> None:
        self._model_info = model_info or GENERIC_MODEL_INFO
        # Running sums as ints: a RequestUsage (validated) is built only when asked for.
        self._total_prompt = 0
        self._total_completion = 0
        self._last = (0, 0)

    async def _complete(
        self,
        messages: Sequence[LLMMessage],
        json_output: Any,
        extra: Mapping[str, Any],
        tools: Sequence[Tool | ToolSchema] = (),
    ) -> Completion:
        raise NotImplementedError

    async def complete(
        self,
        messages: Sequence[LLMMessage],
        json_output: Any,
        extra: Mapping[str, Any],
        tools: Sequence[Tool | ToolSchema] = (),
    ) -> Completion:
        """One request, its reply in our own terms (what the call path uses), counted.

        Args:
            messages: The conversation.
            json_output: AutoGen's JSON-mode flag of the call.
            extra: The request arguments (a reply schema under its key included).
            tools: The tools offered.
        """
        completion = await self._complete(messages, json_output, extra, tools)
        self._count(completion.prompt_tokens, completion.completion_tokens)
        return completion

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
        # AutoGen's interface: an adapter around complete() for agents.
        return autogen_result(await self.complete(messages, json_output, extra_create_args, tools))

    def _count(self, prompt_tokens: int, completion_tokens: int) -> None:
        """Add one reply's usage to this client's running sums.

        Args:
            prompt_tokens: Tokens the request used.
            completion_tokens: Tokens generated.
        """
        self._last = (prompt_tokens, completion_tokens)
        self._total_prompt += prompt_tokens
        self._total_completion += completion_tokens

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
        return RequestUsage(
            prompt_tokens=self._total_prompt, completion_tokens=self._total_completion
        )

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Any] = ()) -> int:
        return count_message_tokens([message_text(m) for m in messages])

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Any] = ()) -> int:
        return max(128_000 - self.count_tokens(messages), 0)

    @property
    def capabilities(self) -> ModelInfo:  # type: ignore[override]
        return self._model_info

    @property
    def model_info(self) -> ModelInfo:
        return self._model_info
