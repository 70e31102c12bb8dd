"""A client over ``litellm.acompletion``, for every provider litellm serves.

autogen-ext 0.7.5 ships no litellm client. This adapter covers chat completion with tools (what
the judges and the PRM tool need); litellm is imported lazily because its import costs seconds.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from clinjudge.judges.clients._client import Generation, ModelClient
from clinjudge.judges.clients._completion import Completion
from clinjudge.judges.clients._http_guard import (
    DEFAULT_MAX_REPLY_BYTES,
    guarded_httpx_args,
    httpx_response_guard,
)
from clinjudge.judges.clients._messages import tool_schema
from clinjudge.judges.clients._replies import openai_result
from clinjudge.judges.clients._structured import ReplySchema, openai_response_format

# Providers litellm serves through its own httpx handler, which takes our client (no redirects,
# capped bodies); each is checked against a redirecting server in tests/survival/test_hostile.py.
# OpenAI-compatible providers go through the openai SDK, given a guarded client below; any other
# provider keeps litellm's default client, which follows redirects, and a warning says so.
GUARDED_HANDLER_PROVIDERS = frozenset(
    {
        "anthropic",
        "bedrock",
        "cohere",
        "cohere_chat",
        "databricks",
        "gemini",
        "huggingface",
        "mistral",
        "ollama",
        "ollama_chat",
        "openrouter",
        "vertex_ai",
    }
)
log = logging.getLogger(__name__)


class LiteLLMClient(ModelClient):
    """Chat completions through litellm.

    Args:
        model: litellm model string, e.g. ``anthropic/claude-sonnet-4-5`` or ``ollama/llama3``.
        max_reply_bytes: Most bytes of reply body read (where clinjudge supplies the client).
        **litellm_kwargs: Passed to every ``litellm.acompletion`` call (api_base, api_key,
            temperature, top_p, max_tokens, seed, timeout, ...).
    """

    def __init__(
        self,
        model: str,
        *,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        **litellm_kwargs: Any,
    ):
        # Import now (seconds), not inside the first call, whose timeout and latency it would eat.
        import litellm  # noqa: F401

        self._model = model
        self._kwargs = {k: v for k, v in litellm_kwargs.items() if v is not None}
        self._max_reply_bytes = max_reply_bytes
        self._client: Any | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._marks_cache = _caches_marked_prefixes(model, self._kwargs.get("api_base"))

    def _pooled_client(self) -> Any | None:
        # One client per event loop: connections are reused, and never across loops.
        loop = asyncio.get_running_loop()
        if self._client_loop is not loop:
            self._client = self._guarded_client()
            self._client_loop = loop
        return self._client

    def _guarded_client(self) -> Any | None:
        """An HTTP client that refuses redirects and caps reply bodies, in the form litellm's
        route for this provider takes; None where litellm's own client stays in use."""
        import litellm
        import openai
        from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

        try:
            _, provider, dynamic_key, api_base = litellm.get_llm_provider(
                self._model, api_base=self._kwargs.get("api_base")
            )
        except Exception:  # noqa: BLE001 - litellm reports an unknown provider on the call
            return None
        timeout = self._kwargs.get("timeout")
        if provider == "openai" or provider in litellm.openai_compatible_providers:
            base = self._kwargs.get("api_base") or api_base
            if base is None and provider != "openai":
                _unguarded(self._model, provider)  # litellm knows the address; do not guess it
                return None
            return openai.AsyncOpenAI(
                api_key=self._kwargs.get("api_key") or dynamic_key or "not-needed",
                base_url=base,
                max_retries=0,
                timeout=timeout,
                http_client=openai.DefaultAioHttpClient(
                    timeout=timeout, **guarded_httpx_args(self._max_reply_bytes)
                ),
            )
        if provider in GUARDED_HANDLER_PROVIDERS:
            handler = AsyncHTTPHandler(
                timeout=timeout,
                event_hooks={"response": [httpx_response_guard(self._max_reply_bytes)]},
                follow_redirects=False,
            )
            # Only encodings the guard decodes with a bound on the output.
            handler.client.headers["Accept-Encoding"] = "gzip, deflate"
            return handler
        _unguarded(self._model, provider)
        return None

    async def generate(self, call: Generation) -> Completion:
        """One request through ``litellm.acompletion``.

        Args:
            call: The request.
        """
        import litellm

        litellm.telemetry = False
        kwargs = {**self._kwargs, **call.args}
        schema = call.reply_schema
        if schema is not None:
            kwargs.update(self._schema_args(schema))
        elif call.mode == "json_object":
            kwargs["response_format"] = {"type": "json_object"}
        tools = call.config.tools
        if tools:
            kwargs["tools"] = [tool_schema(t) for t in tools]
        client = self._pooled_client()
        if client is not None:
            kwargs.setdefault("client", client)
        converted = call.messages
        if self._marks_cache:
            converted = mark_cache_prefix(converted)
        response = await litellm.acompletion(
            model=self._model, messages=converted, num_retries=0, **kwargs
        )
        # Zero usage in the result tells the caller to estimate tokens and mark them estimated.
        return openai_result(response.model_dump())

    def _schema_args(self, schema: ReplySchema) -> dict[str, Any]:
        """The request fields that ask this provider for replies following ``schema``.

        OpenAI's strict ``response_format`` is the one form litellm maps onto every provider's
        own structured output: Ollama's native API (``ollama/``, ``ollama_chat/``) gets the
        schema as ``format``, Anthropic a forced tool, Gemini its response schema, and
        OpenAI-compatible routes the field as it is.
        """
        return {"response_format": openai_response_format(schema)}

    async def close(self) -> None:
        """Close the pooled HTTP client."""
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            await _close(client)


CACHE_CONTROL = {"type": "ephemeral"}
"""Anthropic's marker of a cacheable prefix (a 5-minute cache)."""


def _caches_marked_prefixes(model: str, api_base: str | None) -> bool:
    """Whether litellm's route for ``model`` is Anthropic's API, which caches only prefixes
    marked with ``cache_control`` (OpenAI-style providers cache on their own)."""
    import litellm

    try:
        provider = litellm.get_llm_provider(model, api_base=api_base)[1]
    except Exception:  # noqa: BLE001 - litellm reports an unknown provider on the call
        return False
    return provider == "anthropic"


def mark_cache_prefix(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mark the end of the shared prefix for Anthropic's prompt cache.

    The prompts put what every item shares first (system message: rubric, persona,
    instructions) and the item after it, so the cache breakpoint goes on the system message;
    every later request with the same system text then reads it from the cache (at a tenth
    of the input price) instead of paying for it again. Anthropic ignores a marked prefix
    shorter than its minimum (1,024 tokens on most models), so marking costs nothing there.

    Args:
        messages: OpenAI-format messages (not changed).

    Returns:
        The messages, the last of the leading system messages' text as one content block
        with ``cache_control``.
    """
    # The leading system messages; one later in a conversation follows item text.
    leading = 0
    while leading < len(messages) and messages[leading].get("role") == "system":
        leading += 1
    if leading == 0:
        return messages
    last_system = leading - 1
    message = messages[last_system]
    content = message.get("content")
    if not isinstance(content, str) or not content:
        return messages
    marked = dict(message)
    marked["content"] = [{"type": "text", "text": content, "cache_control": CACHE_CONTROL}]
    return [*messages[:last_system], marked, *messages[last_system + 1 :]]


def _unguarded(model: str, provider: str) -> None:
    """Say that litellm's own client stays in use for this route (it follows redirects)."""
    log.warning(
        "model %s: litellm's %s route keeps its own HTTP client, so clinjudge cannot refuse "
        "redirects or cap reply bodies (max_reply_bytes) for it",
        model,
        provider,
    )


async def _close(client: Any) -> None:
    close = getattr(client, "close", None) or getattr(client, "aclose", None)
    if close is not None:
        result = close()
        if hasattr(result, "__await__"):
            await result
