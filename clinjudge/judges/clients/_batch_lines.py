"""The result lines of a provider batch (output and error files), read through one validated
model.

A result line is the provider's text, and one hostile or broken line must cost only its own
request: every line is validated (pydantic) before anything reads a field of it, and a line
that names its request but not a usable reply becomes a retryable fault for that request, like
a malformed reply to a direct call. A line that does not even name a request is left out (its
request then has no result, which is retried too).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from clinjudge.judges.clients._completion import Completion
from clinjudge.judges.clients._faults import ProviderFault, reply_too_large, status_fault
from clinjudge.judges.clients._replies import openai_result, reply_usage

_MAX_REASON = 500


class _Envelope(BaseModel):
    """What every line must have to be attributed to a request."""

    model_config = ConfigDict(extra="allow")
    custom_id: StrictStr = Field(min_length=1)


class _Response(BaseModel):
    model_config = ConfigDict(extra="ignore")
    status_code: StrictInt
    body: Any = None


class _Record(BaseModel):
    """One output or error line: the provider's HTTP answer to the request, or why none."""

    model_config = ConfigDict(extra="ignore")
    custom_id: StrictStr
    response: _Response | None = None
    error: Any = None


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    content: StrictStr | None = None
    tool_calls: list[Any] | None = None


class _Choice(BaseModel):
    model_config = ConfigDict(extra="ignore")
    message: _Message
    finish_reason: StrictStr | None = None


class _ReplyBody(BaseModel):
    """A chat completion as a judge's call needs it (the first choice's text and the usage)."""

    model_config = ConfigDict(extra="ignore")
    choices: list[_Choice] = Field(min_length=1)
    usage: dict[str, Any] | None = None


@dataclass
class BatchLine:
    """The result of one request of a batch.

    Args:
        custom_id: The request's id.
        result: The reply, when the request was answered with a well-formed chat completion.
        fault: Why there is no usable reply otherwise.
    """

    custom_id: str
    result: Completion | None = None
    fault: ProviderFault | None = None


def _problem(exc: ValidationError) -> str:
    """Where a line breaks the model, without its values (they are the provider's text)."""
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "line"
    return f"{where}: {first['msg']}"


def _billed(body: Any) -> tuple[int, int] | None:
    """The usage a malformed 200 reply still reports, when it is readable (it is billed)."""
    usage = body.get("usage") if isinstance(body, dict) else None
    try:
        counted = reply_usage(usage)
    except ProviderFault:
        return None
    return None if counted is None else (counted.prompt_tokens, counted.completion_tokens)


def _reply(custom_id: str, body: Any) -> BatchLine:
    """A line answered with HTTP 200: its reply, or the fault of a malformed one."""
    try:
        reply = _ReplyBody.model_validate(body)
    except ValidationError as exc:
        reason = f"malformed response: {_problem(exc)}"[:_MAX_REASON]
        return BatchLine(
            custom_id, fault=ProviderFault(reason, retryable=True, usage=_billed(body))
        )
    if reply.choices[0].message.tool_calls:
        fault = ProviderFault("reply held tool calls, not text", retryable=False)
        return BatchLine(custom_id, fault=fault)
    try:
        # The same reading as a direct reply's: finish reasons named alike, usage checked
        # (counts below 0 or past any model's reach are a malformed reply).
        result = openai_result(reply.model_dump(exclude_none=True))
    except ProviderFault as fault:
        return BatchLine(custom_id, fault=fault)
    return BatchLine(custom_id, result=result)


def _error_text(body: Any) -> str:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return str(error.get("message") or error.get("code") or error)
        if error:
            return str(error)
    return json.dumps(body)[:300] if body is not None else "no details"


def _line_error(custom_id: str, error: Any) -> BatchLine:
    """A line the provider could not run (expired, never run): worth trying again."""
    code = error.get("code") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    reason = f"batch {code if isinstance(code, str) else 'error'}: {message or ''}"
    return BatchLine(custom_id, fault=ProviderFault(reason[:_MAX_REASON], retryable=True))


def _envelope(raw: str) -> tuple[_Envelope, bool] | None:
    """A line's envelope and whether the whole line is readable JSON text; None for a blank
    line or one that names no request."""
    if not raw.strip():
        return None
    try:
        return _Envelope.model_validate_json(raw), True
    except ValidationError:
        pass
    try:
        # What the strict reader refuses but json reads (a lone surrogate, a NaN) can still
        # say whose result it was.
        return _Envelope.model_validate(json.loads(raw)), False
    except (ValueError, ValidationError):
        return None


def parse_result_line(raw: str, *, max_bytes: int | None = None) -> BatchLine | None:
    """Read one line of an output or error file; None for a line that names no request.

    Args:
        raw: The JSON line.
        max_bytes: Most bytes a line may hold (``max_reply_bytes``); a longer one fails its
            request as a direct reply past the cap would.
    """
    read = _envelope(raw)
    if read is None:
        return None
    envelope, readable = read
    custom_id = envelope.custom_id
    if max_bytes is not None and len(raw.encode("utf-8", "surrogatepass")) > max_bytes:
        return BatchLine(custom_id, fault=reply_too_large(max_bytes))
    if not readable:
        reason = "malformed batch result: not valid JSON text (a lone surrogate or a NaN)"
        return BatchLine(custom_id, fault=ProviderFault(reason, retryable=True))
    try:
        record = _Record.model_validate(envelope.model_dump())
    except ValidationError as exc:
        reason = f"malformed batch result: {_problem(exc)}"[:_MAX_REASON]
        return BatchLine(custom_id, fault=ProviderFault(reason, retryable=True))
    response = record.response
    if response is None:
        return _line_error(custom_id, record.error)
    if response.status_code == 200:
        return _reply(custom_id, response.body)
    return BatchLine(
        custom_id, fault=status_fault(response.status_code, _error_text(response.body), None)
    )


class BatchResults:
    """A finished batch's result lines by custom id, kept as the provider sent them and read
    into a :class:`BatchLine` when taken: a line's parsed reply is several times its text.

    A request with two lines in one file has no trustworthy result: it is answered with a
    retryable fault naming the repeat. Between the files, the output file's line wins over the
    error file's (the output file is added last).

    Args:
        max_bytes: Most bytes one line may hold (the judge's ``max_reply_bytes``).
    """

    def __init__(self, max_bytes: int | None = None) -> None:
        self._lines: dict[str, str] = {}
        self._repeated: dict[str, int] = {}
        self.max_bytes = max_bytes

    def add(self, raw_lines: Iterable[str]) -> None:
        """Keep the result lines of one file (blank and unreadable lines are left out)."""
        seen: Counter[str] = Counter()
        for raw in raw_lines:
            read = _envelope(raw)
            if read is None:
                continue
            envelope = read[0]
            seen[envelope.custom_id] += 1
            self._lines[envelope.custom_id] = raw
            self._repeated.pop(envelope.custom_id, None)
        self._repeated.update({custom_id: n for custom_id, n in seen.items() if n > 1})

    def pop(self, custom_id: str) -> BatchLine | None:
        """The result of one request, forgotten here once taken; None when there is none."""
        raw = self._lines.pop(custom_id, None)
        repeats = self._repeated.pop(custom_id, None)
        if raw is None:
            return None
        if repeats is not None:
            reason = f"malformed batch result: {repeats} result lines for this one request"
            return BatchLine(custom_id, fault=ProviderFault(reason, retryable=True))
        return parse_result_line(raw, max_bytes=self.max_bytes)

    def __len__(self) -> int:
        return len(self._lines)
