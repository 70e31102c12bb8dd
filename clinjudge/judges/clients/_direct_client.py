"""A lean client for OpenAI-compatible servers (vLLM, Ollama, TGI...).

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
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import yarl

from clinjudge.judges.clients._client import Generation, ModelClient
from clinjudge.judges.clients._completion import Completion
from clinjudge.judges.clients._faults import (
    ProviderFault,
    redirect_fault,
    status_fault,
    timeout_fault,
)
from clinjudge.judges.clients._http_guard import (
    DEFAULT_MAX_REPLY_BYTES,
    read_capped,
    readable_whole,
)
from clinjudge.judges.clients._messages import tool_schema
from clinjudge.judges.clients._replies import openai_result
from clinjudge.judges.clients._structured import ReplySchema, openai_response_format


class DirectClient(ModelClient):
    """Chat completions by plain HTTP POST to ``{base_url}/chat/completions``.

    Args:
        model: Model name as the server knows it.
        base_url: Server root ending in ``/v1`` (or wherever ``/chat/completions`` lives).
        api_key: Bearer token, if the server wants one.
        timeout: Seconds per request; None leaves the bound to the caller (a
            :class:`JudgeModel` bounds every call it makes itself: a second timer per request
            would only cost CPU).
        max_reply_bytes: Most bytes of reply body read before the call fails.
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float | None = 120.0,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ):
        self._model = model
        # Parsed once: aiohttp would parse a string URL again on every request.
        self._url = yarl.URL(_endpoint(base_url, "chat/completions"))
        # The session's own headers: aiohttp merges a request's headers into a new mapping on
        # every request, its session's it copies as they are.
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._max_reply_bytes = max_reply_bytes
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._session
        if session is None or self._loop is not loop or session.closed:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
            session = self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, headers=self._headers
            )
            self._loop = loop
        return session

    def _body(self, call: Generation, *, prepared: bool = True) -> dict[str, Any]:
        """The request as it is sent: JSON values and, unless ``prepared`` is False (for json,
        which knows no fragments), :class:`orjson.Fragment` for the parts that are the same on
        every call of a run (the system prompt, the reply schema), serialized once."""
        wire = call.messages
        body: dict[str, Any] = {
            "model": self._model,
            "messages": [m if m["role"] != "system" else _prejsoned(m) for m in wire]
            if prepared
            else wire,
            **call.args,
        }
        schema = call.reply_schema
        if schema is not None:
            # vLLM, SGLang, llama.cpp and `transformers serve` take OpenAI's strict form.
            body["response_format"] = (
                _response_format(schema) if prepared else openai_response_format(schema)
            )
        elif call.mode == "json_object":
            body["response_format"] = {"type": "json_object"}
        tools = call.config.tools
        if tools:
            body["tools"] = [tool_schema(t) for t in tools]
        return body

    async def generate(self, call: Generation) -> Completion:
        """One request and its reply.

        Args:
            call: The request.
        """
        # The whole exchange in this one coroutine (not complete -> _complete -> a post
        # helper): every coroutine between the task and the socket is resumed on each wake-up.
        try:
            # orjson is several times faster than json on prompts of many kilobytes.
            payload: bytes | str = orjson.dumps(self._body(call))
        except TypeError:
            # What orjson cannot take (an integer beyond 64 bits, a lone surrogate) json can.
            payload = json.dumps(self._body(call, prepared=False))
        limit = self._max_reply_bytes
        try:
            # A redirect would carry the prompt to another origin: refuse it, never follow it.
            async with self._get_session().post(
                self._url, data=payload, allow_redirects=False
            ) as resp:
                status = resp.status
                if 300 <= status < 400:
                    raise redirect_fault(status, resp.headers.get("Location"))
                if readable_whole(resp, limit):
                    raw = await resp.content.read()
                else:
                    raw = await read_capped(resp, limit)
                if status >= 400:
                    raise status_fault(status, raw.decode("utf-8", "replace")[:300], resp.headers)
        except TimeoutError as exc:
            # aiohttp's own timeout (some of its timeout errors are ClientErrors too): the same
            # fault as the model's timeout, retried as sparingly.
            raise timeout_fault() from exc
        except aiohttp.ClientError as exc:
            raise ProviderFault(
                f"connection failed: {type(exc).__name__}: {exc}"[:500], retryable=True
            ) from exc
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = _loads(raw)
        try:
            return openai_result(data)
        except ValueError as exc:
            raise ProviderFault(str(exc), retryable=True) from None

    async def close(self) -> None:
        """Close the pooled session."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


_PREJSONED: dict[int, tuple[object, orjson.Fragment | None]] = {}
"""Serialized forms of what every call of a run sends again (the system prompt's message, the
reply schema's ``response_format``), by the identity of the object they come from. Each entry
holds its object, so an id is never reused while the entry lives; strings and reply schemas are
never changed after they are made."""


def _serialized_once(owner: Any, value_of: Callable[[Any], Any]) -> orjson.Fragment | None:
    """``value_of(owner)`` serialized, once per ``owner``; None where orjson cannot serialize
    it (the body then goes to json, unprepared)."""
    known = _PREJSONED.get(id(owner))
    if known is not None and known[0] is owner:
        return known[1]
    try:
        fragment: orjson.Fragment | None = orjson.Fragment(orjson.dumps(value_of(owner)))
    except TypeError:
        fragment = None
    if len(_PREJSONED) >= 256:  # system texts made per call (a persona's prefix) come and go
        _PREJSONED.clear()
    _PREJSONED[id(owner)] = (owner, fragment)
    return fragment


def _system_message(content: str) -> dict[str, Any]:
    return {"role": "system", "content": content}


def _prejsoned(message: dict[str, Any]) -> dict[str, Any] | orjson.Fragment:
    """A chat-format message, serialized once when it is a system prompt (the same text object
    comes back with every call of a run)."""
    content = message["content"]
    if message["role"] != "system" or type(content) is not str or len(message) != 2:
        return message
    fragment = _serialized_once(content, _system_message)
    return message if fragment is None else fragment


def _response_format(schema: ReplySchema) -> dict[str, Any] | orjson.Fragment:
    """OpenAI's strict ``response_format`` for a schema, serialized once per schema object."""
    fragment = _serialized_once(schema, openai_response_format)
    return openai_response_format(schema) if fragment is None else fragment


def _loads(raw: bytes) -> Any:
    """A reply body orjson refused, decoded by json (which takes what orjson does not, e.g. a
    NaN, and words the error); a body neither takes is a retryable fault."""
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProviderFault(
            f"malformed response: body is not JSON ({exc})", retryable=True
        ) from exc


def _endpoint(base_url: str, path: str) -> str:
    """``path`` under ``base_url``, keeping the base's query string (``?api-key=...``, an API
    version) at the end where the server looks for it."""
    parts = urllib.parse.urlsplit(base_url)
    joined = parts.path.rstrip("/") + "/" + path
    return urllib.parse.urlunsplit(parts._replace(path=joined))
