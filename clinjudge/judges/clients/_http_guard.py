"""Limits on what a model endpoint can make us do: no redirects, bounded reply bodies.

A redirect would send the whole prompt (clinical text) to another origin, and an endless body
would be buffered in memory before any JSON parsing could fail. Both are refused while the
reply is read, for our aiohttp client and for the httpx clients handed to the SDKs.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import httpx

from clinjudge.judges.clients._faults import ProviderFault, redirect_fault, reply_too_large

DEFAULT_MAX_REPLY_BYTES = 8 * 1024 * 1024
_CHUNK = 64 * 1024


def _declared_length(headers: Any) -> int | None:
    try:
        return int(headers.get("content-length", ""))
    except (TypeError, ValueError):
        return None


def readable_whole(resp: aiohttp.ClientResponse, limit: int) -> bool:
    """Whether the reply's body can be read in one piece (a model call's usual reply): its
    length is declared, within ``limit``, and neither compressed nor chunked. Otherwise
    :func:`read_capped` reads it.

    Args:
        resp: An open response (not yet read).
        limit: Most bytes accepted.

    Raises:
        ProviderFault: The declared length is over ``limit`` (nothing is read).
    """
    headers = resp.headers
    try:
        declared = int(headers.get("content-length", ""))
    except (TypeError, ValueError):
        return False
    if declared > limit:
        raise reply_too_large(limit)
    # The parser hands over exactly the declared bytes, already checked against the limit.
    return "Content-Encoding" not in headers and "Transfer-Encoding" not in headers


async def read_capped(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body of an aiohttp response, or a fault as soon as it passes ``limit`` bytes.

    Args:
        resp: An open response (not yet read).
        limit: Most bytes accepted (after decompression).
    """
    if readable_whole(resp, limit):
        return await resp.content.read()
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(_CHUNK):
        size += len(chunk)
        if size > limit:
            raise reply_too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


class _CappedStream(httpx.AsyncByteStream):
    """The body, decompressed here when gzip or deflate, never more than ``limit`` bytes of it.

    Decompressing here (not in httpx) bounds the output too, so a small compressed body that
    expands to gigabytes fails at the limit like any other.
    """

    def __init__(self, inner: Any, limit: int, encoding: str):
        self._inner = inner
        self._limit = limit
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 47}
        self._inflate = zlib.decompressobj(wbits[encoding]) if encoding in wbits else None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for raw in self._inner:
            for chunk in self._decoded(raw):
                size += len(chunk)
                if size > self._limit:
                    raise reply_too_large(self._limit)
                yield chunk
        if self._inflate is not None:
            tail = self._inflate.flush()
            if size + len(tail) > self._limit:
                raise reply_too_large(self._limit)
            yield tail

    def _decoded(self, raw: bytes) -> Iterator[bytes]:
        if self._inflate is None:
            yield raw
            return
        data = raw
        while data:
            try:
                out = self._inflate.decompress(data, self._limit + 1)
            except zlib.error as exc:
                raise ProviderFault(
                    f"malformed response: bad compressed body ({exc})", retryable=True
                ) from exc
            yield out
            data = self._inflate.unconsumed_tail

    async def aclose(self) -> None:
        await self._inner.aclose()


def httpx_response_guard(limit: int) -> Callable[[httpx.Response], Awaitable[None]]:
    """An httpx ``response`` event hook: refuse redirects and cap the body at ``limit`` bytes.

    Hooks run before the body is read, so the cap holds however the SDK reads it. Use with
    ``follow_redirects=False`` (the hook names the Location either way).

    Args:
        limit: Most bytes accepted.
    """

    async def guard(response: httpx.Response) -> None:
        if response.is_redirect or 300 <= response.status_code < 400:
            raise redirect_fault(response.status_code, response.headers.get("location"))
        declared = _declared_length(response.headers)
        if declared is not None and declared > limit:
            raise reply_too_large(limit)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in {"identity", "", "gzip", "x-gzip", "deflate"}:
            raise ProviderFault(
                f"malformed response: unsupported content-encoding {encoding[:40]!r}",
                retryable=False,
            )
        # Decoded here, capped on both sides of decompression; httpx must not decode again.
        response.headers.pop("content-encoding", None)
        response.stream = _CappedStream(response.stream, limit, encoding)

    return guard


def guarded_httpx_args(limit: int) -> dict[str, Any]:
    """Keyword arguments for an ``httpx.AsyncClient`` (or subclass) used for model calls."""
    return {
        "follow_redirects": False,
        "event_hooks": {"response": [httpx_response_guard(limit)]},
        # Only encodings the guard can decode with a bound on the output.
        "headers": {"Accept-Encoding": "gzip, deflate"},
    }
