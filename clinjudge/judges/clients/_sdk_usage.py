"""The whole usage of each reply that autogen-ext's OpenAI and Azure clients receive.

autogen-ext keeps only prompt and completion tokens of a reply, dropping
``prompt_tokens_details.cached_tokens``; the SDK client under it is wrapped so that each reply's
usage object reaches the model that made the call through a context variable (set per call;
the SDK runs in a task that inherits it).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from autogen_core.models import ChatCompletionClient, CreateResult

from clinjudge.judges.clients._base_client import PromptUsage, prompt_cache_counts

SDK_USAGE: ContextVar[list[Any] | None] = ContextVar("clinjudge_sdk_usage", default=None)
"""Where the SDK under an autogen-ext client leaves each reply's usage object, per call."""


def reporting_usage(client: ChatCompletionClient) -> ChatCompletionClient:
    """Let an autogen-ext OpenAI or Azure client's replies report their whole usage.

    Args:
        client: The autogen-ext client (others come back unchanged).
    """
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


def with_sdk_usage(result: CreateResult, sink: list[Any]) -> CreateResult:
    """autogen-ext's result with the prompt-cache counts of the reply its SDK received.

    Args:
        result: What the autogen-ext client returned.
        sink: The usage objects the SDK left during the call (:data:`SDK_USAGE`).
    """
    usage = sink[-1] if sink else None
    dump = getattr(usage, "model_dump", None)
    if dump is None or result.usage is None:
        return result
    cached, written = prompt_cache_counts(dump(), result.usage.prompt_tokens)
    full = PromptUsage(
        prompt_tokens=result.usage.prompt_tokens,
        completion_tokens=result.usage.completion_tokens,
        cached_input_tokens=cached,
        cache_write_tokens=written,
    )
    return result.model_copy(update={"usage": full})
