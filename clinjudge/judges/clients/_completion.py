"""What one model request returned, in clinjudge's own terms: the call path, the cache and
the batch results read these, never a client library's result types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FinishReason = Literal["stop", "length", "function_calls", "content_filter", "unknown"]
"""Why a reply ended (the values AutoGen's results carry, so agents read them unchanged)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call a reply asks for.

    Args:
        id: The provider's id of the call (tool results answer it).
        name: The tool's name.
        arguments: The arguments, as the JSON text the model wrote.
    """

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Completion:
    """What one request returned: what :meth:`Provider.generate` returns, and what the call
    path reads of every reply.

    Args:
        text: The reply (with tool calls: the text the model wrote beside them, or empty).
        prompt_tokens: Tokens the request used; 0 where the provider does not say (both
            counts are then estimated with tiktoken and marked so).
        completion_tokens: Tokens generated.
        finish_reason: ``stop``, ``length`` (cut at ``max_tokens``), ``content_filter``, ...
        cached_input_tokens: Of ``prompt_tokens``, those read from a prompt cache.
        cache_write_tokens: Of ``prompt_tokens``, those written to a prompt cache.
        tool_calls: The tools the reply calls (an agent's turn), empty for a text reply.
        thought: The model's reasoning or text beside its tool calls, where it sent one.
        cached: Answered from the response cache (``--cache``), not by the provider.
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: FinishReason = "stop"
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    tool_calls: tuple[ToolCall, ...] = ()
    thought: str | None = None
    cached: bool = False
