"""A lean AutoGen ``ChatCompletionClient`` for OpenAI-compatible servers (vLLM, Ollama, TGI...).

autogen-ext's OpenAI client goes through the openai SDK, which spends about 2 ms of CPU per call
transforming and validating request and response objects. For self-hosted judges serving
hundreds of calls a second that is the bottleneck, so calls to a ``--base-url`` endpoint post the
chat-completions JSON directly over one pooled aiohttp session. Errors are raised as
:class:`ProviderFault` with the same status and Retry-After handling as the SDK path.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import orjson
import yarl
from autogen_core.models import CreateResult, LLMMessage, ModelInfo
from autogen_core.tools import Tool, ToolSchema

from clinjudge.judges.clients._base_client import (
    SimpleChatCompletionClient,
    openai_result,
    to_openai_messages,
    tool_schema,
)
from clinjudge.judges.clients._faults import (
    ProviderFault,
    redirect_fault,
    status_fault,
    timeout_fault,
)
from clinjudge.judges.clients._http_guard import DEFAULT_MAX_REPLY_BYTES, read_capped
from clinjudge.judges.clients._structured import openai_response_format, split_schema


class DirectChatCompletionClient(SimpleChatCompletionClient):
    """Chat completions by plain HTTP POST to ``{base_url}/chat/completions``.

    Args:
        model: Model name as the server knows it.
        base_url: Server root ending in ``/v1`` (or wherever ``/chat/completions`` lives).
        api_key: Bearer token, if the server wants one.
        timeout: Seconds per request; None leaves the bound to the caller (a
            :class:`JudgeModel` bounds every call it makes itself: a second timer per request
            would only cost CPU).
        max_reply_bytes: Most bytes of reply body read before the call fails.
        model_info: Capabilities reported to AutoGen.
        **sampling: Request fields sent with every call (temperature, top_p, max_tokens, seed...).
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float | None = 120.0,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        model_info: ModelInfo | None = None,
        **sampling: Any,
    ):
        super().__init__(model_info)
        self._model = model
        # Parsed once: aiohttp would parse a string URL again on every request.
        self._url = yarl.URL(_endpoint(base_url, "chat/completions"))
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._max_reply_bytes = max_reply_bytes
        self._sampling = {k: v for k, v in sampling.items() if v is not None}
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
            self._loop = loop
        return self._session

    def _body(
        self,
        messages: Sequence[LLMMessage],
        json_output: Any,
        extra: Mapping[str, Any],
        tools: Sequence[Tool | ToolSchema],
    ) -> dict[str, Any]:
        schema, extra = split_schema(extra)
        body: dict[str, Any] = {
            "model": self._model,
            "messages": to_openai_messages(messages),
            **self._sampling,
            **extra,
        }
        if schema is not None:
            # vLLM, SGLang, llama.cpp and `transformers serve` take OpenAI's strict form.
            body["response_format"] = openai_response_format(schema)
        elif json_output is True:
            body["response_format"] = {"type": "json_object"}
        if tools:
            body["tools"] = [tool_schema(t) for t in tools]
        return body

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        session = self._get_session()
        payload = _dumps(body)
        # A redirect would carry the prompt to another origin: refuse it, never follow it.
        async with session.post(
            self._url, data=payload, headers=self._headers, allow_redirects=False
        ) as resp:
            if 300 <= resp.status < 400:
                raise redirect_fault(resp.status, resp.headers.get("Location"))
            raw = await read_capped(resp, self._max_reply_bytes)
            if resp.status >= 400:
                raise status_fault(resp.status, raw.decode("utf-8", "replace")[:300], resp.headers)
        try:
            return _loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ProviderFault(
                f"malformed response: body is not JSON ({exc})", retryable=True
            ) from exc

    async def _complete(
        self,
        messages: Sequence[LLMMessage],
        json_output: Any,
        extra: Mapping[str, Any],
        tools: Sequence[Tool | ToolSchema] = (),
    ) -> CreateResult:
        try:
            data = await self._post(self._body(messages, json_output, extra, tools))
        except TimeoutError as exc:
            # aiohttp's own timeout (some of its timeout errors are ClientErrors too): the same
            # fault as the model's timeout, retried as sparingly.
            raise timeout_fault() from exc
        except aiohttp.ClientError as exc:
            raise ProviderFault(
                f"connection failed: {type(exc).__name__}: {exc}"[:500], retryable=True
            ) from exc
        return _to_result(data)

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


def _dumps(body: dict[str, Any]) -> bytes | str:
    """The request body as JSON; orjson is several times faster than json on prompts of many
    kilobytes (what json cannot take either, e.g. an integer beyond 64 bits, goes to json)."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body)


def _loads(raw: bytes) -> Any:
    """A reply body decoded with orjson; json decides (and words the error) when orjson refuses."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def _to_result(data: Any) -> CreateResult:
    try:
        return openai_result(data)
    except ValueError as exc:
        raise ProviderFault(str(exc), retryable=True) from None


def _endpoint(base_url: str, path: str) -> str:
    """``path`` under ``base_url``, keeping the base's query string (``?api-key=...``, an API
    version) at the end where the server looks for it."""
    parts = urllib.parse.urlsplit(base_url)
    joined = parts.path.rstrip("/") + "/" + path
    return urllib.parse.urlunsplit(parts._replace(path=joined))
