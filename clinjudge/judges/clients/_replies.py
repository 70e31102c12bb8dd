"""Reading a chat-completions reply (a direct call's body, litellm's, a batch line's) into a
:class:`~clinjudge.judges.clients.Completion`, with every count and field checked: a broken
reply is a retryable fault, never a corrupt row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clinjudge.judges.clients._completion import Completion, FinishReason, ToolCall
from clinjudge.judges.clients._faults import ProviderFault

MAX_TOKENS_PER_CALL = 50_000_000
"""More tokens than any model reads or writes in one call: a count beyond it is a broken reply."""

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "function_calls",
    "function_call": "function_calls",
    "content_filter": "content_filter",
}


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


@dataclass(frozen=True, slots=True)
class ReplyUsage:
    """The checked usage block of a reply (``prompt_tokens`` includes both cache counts).

    Args:
        prompt_tokens: Tokens the request used.
        completion_tokens: Tokens generated.
        cached_input_tokens: Prompt tokens read from the provider's prompt cache.
        cache_write_tokens: Prompt tokens written to it (Anthropic's cache creation).
    """

    prompt_tokens: int
    completion_tokens: int
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


def reply_usage(usage: Any) -> ReplyUsage | None:
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
    return ReplyUsage(prompt_tokens, completion_tokens, cached, written)


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
    calls: tuple[ToolCall, ...] = ()
    thought = None
    if tool_calls:
        calls = _tool_calls(tool_calls)
        thought = _text_or_none(message.get("content"))
        content = ""
    elif type(content) is not str:
        raise ValueError(f"malformed response: message content is a {type(content).__name__}")
    if usage is None:
        usage = ReplyUsage(0, 0)
    return Completion(
        content,
        usage.prompt_tokens,
        usage.completion_tokens,
        _finish(choice),
        usage.cached_input_tokens,
        usage.cache_write_tokens,
        calls,
        thought,
    )


def _finish(choice: dict[str, Any]) -> FinishReason:
    reason = choice.get("finish_reason") or "stop"
    return _FINISH.get(reason, "unknown") if isinstance(reason, str) else "unknown"


def _text_or_none(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"malformed response: text beside tool calls is a {type(value).__name__}")


def _tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    """The tool calls of a reply, each with a function name and its arguments as text."""
    if not isinstance(raw, list):
        raise ValueError("malformed response: tool_calls is not a list")
    calls = []
    for call in raw:
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError("malformed response: a tool call names no function")
        assert isinstance(function, dict)
        arguments = function.get("arguments") or "{}"
        if not isinstance(arguments, str):
            raise ValueError("malformed response: a tool call's arguments are not text")
        call_id = call.get("id") or ""
        calls.append(
            ToolCall(call_id if isinstance(call_id, str) else str(call_id), name, arguments)
        )
    return tuple(calls)
