"""An opt-in response cache: the same request to the same model at the same endpoint for the
same sample is answered from the run database instead of the provider, at no cost.

The key is a SHA-256 of everything that can change a reply: the model settings (provider, model
or Azure deployment, endpoint, API version, sampling, JSON mode, client; every field except the
few listed in ``NOT_IN_KEY``), the endpoint and API version the client would read from the
environment when the settings give none, the full request (every message, the tools offered,
the structured-output mode) and the sample's variation (seed and sample number), so a repeated
sample of a run still gets its own answer. A model run in this process (``hf/``, ``hf-hub/``)
is keyed by what its files hold as well (a content hash of its weights, configuration and
tokenizer, or the hub commit), not only by its path. Credentials never enter the key: the
endpoint is hashed without its userinfo and with secret-looking query values redacted. The key
payload carries ``KEY_VERSION``, so entries made under older rules are never reused.

Entries are validated when read, with the rules applied to provider replies (text, a known
finish reason, token counts that are integers within [0, 50 million]); a bad entry is a miss.
Only text replies are cached.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, ValidationError, field_validator

from clinjudge._util.secrets import bare_endpoint
from clinjudge.judges.clients._completion import FinishReason
from clinjudge.judges.clients._faults import ProviderFault
from clinjudge.judges.clients._messages import ChatMessage
from clinjudge.judges.clients._replies import check_token_count
from clinjudge.judges.clients._settings import ModelConfigError, ModelSettings
from clinjudge.judges.clients.providers import provider_for

log = logging.getLogger(__name__)

KEY_VERSION = 2
"""Format of the key payload. 1: model and sampling only (answered for any endpoint); 2: every
setting that can change a reply, endpoint and API version included. An ``hf/`` or ``hf-hub/``
model's payload also holds ``model_files`` (what its files hold): its keys made before that
lack the field, so they can never equal a key made now, and API models' keys, whose rules did
not change, stay valid (a new version would drop every reply they paid for)."""

NOT_IN_KEY = frozenset(
    {
        "api_key_env",
        "timeout",
        "max_reply_bytes",
        "rpm",
        "tpm",
        "max_connections",
        "price",
        "ray",
        "ray_replicas",
        "engine",
    }
)
"""ModelSettings fields left out of the key because they cannot change what a model answers:
which variable holds the key, how long to wait and how much to read (they decide whether a reply
arrives, not what it says), pacing, calls in flight at once, the price, and where and how an
``hf/`` model runs (Ray, its decoding engine: both engines give the same greedy replies,
tested). Every other field, including any added later, is part of the key."""

# Where a client looks for an API version the settings do not give (the OpenAI SDK, autogen's
# Azure client, litellm); each provider names its endpoint variables: two runs with different
# values in the environment reach different servers.
_VERSION_ENV = ("OPENAI_API_VERSION", "AZURE_API_VERSION")

_SCOPE: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "clinjudge_cache_scope", default=None
)


def _endpoint(url: str | None) -> str | None:
    """An endpoint as it enters the key: no userinfo, secret query values redacted, the host and
    scheme in lower case and no trailing slash (the same server however it is spelt)."""
    return bare_endpoint(url) if url else url


def _from_environment(settings: ModelSettings) -> dict[str, str | None]:
    """Endpoint and API version the client reads from the environment, where the settings
    give none."""
    provider = provider_for(settings)
    found: dict[str, str | None] = {}
    if settings.base_url is None:
        names = provider.endpoint_variables(settings)
        found.update((name, _endpoint(os.environ.get(name))) for name in names)
    if settings.api_version is None and provider.reads_api_version:
        found.update((name, os.environ.get(name)) for name in _VERSION_ENV)
    return {name: value for name, value in found.items() if value}


def _message(message: ChatMessage) -> dict[str, Any]:
    """The whole message (who said it, tool calls, thoughts, results), not just its text, in
    the form keys have held since replies were first cached (AutoGen's messages as JSON), so
    that a reply cached then is still found."""
    role = message.role
    if role == "system":
        return {"content": message.content, "type": "SystemMessage"}
    if role == "user":
        return {"content": message.content, "source": message.source, "type": "UserMessage"}
    if role == "tool":
        results = [
            {"content": r.content, "name": r.name, "call_id": r.call_id, "is_error": r.is_error}
            for r in message.results
        ]
        return {"content": results, "type": "FunctionExecutionResultMessage"}
    content: Any = message.content
    if message.tool_calls:
        content = [
            {"id": c.id, "arguments": c.arguments, "name": c.name} for c in message.tool_calls
        ]
    return {
        "content": content,
        "thought": message.thought,
        "source": message.source,
        "type": "AssistantMessage",
    }


def _tool(tool: Any) -> Any:
    # A tool offered is its {"name", "description", "parameters"}, as AutoGen's schema was.
    return dict(tool) if isinstance(tool, Mapping) else str(tool)


def _output_mode(json_output: Any) -> Any:
    if json_output is None or isinstance(json_output, bool):
        return json_output
    if isinstance(json_output, type) and issubclass(json_output, BaseModel):
        # Structured output: the schema the reply must follow is part of the request.
        return {"name": json_output.__name__, "schema": json_output.model_json_schema()}
    return str(json_output)


def cache_payload(
    settings: ModelSettings,
    messages: Sequence[ChatMessage],
    tools: Sequence[Any],
    json_output: Any,
    variation: str,
    extra_args: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What :func:`cache_key` hashes (no credentials in it).

    Args:
        settings: The model's settings (every field not in ``NOT_IN_KEY``).
        messages: The full request.
        tools: Tools offered with it.
        json_output: JSON mode flag, or the structured-output type.
        variation: Seed and sample number of the sample asking.
        extra_args: Anything else the request carries (the client's ``extra_create_args``:
            headers, body fields, a per-call token cap).
    """
    fields = settings.model_dump(mode="json", exclude=set(NOT_IN_KEY))
    fields["base_url"] = _endpoint(settings.base_url)
    payload = {
        "v": KEY_VERSION,
        "settings": fields,
        "environment": _from_environment(settings),
        "messages": [_message(m) for m in messages],
        "tools": [_tool(t) for t in tools],
        "json_output": _output_mode(json_output),
        "variation": variation,
    }
    if extra_args:
        payload["extra"] = dict(extra_args)
    if provider_for(settings).in_process:
        payload["model_files"] = model_files_key(settings)
    return payload


def hash_model_files(models: Iterable[ModelSettings | None]) -> None:
    """Read the files of every in-process model among ``models`` for the cache key now (large
    weights take seconds to hash; a hub commit takes a request), so that the first call does
    not do it on the event loop; best effort: a failure comes back with the calls.

    Args:
        models: The run's model settings (None entries and API models are skipped).
    """
    for settings in models:
        if settings is not None and provider_for(settings).in_process:
            with contextlib.suppress(ProviderFault):
                model_files_key(settings)


def model_files_key(settings: ModelSettings) -> str:
    """What an in-process model's files hold (``hf/``: a content hash, read once per process;
    ``hf-hub/``: the commit loaded), so replaced weights never get the old model's replies.

    Args:
        settings: An ``hf/`` or ``hf-hub/`` model's settings.

    Raises:
        ProviderFault: The files cannot be read, or the hub commit cannot be found (not
            retryable: the call could not be sent either).
    """
    from clinjudge.judges.clients._hf_source import model_fingerprint, source_of

    try:
        return model_fingerprint(source_of(settings.model))
    except (OSError, ModelConfigError) as exc:
        raise ProviderFault(
            f"{settings.model}: cannot read the model's files for the cache key: {exc}"[:500],
            retryable=False,
        ) from exc


def cache_key(
    settings: ModelSettings,
    messages: Sequence[ChatMessage],
    tools: Sequence[Any],
    json_output: Any,
    variation: str,
    extra_args: Mapping[str, Any] | None = None,
) -> str:
    """The cache key of one request: a SHA-256 of :func:`cache_payload`.

    Args:
        settings: The model's settings (every field not in ``NOT_IN_KEY``).
        messages: The full request.
        tools: Tools offered with it.
        json_output: JSON mode flag, or the structured-output type.
        variation: Seed and sample number of the sample asking.
        extra_args: Anything else the request carries (see :func:`cache_payload`).
    """
    payload = cache_payload(settings, messages, tools, json_output, variation, extra_args)
    encoded = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()


class CacheEntry(BaseModel):
    """One cached reply, checked like a provider's reply before it is reused.

    Args:
        text: The reply text.
        finish_reason: Why generation stopped (a :data:`FinishReason`).
        prompt_tokens: Tokens sent, an integer within [0, 50 million].
        completion_tokens: Tokens generated, same bounds.
        tokens_estimated: True when the provider gave no usage and the tokens were counted here.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    text: StrictStr
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    tokens_estimated: StrictBool

    @field_validator("prompt_tokens", "completion_tokens", mode="before")
    @classmethod
    def _token_count(cls, value: Any, info: Any) -> int:
        # Same bounds as a provider's usage (check_token_count); a count is never implied here.
        if value is None or isinstance(value, bool):
            raise ValueError("a token count is required")
        try:
            return check_token_count(info.field_name, value)
        except ProviderFault as fault:
            raise ValueError(str(fault)) from None


def _problem(error: ValidationError | ValueError) -> str:
    """Why an entry was refused, without its content (a reply can quote clinical text)."""
    if isinstance(error, ValidationError) and error.errors():
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "entry"
        return f"{where}: {first['msg']}"
    return "not a JSON object"


class ResponseCache:
    """Cached replies by key, plus the entries added since they were last taken.

    Entries are validated here: one that fails :class:`CacheEntry` is left out (a miss), its
    key listed in :attr:`rejected`, and one warning is logged for all of them.

    Args:
        entries: Known replies: key to ``{"text", "finish_reason", "prompt_tokens",
            "completion_tokens", "tokens_estimated"}`` (as read from the database, unchecked).
        run_id: The run the new entries are written for (``response_cache.run_id``).
    """

    def __init__(self, entries: Mapping[str, Any] | None = None, run_id: str | None = None):
        self.run_id = run_id
        self._entries: dict[str, dict[str, Any]] = {}
        self.rejected: list[str] = []
        """Keys of entries that failed validation (misses; a fresh reply replaces them)."""
        problem = ""
        for key, raw in (entries or {}).items():
            try:
                if not isinstance(raw, Mapping):
                    raise ValueError("not a JSON object")
                self._entries[key] = CacheEntry.model_validate(raw).model_dump()
            except (ValidationError, ValueError) as exc:
                self.rejected.append(key)
                problem = problem or _problem(exc)
        if self.rejected:
            log.warning(
                "response cache: %d unreadable entr%s ignored (%s); those requests go to the "
                "provider and their replies replace them",
                len(self.rejected),
                "y" if len(self.rejected) == 1 else "ies",
                problem,
            )
        self._new: dict[object | None, list[dict[str, Any]]] = {}
        self.hits = 0

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached reply for ``key``, if any (validated)."""
        entry = self._entries.get(key)
        if entry is not None:
            self.hits += 1
        return entry

    def put(self, key: str, model: str, reply: dict[str, Any]) -> None:
        """Remember a reply; its row waits for :meth:`take_new`, under the current
        :meth:`scope` (a reply that would not pass validation on read is not kept).

        Args:
            key: The request's :func:`cache_key`.
            model: The model string, stored with the row.
            reply: ``{"text", "finish_reason", "prompt_tokens", "completion_tokens",
                "tokens_estimated"}``.
        """
        if key in self._entries:
            return
        try:
            entry = CacheEntry.model_validate(reply).model_dump()
        except ValidationError:
            return
        self._entries[key] = entry
        row = {
            "key": key,
            "model": model,
            "created_at": datetime.now(UTC),
            "response": json.dumps(entry),
            "run_id": self.run_id,
        }
        self._new.setdefault(_SCOPE.get(), []).append(row)

    @contextmanager
    def scope(self) -> Iterator[object]:
        """Tag the replies cached meanwhile, by this task and the tasks it starts, so that
        :meth:`take_new` can hand them to the caller (a sample's rows are written with it).

        Yields:
            The token to pass to :meth:`take_new`.
        """
        token = object()
        reset = _SCOPE.set(token)
        try:
            yield token
        finally:
            _SCOPE.reset(reset)

    def take_new(self, scope: object | None = None) -> list[dict[str, Any]]:
        """Rows of the ``response_cache`` table added since they were last taken.

        Args:
            scope: Only the rows added within this :meth:`scope`; None takes every row.
        """
        if scope is not None:
            return self._new.pop(scope, [])
        rows = [row for batch in self._new.values() for row in batch]
        self._new = {}
        return rows
