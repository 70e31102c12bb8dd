"""Map provider exceptions to one fault type the runner can act on.

Provider SDKs raise many exception classes; only this module knows them. Everything else in
clinjudge sees :class:`ProviderFault` with ``retryable`` and ``retry_after``.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import sys
import time
from typing import Any

import httpx

from clinjudge._util.secrets import (
    REDACTED,
    redact_secrets,
    redact_url,
    remember_secret,
    remember_url_secrets,
    url_secrets,
)
from clinjudge.errors import ClinJudgeError

__all__ = [
    "REDACTED",
    "TIMED_OUT",
    "ProviderFault",
    "redact_secrets",
    "redact_url",
    "remember_secret",
    "remember_url_secrets",
    "url_secrets",
]

_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}


class ProviderFault(ClinJudgeError):
    """A model call failed.

    Args:
        reason: Short description for the calls table (credentials are redacted from it).
        retryable: Whether trying again may succeed.
        retry_after: Seconds the provider asked us to wait, if it said.
        usage: (prompt, completion) tokens the provider billed for the failed reply, if it said.
        timed_out: The call ran past its timeout (retried fewer times than other faults).
    """

    def __init__(
        self,
        reason: str,
        *,
        retryable: bool,
        retry_after: float | None = None,
        usage: tuple[int, int] | None = None,
        timed_out: bool = False,
    ):
        reason = redact_secrets(reason)
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after
        self.usage = usage
        self.timed_out = timed_out
        self.cost_usd: float | None = None
        """Dollar cost of ``usage``, set by the model that made the call."""
        self.output_mode: str | None = None
        """How the failed request constrained its reply (``json_schema``, ``json_object`` or
        ``off``), set by the model that made the call."""


def _parse_retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        # An unparseable header means "no advice": the runner's own backoff applies.
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if parsed is None or parsed.tzinfo is None:
            return None
        seconds = parsed.timestamp() - time.time()
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def redirect_fault(status: int, location: str | None) -> ProviderFault:
    """A refused redirect: following it would send the prompt to another address.

    Args:
        status: The 3xx status.
        location: The Location header, if any.
    """
    where = (location or "(no Location header)")[:200]
    return ProviderFault(
        f"redirect refused: HTTP {status} to {where}; model calls never follow redirects "
        "(set base_url to the final address if it is trusted)",
        retryable=False,
    )


def reply_too_large(limit: int) -> ProviderFault:
    """A reply body past ``max_reply_bytes``; reading stopped at the limit.

    Args:
        limit: The cap in bytes.
    """
    return ProviderFault(f"reply too large: body exceeds max_reply_bytes={limit}", retryable=False)


TIMED_OUT = "timed out"
"""The reason of a call that ran past its timeout (``calls.error`` reads exactly this)."""


def timeout_fault() -> ProviderFault:
    """A call that ran past the model's ``timeout``."""
    return ProviderFault(TIMED_OUT, retryable=True, timed_out=True)


def status_fault(status: int, message: str, headers: Any) -> ProviderFault:
    """A fault for an HTTP error status, with the provider's Retry-After if it sent one.

    Args:
        status: HTTP status code.
        message: Error text from the provider.
        headers: Response headers (any mapping with ``get``).
    """
    if 300 <= status < 400:
        return redirect_fault(status, headers.get("location") if headers is not None else None)
    retryable = status in _RETRYABLE_STATUS or status >= 500
    label = "rate limited" if status == 429 else f"HTTP {status}"
    return ProviderFault(
        f"{label}: {message}"[:500],
        retryable=retryable,
        retry_after=_parse_retry_after(headers),
    )


def _error_headers(exc: BaseException) -> Any:
    # litellm's errors subclass openai's but carry a synthetic ``response`` without headers; the
    # provider's real headers (Retry-After) are kept in ``litellm_response_headers``.
    headers = getattr(exc, "litellm_response_headers", None)
    if headers:
        return headers
    return getattr(getattr(exc, "response", None), "headers", None)


def _cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _connection_error_cause(exc: BaseException) -> ConnectionError | None:
    # httpx-aiohttp reports a reset as ConnectTimeout, which the openai SDK turns into
    # APITimeoutError; the ConnectionError underneath says what really happened.
    found = _cause(exc, ConnectionError)
    return found if isinstance(found, ConnectionError) else None


def classify_fault(exc: BaseException) -> ProviderFault:
    """Turn any exception raised by a model call into a :class:`ProviderFault`.

    Args:
        exc: The exception raised by the client.
    """
    if isinstance(exc, ProviderFault):
        return exc
    ours = _cause(exc, ProviderFault)
    if isinstance(ours, ProviderFault):
        # Raised by our own HTTP hooks (redirect, size cap) and wrapped by an SDK.
        return ours
    # No openai error can exist before the SDK is loaded (the direct and mock clients never
    # load it), so the check does not import it: the store's commands classify no faults, and
    # loading the SDK here cost every one of them 0.5-1 s (#39).
    openai: Any = sys.modules.get("openai")
    if openai is not None and isinstance(exc, openai.APIStatusError):
        return status_fault(exc.status_code, exc.message or str(exc), _error_headers(exc))
    sdk_timeout = (openai.APITimeoutError,) if openai is not None else ()
    if isinstance(exc, (*sdk_timeout, asyncio.TimeoutError, TimeoutError)):
        reset = _connection_error_cause(exc)
        if reset is not None:
            return ProviderFault(f"connection failed: {reset}"[:500], retryable=True)
        return timeout_fault()
    sdk_connection = (openai.APIConnectionError,) if openai is not None else ()
    if isinstance(exc, (*sdk_connection, httpx.TransportError, ConnectionError)):
        return ProviderFault(f"connection failed: {exc}"[:500], retryable=True)
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        message = getattr(exc, "message", None) or str(exc)
        return status_fault(status, message, _error_headers(exc))
    if isinstance(exc, json.JSONDecodeError | IndexError | KeyError | AttributeError | TypeError):
        # The SDKs raise these when a server answers 200 with a body that is not a completion.
        return ProviderFault(
            f"malformed response: {type(exc).__name__}: {exc}"[:500], retryable=True
        )
    if isinstance(exc, ValueError) and "choices" in str(exc).lower():
        return ProviderFault(f"malformed response: {exc}"[:500], retryable=True)
    return ProviderFault(f"{type(exc).__name__}: {exc}"[:500], retryable=False)
