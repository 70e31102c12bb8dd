"""One model behind one AutoGen client, with per-call timing, tokens, cost and fault mapping."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Literal, overload

from autogen_core.models import (
    ChatCompletionClient,
    CreateResult,
    LLMMessage,
    RequestUsage,
)

from clinjudge.errors import UserError
from clinjudge.judges.clients._accounting import (
    TokenPrices,
    call_cost,
    count_message_tokens,
    count_tokens,
    token_prices,
)
from clinjudge.judges.clients._base_client import (
    GENERIC_MODEL_INFO,
    MAX_TOKENS_PER_CALL,
    PromptUsage,
    SimpleChatCompletionClient,
    TurnMessages,
    check_token_count,
    message_text,
    prompt_cache_counts,
    to_autogen_messages,
)
from clinjudge.judges.clients._cache import ResponseCache, cache_key
from clinjudge.judges.clients._deadlines import CallDeadlines
from clinjudge.judges.clients._direct_client import DirectChatCompletionClient
from clinjudge.judges.clients._faults import (
    ProviderFault,
    classify_fault,
    redact_url,
    remember_secret,
    remember_url_secrets,
)
from clinjudge.judges.clients._http_guard import guarded_httpx_args
from clinjudge.judges.clients._litellm_client import LiteLLMChatCompletionClient
from clinjudge.judges.clients._mock_client import MockChatCompletionClient
from clinjudge.judges.clients._settings import (
    AZURE_PROVIDERS,
    HF_PROVIDERS,
    OPENAI_PROVIDERS,
    ModelSettings,
)
from clinjudge.judges.clients._structured import (
    OutputMode,
    ReplySchema,
    is_schema_rejection,
    openai_response_format,
    requested_schema,
)
from clinjudge.rubrics import STRUCTURED_OUTPUT_KEY, ChatTurn, Rubric

log = logging.getLogger(__name__)

_DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "azure": "AZURE_OPENAI_API_KEY"}


class ModelConfigError(UserError):
    """Model settings that cannot produce a working client."""


@dataclass
class CallOutcome:
    """What one successful model call returned.

    Args:
        text: Reply text.
        finish_reason: ``stop``, ``length`` and so on.
        prompt_tokens: Tokens sent (from the API, or estimated).
        completion_tokens: Tokens generated (from the API, or estimated).
        tokens_estimated: True when the provider gave no usage and tiktoken counted.
        cost_usd: Dollar cost, None when the price is unknown.
        latency_s: Wall-clock seconds of the call.
        result: The AutoGen result itself (text or tool calls), for agents.
        cached: True when the reply came from the response cache (``--cache``).
    """

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    tokens_estimated: bool
    cost_usd: float | None
    latency_s: float
    result: CreateResult | None = None
    cached: bool = False
    """Answered from the response cache: no provider call, no cost."""
    max_tokens: int | None = None
    """The cap on generated tokens the call was sent with (None: none or unknown)."""
    output_mode: OutputMode | None = None
    """How the reply was constrained: ``json_schema``, ``json_object`` or ``off`` (None: no
    request was sent, e.g. a cache hit)."""
    cached_input_tokens: int = 0
    """Of ``prompt_tokens``, those the provider read from its prompt cache (billed at the
    cached-input price)."""
    cache_write_tokens: int = 0
    """Of ``prompt_tokens``, those written to the provider's prompt cache (Anthropic)."""
    cache_saving_usd: float | None = None
    """Dollars the provider's prompt cache saved on this call against full input prices
    (negative when cache writes cost more than they saved; None: price unknown)."""


def _sampling_args(settings: ModelSettings) -> dict[str, Any]:
    args: dict[str, Any] = {
        "max_tokens": settings.max_tokens,
        "seed": settings.seed,
        "reasoning_effort": settings.reasoning_effort,
    }
    if settings.is_reasoning_model:
        # OpenAI's reasoning models reject max_tokens and want max_completion_tokens.
        args["max_completion_tokens"] = args.pop("max_tokens")
    else:
        args["temperature"] = settings.temperature
        args["top_p"] = settings.top_p
    return {k: v for k, v in args.items() if v is not None}


@overload
def _api_key(settings: ModelSettings, required: Literal[True]) -> str: ...
@overload
def _api_key(settings: ModelSettings, required: bool) -> str | None: ...
def _api_key(settings: ModelSettings, required: bool) -> str | None:
    env_name = settings.api_key_env or _DEFAULT_KEY_ENV.get(settings.provider)
    key = os.environ.get(env_name) if env_name else None
    remember_secret(key)
    if key is None and required:
        raise ModelConfigError(
            f"model {settings.model}: no API key; set {env_name} or pick another variable with "
            "api_key_env in the config (the key itself is never written to config or database)"
        )
    return key


def check_credentials(settings: ModelSettings) -> None:
    """Raise what building the model's client would raise for a missing API key or endpoint,
    without building it: a run checks every model this way before it is stored.

    Args:
        settings: Model settings.

    Raises:
        ModelConfigError: The key's environment variable is unset, the Azure endpoint is
            missing, a stored base_url lost its credentials, or an ``hf/`` model is no model
            file or folder on this machine (``hf-hub/``: no repository id).
    """
    provider = settings.provider
    if provider in HF_PROVIDERS:
        # Imported here: the module imports this one. Reads local files only, never the hub.
        from clinjudge.judges.clients._hf_source import source_of

        source_of(settings.model)
        return
    if settings.is_mock:
        return
    _check_stored_url(settings)
    _check_one_authorization(settings)
    if provider in OPENAI_PROVIDERS:
        direct = settings.client == "direct" or (
            settings.client == "auto" and settings.base_url is not None
        )
        _api_key(settings, required=not direct and settings.base_url is None)
    elif provider in AZURE_PROVIDERS:
        if not (settings.base_url or os.environ.get("AZURE_OPENAI_ENDPOINT")):
            raise ModelConfigError(
                f"model {settings.model}: set base_url or AZURE_OPENAI_ENDPOINT to the Azure "
                "endpoint"
            )
        _api_key(settings, required=True)
    # litellm providers find their keys themselves (each under its own variable names).


def _check_stored_url(settings: ModelSettings) -> None:
    if settings.carries_redacted_credentials:
        raise ModelConfigError(
            f"model {settings.model}: its base_url held credentials, which are never stored "
            f"({settings.base_url}); put the key in an environment variable named by "
            "api_key_env and give base_url without it"
        )


def _check_one_authorization(settings: ModelSettings) -> None:
    """A base_url with ``user:password@`` sends those as the request's Authorization; a key in
    the environment would be a second one, which the HTTP client refuses on every call."""
    if not settings.base_url or "@" not in settings.base_url:
        return
    parts = urllib.parse.urlsplit(settings.base_url)
    env_name = settings.api_key_env or _DEFAULT_KEY_ENV.get(settings.provider)
    if (parts.username or parts.password) and env_name and os.environ.get(env_name):
        raise ModelConfigError(
            f"model {settings.model}: base_url carries credentials (user:password@) and "
            f"{env_name} is set too; a request can carry only one: remove the user:password@ "
            f"part of base_url, or unset {env_name} (or name an unset variable with api_key_env)"
        )


def _http_client(settings: ModelSettings) -> Any:
    # httpx's connection pool scans every connection on each request (O(connections) work
    # with a socket poll each), which dominates CPU at high concurrency; aiohttp's pool does not.
    import openai

    return openai.DefaultAioHttpClient(
        timeout=settings.timeout, **guarded_httpx_args(settings.max_reply_bytes)
    )


def _autogen_client_args(settings: ModelSettings) -> dict[str, Any]:
    # Retries belong to our runner (so every attempt is recorded), never to the SDK.
    return {
        "max_retries": 0,
        "timeout": settings.timeout,
        "include_name_in_message": False,
        "http_client": _http_client(settings),
        **_sampling_args(settings),
    }


def _openai_client(settings: ModelSettings) -> ChatCompletionClient:
    from autogen_ext.models.openai import OpenAIChatCompletionClient
    from autogen_ext.models.openai._model_info import get_info

    # A local server (vLLM, Ollama, ...) usually needs no key; api.openai.com does.
    key = _api_key(settings, required=settings.base_url is None) or "not-needed"
    # Left out rather than None where unset: autogen's typed kwargs take no None (same effect).
    optional: dict[str, Any] = {}
    if settings.base_url is not None:
        optional["base_url"] = settings.base_url
    try:
        get_info(settings.name)
    except (KeyError, ValueError):
        optional["model_info"] = GENERIC_MODEL_INFO
    return _reporting_usage(
        OpenAIChatCompletionClient(
            model=settings.name, api_key=key, **optional, **_autogen_client_args(settings)
        )
    )


_SDK_USAGE: ContextVar[list[Any] | None] = ContextVar("clinjudge_sdk_usage", default=None)
"""Where the SDK under an autogen-ext client leaves each reply's usage object, per call."""


def _reporting_usage(client: ChatCompletionClient) -> ChatCompletionClient:
    """Let an autogen-ext OpenAI or Azure client's replies report their whole usage.

    autogen-ext keeps only prompt and completion tokens of a reply, dropping
    ``prompt_tokens_details.cached_tokens``; the SDK client under it is wrapped so that each
    reply's usage object reaches :meth:`JudgeModel._attempt` through a context variable (set
    per call; the SDK runs in a task that inherits it).
    """
    sdk = getattr(client, "_client", None)
    if sdk is None:
        return client
    for owner, name in ((sdk.chat.completions, "create"), (sdk.beta.chat.completions, "parse")):
        original = getattr(owner, name)

        async def reporting(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            reply = await _original(*args, **kwargs)
            sink = _SDK_USAGE.get()
            if sink is not None:
                sink.append(getattr(reply, "usage", None))
            return reply

        setattr(owner, name, reporting)
    return client


def _with_sdk_usage(result: CreateResult, sink: list[Any]) -> CreateResult:
    """autogen-ext's result with the prompt-cache counts of the reply its SDK received."""
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


def _direct_client(settings: ModelSettings, bounded: bool = False) -> ChatCompletionClient:
    if settings.base_url is None:
        raise ModelConfigError(f"model {settings.model}: client 'direct' needs a base_url")
    return DirectChatCompletionClient(
        settings.name,
        settings.base_url,
        api_key=_api_key(settings, required=False),
        timeout=None if bounded else settings.timeout,
        max_reply_bytes=settings.max_reply_bytes,
        **_sampling_args(settings),
    )


def _azure_client(settings: ModelSettings) -> ChatCompletionClient:
    from autogen_ext.models.openai import AzureOpenAIChatCompletionClient

    endpoint = settings.base_url or os.environ.get("AZURE_OPENAI_ENDPOINT")
    if not endpoint:
        raise ModelConfigError(
            f"model {settings.model}: set base_url or AZURE_OPENAI_ENDPOINT to the Azure endpoint"
        )
    version = settings.api_version or os.environ.get("OPENAI_API_VERSION") or "2024-10-21"
    return _reporting_usage(
        AzureOpenAIChatCompletionClient(
            azure_deployment=settings.name,
            model=settings.price_as or settings.name,
            azure_endpoint=endpoint,
            api_version=version,
            api_key=_api_key(settings, required=True),
            model_info=GENERIC_MODEL_INFO,
            **_autogen_client_args(settings),
        )
    )


def _litellm_client(settings: ModelSettings) -> ChatCompletionClient:
    model = settings.model.removeprefix("litellm/")
    key = _api_key(settings, required=False)
    if key is None and settings.base_url and model.startswith("openai/"):
        # litellm's OpenAI route refuses to send without a key (or OPENAI_API_KEY), even to a
        # local OpenAI-compatible server that needs none.
        key = os.environ.get("OPENAI_API_KEY") or "not-needed"
    return LiteLLMChatCompletionClient(
        model,
        api_base=settings.base_url,
        api_key=key,
        api_version=settings.api_version,
        timeout=settings.timeout,
        max_reply_bytes=settings.max_reply_bytes,
        **_sampling_args(settings),
    )


def build_client(settings: ModelSettings, rubric: Rubric) -> ChatCompletionClient:
    """An AutoGen client for the provider named in ``settings.model``.

    ``openai/...`` uses autogen-ext's OpenAI client, or with ``base_url`` (any OpenAI-compatible
    server) our lean direct client unless ``client: autogen`` is set; ``azure/<deployment>``
    uses autogen-ext's Azure client, ``mock/...`` the simulated judge, ``hf/<path>`` a model
    run in this process, and every other provider goes through litellm.

    Args:
        settings: Model and sampling settings.
        rubric: Needed by the mock provider to follow the rubric's contract.
    """
    return _build_client(settings, rubric)


def _build_client(
    settings: ModelSettings, rubric: Rubric, *, bounded: bool = False
) -> ChatCompletionClient:
    """:func:`build_client`; ``bounded``: the caller bounds every call by ``settings.timeout``
    itself (:class:`JudgeModel`), so the direct client sets no timer of its own."""
    provider = settings.provider
    if settings.is_mock:
        return MockChatCompletionClient(rubric, settings.name)
    if provider in HF_PROVIDERS:  # in-process transformers model; torch is imported on use
        from clinjudge.judges.clients._hf_client import hf_client

        return hf_client(settings, rubric)
    _check_stored_url(settings)
    remember_url_secrets(settings.base_url)
    if provider in OPENAI_PROVIDERS:
        use_direct = settings.client == "direct" or (
            settings.client == "auto" and settings.base_url is not None
        )
        return _direct_client(settings, bounded) if use_direct else _openai_client(settings)
    if provider in AZURE_PROVIDERS:
        return _azure_client(settings)
    return _litellm_client(settings)


def _foreign_openai(client: ChatCompletionClient) -> bool:
    """autogen-ext's OpenAI or Azure client (not ours: it does not know our schema key)."""
    return type(client).__module__.startswith("autogen_ext.models.openai")


def _cache_entry(outcome: CallOutcome) -> dict[str, Any]:
    return {
        "text": outcome.text,
        "finish_reason": outcome.finish_reason,
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
        "tokens_estimated": outcome.tokens_estimated,
    }


def _cached_outcome(entry: dict[str, Any]) -> CallOutcome:
    """A reply from the cache: the stored text and token counts, no cost, no wait."""
    usage = RequestUsage(
        prompt_tokens=int(entry["prompt_tokens"]), completion_tokens=int(entry["completion_tokens"])
    )
    result = CreateResult(
        finish_reason=entry["finish_reason"], content=entry["text"], usage=usage, cached=True
    )
    return CallOutcome(
        text=entry["text"],
        finish_reason=entry["finish_reason"],
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        tokens_estimated=bool(entry["tokens_estimated"]),
        cost_usd=0.0,
        latency_s=0.0,
        result=result,
        cached=True,
    )


@dataclass(frozen=True, slots=True)
class _SettingsFacts:
    """What every call reads from one settings object, worked out once for it (settings are
    replaced, never changed in place)."""

    settings: ModelSettings
    prices: TokenPrices | None
    is_mock: bool
    probes_schemas: bool
    """A ``json_schema`` call under ``structured_output: auto`` first finds out whether the
    endpoint takes schemas (not the simulated judge, nor an hf/ model, which decodes under the
    schema itself)."""

    @classmethod
    def of(cls, settings: ModelSettings) -> _SettingsFacts:
        is_mock = settings.is_mock
        return cls(
            settings=settings,
            # The lookup scans the price map's names: once per settings object, not per call.
            prices=token_prices(settings),
            is_mock=is_mock,
            probes_schemas=not is_mock and settings.provider not in HF_PROVIDERS,
        )


@dataclass(frozen=True, slots=True)
class _ClientKind:
    """How a call reaches one client object, worked out once for it."""

    client: ChatCompletionClient
    foreign: bool
    """autogen-ext's OpenAI or Azure client (see :func:`_foreign_openai`)."""
    ours: bool
    """One of our clients (they take a validated :class:`ReplySchema`)."""
    takes_turns: bool
    """The direct client, which sends rendered turns without AutoGen messages in between."""

    @classmethod
    def of(cls, client: ChatCompletionClient) -> _ClientKind:
        return cls(
            client=client,
            foreign=_foreign_openai(client),
            ours=isinstance(client, SimpleChatCompletionClient),
            takes_turns=isinstance(client, DirectChatCompletionClient),
        )


class JudgeModel:
    """A configured model: one attempt per :meth:`complete`, faults raised as ProviderFault.

    Args:
        settings: Model and sampling settings.
        rubric: The rubric (the mock provider needs it).
        client: An already built client, to share one between calls or inject a fake.
    """

    def __init__(
        self, settings: ModelSettings, rubric: Rubric, client: ChatCompletionClient | None = None
    ):
        self.settings = settings
        # Every call is bounded by settings.timeout in _attempt: the client need not time it too.
        self.client = client or _build_client(settings, rubric, bounded=True)
        self.cache: ResponseCache | None = None
        """Replies to reuse (``--cache``); None sends every request."""
        self.schema_refused = False
        """The endpoint refused a ``json_schema`` request (``structured_output: auto`` then
        asks for JSON mode for the rest of the run); shared by every agent on this model."""
        self._schema_accepted = False
        self._probe: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._facts: _SettingsFacts | None = None
        self._kind: _ClientKind | None = None
        self._deadlines: CallDeadlines | None = None

    def _settings_facts(self) -> _SettingsFacts:
        facts = self._facts
        if facts is None or facts.settings is not self.settings:
            facts = self._facts = _SettingsFacts.of(self.settings)
        return facts

    def _call_deadlines(self) -> CallDeadlines:
        """The deadlines of this model's calls on the running loop, under its timeout."""
        loop = asyncio.get_running_loop()
        deadlines = self._deadlines
        if (
            deadlines is None
            or deadlines.loop is not loop
            or deadlines.delay != self.settings.timeout
        ):
            deadlines = self._deadlines = CallDeadlines(loop, self.settings.timeout)
        return deadlines

    def _client_kind(self) -> _ClientKind:
        kind = self._kind
        if kind is None or kind.client is not self.client:
            kind = self._kind = _ClientKind.of(self.client)
        return kind

    async def complete(
        self,
        turns: list[ChatTurn],
        *,
        variation: str = "",
        max_tokens: int | None = None,
        extra_create_args: Mapping[str, Any] | None = None,
    ) -> CallOutcome:
        """Send one chat request built from rendered turns; the reply must be text.

        Args:
            turns: The conversation so far.
            variation: Distinguishes repeated samples for the simulated provider.
            max_tokens: Cap on generated tokens for this call instead of the settings' one.
            extra_create_args: AutoGen's extra arguments; ``json_schema`` asks for a reply
                schema (see :mod:`clinjudge.judges.clients._structured`).
        """
        messages: Sequence[LLMMessage] = (
            TurnMessages(turns) if self._client_kind().takes_turns else to_autogen_messages(turns)
        )
        # What create() does, without one more coroutine per call.
        schema, extra, mode, probe = self._plan(extra_create_args, None)
        if probe:
            outcome = await self._probing(messages, (), None, variation, max_tokens, extra, schema)
        else:
            outcome = await self._send(
                messages, (), None, variation, max_tokens, extra, schema, mode
            )
        if outcome.result is not None and not isinstance(outcome.result.content, str):
            raise ProviderFault("reply held tool calls, not text", retryable=False)
        return outcome

    def output_mode(self, schema: ReplySchema | None, json_output: Any) -> OutputMode:
        """The mode a call is sent in, from the settings and what the endpoint said so far.

        Args:
            schema: The reply schema the call asks for, if any.
            json_output: AutoGen's JSON-mode flag of the call.
        """
        setting = self.settings.structured_output
        if setting == "off":
            return "off"
        if schema is not None:
            if setting == "json_object" or (setting == "auto" and self.schema_refused):
                return "json_object"
            return "json_schema"
        return "json_object" if json_output is True or self.settings.json_mode else "off"

    def _probe_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._probe is None or self._probe[0] is not loop:
            self._probe = (loop, asyncio.Lock())
        return self._probe[1]

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Any] = (),
        json_output: Any = None,
        variation: str = "",
        max_tokens: int | None = None,
        extra_create_args: Mapping[str, Any] | None = None,
    ) -> CallOutcome:
        """Send one request of AutoGen messages (used by agents inside group chats).

        Args:
            messages: The conversation, as AutoGen messages.
            tools: Tools offered to the model.
            json_output: AutoGen's JSON-mode flag; the settings' ``json_mode`` applies otherwise.
            variation: Distinguishes repeated samples for the simulated provider.
            max_tokens: Cap on generated tokens for this call instead of the settings' one.
            extra_create_args: AutoGen's extra arguments; ``json_schema`` asks for a reply
                schema (else the one set by ``structured_reply`` applies).
        """
        schema, extra, mode, probe = self._plan(extra_create_args, json_output)
        if probe:
            return await self._probing(
                messages, tools, json_output, variation, max_tokens, extra, schema
            )
        return await self._send(
            messages, tools, json_output, variation, max_tokens, extra, schema, mode
        )

    def _plan(
        self, extra_create_args: Mapping[str, Any] | None, json_output: Any
    ) -> tuple[ReplySchema | None, dict[str, Any], OutputMode, bool]:
        """A call's schema, extra arguments (without our key), output mode, and whether it
        must wait for the endpoint's first answer to a schema request."""
        schema = requested_schema(extra_create_args)
        extra = (
            {k: v for k, v in extra_create_args.items() if k != STRUCTURED_OUTPUT_KEY}
            if extra_create_args
            else {}
        )
        mode = self.output_mode(schema, json_output)
        probe = (
            mode == "json_schema"
            and not self._schema_accepted
            and self.settings.structured_output == "auto"
            and self._settings_facts().probes_schemas
        )
        return schema, extra, mode, probe

    async def _probing(
        self,
        messages: Sequence[LLMMessage],
        tools: Sequence[Any],
        json_output: Any,
        variation: str,
        max_tokens: int | None,
        extra: dict[str, Any],
        schema: ReplySchema | None,
    ) -> CallOutcome:
        """A schema call before the endpoint has answered one: until it has, one call at a
        time finds out whether it takes schemas (at most one rejected call per run and
        endpoint)."""
        async with self._probe_lock():
            mode = self.output_mode(schema, json_output)  # the probe may have settled it
            if mode == "json_schema" and not self._schema_accepted:
                return await self._send(
                    messages, tools, json_output, variation, max_tokens, extra, schema, mode
                )
        return await self._send(
            messages, tools, json_output, variation, max_tokens, extra, schema, mode
        )

    async def _send(
        self,
        messages: Sequence[LLMMessage],
        tools: Sequence[Any],
        json_output: Any,
        variation: str,
        max_tokens: int | None,
        extra_args: dict[str, Any],
        schema: ReplySchema | None,
        mode: OutputMode,
    ) -> CallOutcome:
        settings = self.settings
        facts = self._settings_facts()
        extra = {"seed": variation, **extra_args} if facts.is_mock else extra_args
        if max_tokens is not None and max_tokens != settings.max_tokens:
            # The request carries the new cap, and the cache keys it as a setting.
            settings = settings.model_copy(update={"max_tokens": max_tokens})
            cap = "max_completion_tokens" if settings.is_reasoning_model else "max_tokens"
            extra = {**extra, cap: max_tokens}
        key = None
        if self.cache is not None:
            keyed = dict(extra_args)
            if schema is not None:
                keyed[STRUCTURED_OUTPUT_KEY] = schema.as_arg()
            key = cache_key(settings, messages, tools, json_output, variation, keyed or None)
            hit = self.cache.get(key)
            if hit is not None:
                return replace(_cached_outcome(hit), max_tokens=settings.max_tokens)
        started = time.perf_counter()
        try:
            result = await self._attempt(messages, tools, json_output, extra, schema, mode)
        except ProviderFault as fault:
            if not (mode == "json_schema" and self._falls_back(fault)):
                fault.output_mode = mode
                raise
            mode = "json_object"
            try:
                result = await self._attempt(messages, tools, json_output, extra, schema, mode)
            except ProviderFault as retry_fault:
                retry_fault.output_mode = mode
                raise
        if mode == "json_schema":
            self._schema_accepted = True
        outcome = self._outcome(messages, result, time.perf_counter() - started, facts.prices)
        outcome.max_tokens = settings.max_tokens
        outcome.output_mode = mode
        if key is not None and self.cache is not None and isinstance(result.content, str):
            self.cache.put(key, self.settings.model, _cache_entry(outcome))
        return outcome

    def _falls_back(self, fault: ProviderFault) -> bool:
        """Whether a failed schema call is the endpoint refusing schemas, under ``auto``; the
        first refusal is remembered for the run and logged once."""
        if self.settings.structured_output != "auto" or not is_schema_rejection(fault.reason):
            return False
        if not self.schema_refused:
            self.schema_refused = True
            log.warning(
                "model %s%s refused a json_schema response_format (%s); asking for JSON mode "
                "(json_object) instead for the rest of this run",
                self.settings.model,
                f" at {redact_url(self.settings.base_url)}" if self.settings.base_url else "",
                fault.reason[:200],
            )
        return True

    async def _attempt(
        self,
        messages: Sequence[LLMMessage],
        tools: Sequence[Any],
        json_output: Any,
        extra: dict[str, Any],
        schema: ReplySchema | None,
        mode: OutputMode,
    ) -> CreateResult:
        """One request to the client in one output mode; faults come back classified."""
        kind = self._client_kind()
        if mode == "json_schema" and schema is not None:
            json_output = None
            if kind.foreign:
                # autogen-ext's OpenAI/Azure clients send extra arguments to the SDK as they
                # are: they get the request field itself.
                extra = {**extra, "response_format": openai_response_format(schema)}
            elif kind.ours:
                # Our clients translate the key and take the validated schema as it is: a
                # mapping would be validated again on every call.
                extra = {**extra, STRUCTURED_OUTPUT_KEY: schema}
            else:
                extra = {**extra, STRUCTURED_OUTPUT_KEY: schema.as_arg()}
        elif mode == "json_object":
            json_output = True
        elif mode == "off" and isinstance(json_output, bool):
            json_output = None
        # Only autogen-ext's clients report their SDK's usage objects (see _reporting_usage).
        sink: list[Any] = []
        token = _SDK_USAGE.set(sink) if kind.foreign else None
        try:
            # Bounded like asyncio.timeout(settings.timeout), under one timer for all calls
            # (neither wait_for, a task more per call, nor a timer of its own per call).
            deadlines = self._call_deadlines()
            deadline = deadlines.start()
            try:
                result = await kind.client.create(
                    messages, tools=tools, json_output=json_output, extra_create_args=extra
                )
            except BaseException as exc:
                if deadlines.finish(deadline) and isinstance(exc, asyncio.CancelledError):
                    raise TimeoutError from exc
                raise
            deadlines.finish(deadline)
            return _with_sdk_usage(result, sink) if sink else result
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - every provider fault is classified
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            fault = classify_fault(exc)
            if fault.usage is not None:
                fault.cost_usd = call_cost(self.settings, *fault.usage)
            raise fault from exc
        finally:
            if token is not None:
                _SDK_USAGE.reset(token)

    def _outcome(
        self,
        messages: Sequence[LLMMessage],
        result: CreateResult,
        latency: float,
        prices: TokenPrices | None,
    ) -> CallOutcome:
        content = result.content
        text = (
            content
            if isinstance(content, str)
            else json.dumps([{"name": c.name, "arguments": c.arguments} for c in content])
        )
        usage = result.usage
        # Every client's counts pass one check: an absurd count would corrupt the cost roll-up
        # (check_token_count, called only for what its first test would not pass).
        prompt_tokens = usage.prompt_tokens if usage else 0
        if type(prompt_tokens) is not int or not 0 <= prompt_tokens <= MAX_TOKENS_PER_CALL:
            prompt_tokens = check_token_count("prompt_tokens", prompt_tokens)
        completion_tokens = usage.completion_tokens if usage else 0
        if type(completion_tokens) is not int or not 0 <= completion_tokens <= MAX_TOKENS_PER_CALL:
            completion_tokens = check_token_count("completion_tokens", completion_tokens)
        cached, written = 0, 0
        if isinstance(usage, PromptUsage):
            cached, written = usage.cached_input_tokens, usage.cache_write_tokens
        estimated = not prompt_tokens
        if estimated:
            prompt_tokens = count_message_tokens([message_text(m) for m in messages])
            completion_tokens = count_tokens(text)
            cached, written = 0, 0
        return CallOutcome(
            text=text,
            finish_reason=result.finish_reason,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            tokens_estimated=estimated,
            cost_usd=prices.cost(prompt_tokens, completion_tokens, cached, written)
            if prices
            else None,
            latency_s=latency,
            result=result,
            cached_input_tokens=cached,
            cache_write_tokens=written,
            cache_saving_usd=prices.cache_saving(cached, written) if prices else None,
        )

    async def close(self) -> None:
        """Release the client's connections."""
        await self.client.close()
