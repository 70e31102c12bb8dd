"""OpenAI and Azure OpenAI Batch APIs: upload requests, create a batch, poll, read the results.

A batch is a JSONL file of chat-completion requests, each tagged with a ``custom_id``. The
provider answers within its completion window (24 h) at half the usual price; results come back
as an output file (answered requests, any HTTP status) and an error file (requests that failed,
expired or were never run). Only this module knows the SDK; callers see :class:`BatchState` and
:class:`BatchLine`.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

import httpx

from clinjudge.errors import UserError
from clinjudge.judges.clients._accounting import cost_at
from clinjudge.judges.clients._batch_lines import BatchResults
from clinjudge.judges.clients._call_config import PLAIN_CALL, CallConfig
from clinjudge.judges.clients._faults import classify_fault, redact_secrets
from clinjudge.judges.clients._pricing import price_per_token
from clinjudge.judges.clients._settings import ModelConfigError, ModelSettings, sampling_args
from clinjudge.judges.clients._structured import OutputMode, ReplySchema, openai_response_format
from clinjudge.judges.clients.providers import provider_for
from clinjudge.rubrics import ChatTurn

T = TypeVar("T")

TERMINAL_STATUSES = frozenset({"completed", "failed", "expired", "cancelled"})
"""Batch states after which nothing more will be answered."""

COMPLETION_WINDOW = "24h"

TOKEN_QUEUE_ERROR = "token_limit_exceeded"
"""The error code of a batch refused for the organization's enqueued-token limit."""
_TOKEN_QUEUE_LIMIT = re.compile(r"Limit: ([\d,]+) enqueued tokens")

MAX_BATCH_REQUESTS = 50_000
"""Request lines one batch input file may hold (OpenAI's limit; Azure OpenAI's is 100,000)."""

MAX_BATCH_FILE_BYTES = 190_000_000
"""Bytes one batch input file may hold: OpenAI and Azure OpenAI refuse a file over 200 MB, and
the margin keeps under that whichever megabyte they count in."""


class BatchLineTooLarge(ModelConfigError):
    """One request line is larger than a batch input file may be."""


class BatchFileError(UserError):
    """The batch input file cannot be written to the temporary folder (a full disk)."""


@dataclass
class BatchFile:
    """A batch input file, written to an unnamed temporary file (owner-only, gone when closed
    or when the process ends, even when it is killed), so its bytes are never all in memory.

    Args:
        file: The JSONL lines.
        custom_ids: The ``custom_id`` of each line, in order.
        size: Bytes in the file.
    """

    file: IO[bytes]
    custom_ids: list[str]
    size: int

    def read(self) -> bytes:
        """The whole file (for tests and small files)."""
        self.file.seek(0)
        return self.file.read()

    def close(self) -> None:
        """Remove the temporary file."""
        self.file.close()

    def __enter__(self) -> BatchFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _encoded_line(line: dict[str, Any]) -> bytes:
    """One line of a batch input file as the provider counts it (UTF-8, newline included); a
    line no file can hold is refused."""
    encoded = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")
    if len(encoded) > MAX_BATCH_FILE_BYTES:
        raise BatchLineTooLarge(
            f"request {line['custom_id']} is {len(encoded):,} bytes, more than a batch input "
            f"file may hold ({MAX_BATCH_FILE_BYTES:,}); judge it with a direct run"
        )
    return encoded


def pack_batch_file(lines: Iterable[dict[str, Any]]) -> BatchFile:
    """The leading request lines that fit one batch input file (at most
    :data:`MAX_BATCH_REQUESTS` lines and :data:`MAX_BATCH_FILE_BYTES` bytes); the lines after
    them are not read, so a long queue is never held whole.

    Args:
        lines: Request lines (:func:`request_line`'s), in the order they should go out.

    Raises:
        BatchLineTooLarge: A line is over the byte limit on its own.
    """
    try:
        out = tempfile.TemporaryFile(prefix="clinjudge-batch-")  # noqa: SIM115 - BatchFile owns it
    except OSError as exc:
        raise _file_error(exc) from exc
    custom_ids: list[str] = []
    size = 0
    try:
        for line in lines:
            encoded = _encoded_line(line)
            if size + len(encoded) > MAX_BATCH_FILE_BYTES:
                break
            _write(out, encoded)
            custom_ids.append(str(line["custom_id"]))
            size += len(encoded)
            if len(custom_ids) >= MAX_BATCH_REQUESTS:
                break
        _write(out, b"", flush=True)
    except BaseException:
        out.close()
        raise
    return BatchFile(out, custom_ids, size)


def _write(out: IO[bytes], data: bytes, *, flush: bool = False) -> None:
    try:
        out.write(data)
        if flush:
            out.flush()
    except OSError as exc:
        raise _file_error(exc) from exc


def _file_error(exc: OSError) -> BatchFileError:
    return BatchFileError(
        f"cannot write the batch input file in {tempfile.gettempdir()}: "
        f"{exc.strerror or exc}; free space there or point TMPDIR at another folder"
    )


def count_batch_files(lines: Iterable[dict[str, Any]]) -> int:
    """How many batch input files these request lines fill, packed in turn as
    :func:`pack_batch_file` packs them (for a dry run).

    Args:
        lines: Request lines, in the order they would go out.

    Raises:
        BatchLineTooLarge: A line is over the byte limit on its own.
    """
    files, count, size = 0, 0, 0
    for line in lines:
        encoded = len(_encoded_line(line))
        if not files or count >= MAX_BATCH_REQUESTS or size + encoded > MAX_BATCH_FILE_BYTES:
            files, count, size = files + 1, 0, 0
        count, size = count + 1, size + encoded
    return files


def batch_supported(settings: ModelSettings) -> bool:
    """Whether a model's provider has a batch API we can drive (OpenAI and Azure OpenAI)."""
    return provider_for(settings).batch_endpoint is not None


def batch_price_per_token(settings: ModelSettings) -> tuple[float, float] | None:
    """Dollars per input and output token of a batch request, None when the price is unknown.

    A ``price`` override in the settings is taken as the batch price as it stands; otherwise
    the price map's batch prices apply, or half its list prices where it has none.

    Args:
        settings: The model's settings.
    """
    if settings.price is not None:
        return price_per_token(settings)
    return provider_for(settings).batch_price_per_token(settings)


def batch_call_cost(
    settings: ModelSettings, prompt_tokens: int, completion_tokens: int
) -> float | None:
    """Dollar cost of one batch request, None when the price is unknown.

    Args:
        settings: The model's settings.
        prompt_tokens: Tokens sent.
        completion_tokens: Tokens generated.
    """
    return cost_at(batch_price_per_token(settings), prompt_tokens, completion_tokens)


def batch_output_mode(settings: ModelSettings, schema: ReplySchema | None) -> OutputMode:
    """How a batch request constrains its reply (``calls.output_mode``).

    Args:
        settings: The judge model's settings (``structured_output``, ``json_mode``).
        schema: The reply schema the request carries, if any.
    """
    setting = settings.structured_output
    if schema is not None and setting in ("auto", "json_schema"):
        return "json_schema"
    if setting != "off" and (
        settings.json_mode or (schema is not None and setting == "json_object")
    ):
        return "json_object"
    return "off"


def request_line(
    settings: ModelSettings,
    custom_id: str,
    turns: Sequence[ChatTurn],
    config: CallConfig = PLAIN_CALL,
) -> dict:
    """One line of a batch input file: the chat request a single judge would send.

    Args:
        settings: Model and sampling settings (the model name, or the Azure deployment).
        custom_id: Identifies the request in the results.
        turns: The conversation.
        config: The call, as :meth:`JudgeModel.generate` takes it (``judge_call_config``):
            its reply schema is sent as strict structured output unless
            ``structured_output`` says otherwise (a batch cannot fall back per call: OpenAI's
            and Azure's batch APIs take schemas, so ``auto`` sends it); its cap on generated
            tokens and request arguments as a direct call sends them.
    """
    if config.max_tokens is not None and config.max_tokens != settings.max_tokens:
        settings = settings.model_copy(update={"max_tokens": config.max_tokens})
    body: dict[str, Any] = {
        "model": settings.name,
        "messages": [{"role": t.role, "content": t.content} for t in turns],
        **sampling_args(settings),
        **config.request_args(),
    }
    schema = config.schema
    mode = batch_output_mode(settings, schema)
    if mode == "json_schema" and schema is not None:
        body["response_format"] = openai_response_format(schema)
    elif mode == "json_object":
        body["response_format"] = {"type": "json_object"}
    url = provider_for(settings).batch_endpoint
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


@dataclass
class BatchState:
    """What the provider says about one batch.

    Args:
        id: The provider's batch id.
        status: ``validating``, ``in_progress``, ``finalizing``, ``completed``, ``failed``,
            ``expired``, ``cancelling`` or ``cancelled``.
        input_file_id: The uploaded requests.
        output_file_id: Answered requests, once there are any.
        error_file_id: Failed requests, once there are any.
        total: Requests in the batch.
        completed: Requests answered.
        failed: Requests that failed.
        errors: Why the whole batch failed, if it did.
        created_at: Unix time the batch was created.
        ended_at: Unix time it reached its final state.
    """

    id: str
    status: str
    input_file_id: str
    output_file_id: str | None = None
    error_file_id: str | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    created_at: float | None = None
    ended_at: float | None = None

    @property
    def done(self) -> bool:
        """True once the provider will answer nothing more."""
        return self.status in TERMINAL_STATUSES

    @property
    def over_token_queue(self) -> bool:
        """The provider refused the whole batch, none of it run: with it, the tokens queued
        for the model by the organization's batches would pass the organization's limit."""
        return self.status == "failed" and any(e.startswith(TOKEN_QUEUE_ERROR) for e in self.errors)

    @property
    def token_queue_limit(self) -> int | None:
        """That limit in tokens, where the provider's message states it."""
        for error in self.errors:
            found = _TOKEN_QUEUE_LIMIT.search(error)
            if error.startswith(TOKEN_QUEUE_ERROR) and found:
                return int(found.group(1).replace(",", ""))
        return None


def _state(batch: Any) -> BatchState:
    counts = getattr(batch, "request_counts", None)
    errors = getattr(getattr(batch, "errors", None), "data", None) or []
    ended = next(
        (
            getattr(batch, name, None)
            for name in ("completed_at", "failed_at", "expired_at", "cancelled_at")
            if getattr(batch, name, None)
        ),
        None,
    )
    return BatchState(
        id=batch.id,
        status=redact_secrets(str(batch.status)),
        input_file_id=batch.input_file_id,
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        total=getattr(counts, "total", 0) or 0,
        completed=getattr(counts, "completed", 0) or 0,
        failed=getattr(counts, "failed", 0) or 0,
        # The provider's words about a failed batch may quote the request (its key with it).
        errors=[
            redact_secrets(f"{getattr(e, 'code', '')}: {getattr(e, 'message', '')}".strip())
            for e in errors
        ],
        created_at=getattr(batch, "created_at", None),
        ended_at=ended,
    )


Sleep = Callable[[float], Awaitable[None]]


def _sdk_errors() -> tuple[type[BaseException], ...]:
    """What the SDK raises for a provider's refusal or an unreachable endpoint. The SDK is
    loaded with the first batch client (`_sdk_client`), not with this module: importing the
    model clients must not cost every command 0.5-1 s (#39); before it loads, none of its
    errors can be raised."""
    openai = sys.modules.get("openai")
    sdk: tuple[type[BaseException], ...] = (openai.OpenAIError,) if openai is not None else ()
    return (*sdk, httpx.HTTPError, OSError)


async def _sdk_call(call: Awaitable[T]) -> T:
    """Await an SDK request; a provider's error comes out as a :class:`ProviderFault`."""
    try:
        return await call
    except _sdk_errors() as exc:
        raise classify_fault(exc) from exc


class BatchClient:
    """Drives one provider's Files and Batches endpoints.

    Polling tolerates up to ``max_poll_failures`` transient errors in a row (on top of the SDK's
    own retries of each request).

    Args:
        settings: The judge model's settings (``openai/`` or ``azure/``).
        client: An ``openai.AsyncOpenAI`` or ``AsyncAzureOpenAI`` (tests inject one).
        sleep: Waits between polls (tests inject a fake).
    """

    def __init__(self, settings: ModelSettings, client: Any = None, *, sleep: Sleep | None = None):
        if client is None:
            check_batch_settings(settings)
        elif not batch_supported(settings):
            raise ModelConfigError(f"model {settings.model}: no batch API for this provider")
        self.settings = settings
        self.client = client or _sdk_client(settings)
        self._sleep = sleep or asyncio.sleep
        self.max_poll_failures = 10

    @property
    def endpoint(self) -> str:
        """The endpoint every request of a batch goes to."""
        return provider_for(self.settings).batch_endpoint or ""

    async def upload(self, file: BatchFile) -> str:
        """Upload a batch input file (:func:`pack_batch_file`'s); returns the file id."""
        # A file object: the upload streams it from disk a chunk at a time.
        file.file.seek(0)
        created = await _sdk_call(
            self.client.files.create(
                file=("clinjudge-batch.jsonl", file.file, "application/jsonl"), purpose="batch"
            )
        )
        return created.id

    async def create(self, input_file_id: str, metadata: dict[str, str]) -> BatchState:
        """Start a batch over an uploaded input file."""
        batch = await _sdk_call(
            self.client.batches.create(
                input_file_id=input_file_id,
                endpoint=self.endpoint,  # type: ignore[arg-type]
                completion_window=COMPLETION_WINDOW,
                metadata=metadata,
            )
        )
        return _state(batch)

    async def find(self, input_file_id: str) -> BatchState | None:
        """The batch created from an input file, if any (to adopt one after a crash)."""
        try:
            async for batch in self.client.batches.list(limit=100):
                if batch.input_file_id == input_file_id:
                    return _state(batch)
        except _sdk_errors() as exc:
            raise classify_fault(exc) from exc
        return None

    async def retrieve(self, batch_id: str) -> BatchState:
        """The batch's current state."""
        return _state(await _sdk_call(self.client.batches.retrieve(batch_id)))

    async def poll(
        self,
        batch_id: str,
        *,
        interval: float = 10.0,
        max_interval: float = 300.0,
        on_update: Callable[[BatchState], None] | None = None,
    ) -> BatchState:
        """Wait until a batch reaches a final state, polling with capped exponential backoff.

        Args:
            batch_id: The batch.
            interval: First wait between polls, in seconds.
            max_interval: Longest wait between polls.
            on_update: Called with every state read.
        """
        wait, misses = interval, 0
        while True:
            try:
                state = await self.retrieve(batch_id)
            except Exception as exc:
                # A day-long wait outlives brief outages; only a lasting or final error stops it
                # (the batch id is stored, so --resume can carry on).
                fault = classify_fault(exc)
                misses += 1
                if not fault.retryable or misses >= self.max_poll_failures:
                    raise fault from exc
                await self._sleep(wait)
                wait = min(wait * 2, max_interval)
                continue
            misses = 0
            if on_update is not None:
                on_update(state)
            if state.done:
                return state
            await self._sleep(wait)
            wait = min(wait * 2, max_interval)

    async def download(self, file_id: str | None, into: BatchResults) -> None:
        """Add the result lines of an output or error file (none when there is no file)."""
        if file_id:
            content = await _sdk_call(self.client.files.content(file_id))
            into.add(content.text.splitlines())

    async def results(self, state: BatchState) -> BatchResults:
        """Every result line of a finished batch by custom id (output file wins on repeats)."""
        results = BatchResults(max_bytes=self.settings.max_reply_bytes)
        await self.download(state.error_file_id, results)
        await self.download(state.output_file_id, results)
        return results

    async def close(self) -> None:
        """Release the client's connections."""
        await self.client.close()


def check_batch_settings(settings: ModelSettings) -> None:
    """Fail early, before a run is written, when a model cannot use a batch API.

    Args:
        settings: The judge model's settings.

    Raises:
        ModelConfigError: Wrong provider, no API key, or no Azure endpoint.
    """
    if not batch_supported(settings):
        raise ModelConfigError(
            f"model {settings.model}: a batch run needs an openai/ or azure/ model "
            "(the OpenAI and Azure OpenAI batch APIs)"
        )
    provider_for(settings).check_batch(settings)


def _sdk_client(settings: ModelSettings) -> Any:
    """The provider's SDK client for its Files and Batches endpoints."""
    return provider_for(settings).batch_client(settings)
