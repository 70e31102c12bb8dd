"""One model behind one client, with per-call timing, tokens, cost and fault mapping."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from clinjudge.judges.clients._accounting import (
    TokenPrices,
    count_message_tokens,
    count_tokens,
)
from clinjudge.judges.clients._cache import ResponseCache, cache_key
from clinjudge.judges.clients._call_config import PLAIN_CALL, CallConfig
from clinjudge.judges.clients._client import Generation, ModelClient
from clinjudge.judges.clients._completion import Completion
from clinjudge.judges.clients._deadlines import CallDeadlines, ProgressAge, ReportsProgress
from clinjudge.judges.clients._faults import ProviderFault, redact_url
from clinjudge.judges.clients._messages import ChatMessage, chat_messages
from clinjudge.judges.clients._pricing import call_cost, token_prices
from clinjudge.judges.clients._replies import MAX_TOKENS_PER_CALL, check_token_count
from clinjudge.judges.clients._settings import ModelSettings, sampling_args
from clinjudge.judges.clients._structured import (
    OutputMode,
    ReplySchema,
    is_schema_rejection,
)
from clinjudge.judges.clients.providers import Provider, provider_for
from clinjudge.rubrics import STRUCTURED_OUTPUT_KEY, ChatTurn, Rubric

log = logging.getLogger(__name__)


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
        result: The reply itself (text or tool calls), for agents.
        cached: True when the reply came from the response cache (``--cache``).
    """

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    tokens_estimated: bool
    cost_usd: float | None
    latency_s: float
    result: Completion | None = None
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
    provider_for(settings).check_credentials(settings)


def build_client(settings: ModelSettings, rubric: Rubric) -> ModelClient:
    """The client for the provider named in ``settings.model`` (see
    :mod:`clinjudge.judges.clients.providers`: ``openai/``, ``azure/``, ``anthropic/``,
    ``hf/``, ``mock/``, ...; any prefix no provider claims goes through litellm).

    Args:
        settings: Model and sampling settings.
        rubric: Needed by the mock provider to follow the rubric's contract.
    """
    return provider_for(settings).build_client(settings, rubric)


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
    result = Completion(
        entry["text"],
        int(entry["prompt_tokens"]),
        int(entry["completion_tokens"]),
        entry["finish_reason"],
        cached=True,
    )
    return CallOutcome(
        text=entry["text"],
        finish_reason=entry["finish_reason"],
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
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
    provider: Provider
    prices: TokenPrices | None
    sampling: dict[str, Any]
    """The request's sampling arguments under these settings (a call's own override them)."""
    probes_schemas: bool
    """A ``json_schema`` call under ``structured_output: auto`` first finds out whether the
    endpoint takes schemas (see :attr:`Provider.probes_schemas`)."""

    @classmethod
    def of(cls, settings: ModelSettings) -> _SettingsFacts:
        provider = provider_for(settings)
        return cls(
            settings=settings,
            provider=provider,
            # The lookup scans the price map's names: once per settings object, not per call.
            prices=token_prices(settings),
            sampling=sampling_args(settings),
            probes_schemas=provider.probes_schemas,
        )


@dataclass(frozen=True, slots=True)
class _ClientKind:
    """How a call reaches one client object, worked out once for it."""

    client: ModelClient
    progress: ProgressAge | None
    """A model in this process: its calls' deadlines follow its progress (#39)."""

    @classmethod
    def of(cls, client: ModelClient) -> _ClientKind:
        return cls(
            client=client,
            progress=client.progress_age if isinstance(client, ReportsProgress) else None,
        )


class JudgeModel:
    """A configured model: one attempt per :meth:`generate`, faults raised as ProviderFault.

    Args:
        settings: Model and sampling settings.
        rubric: The rubric (the mock provider needs it).
        client: An already built client, to share one between calls or inject a fake.
    """

    def __init__(self, settings: ModelSettings, rubric: Rubric, client: ModelClient | None = None):
        self.settings = settings
        self.rubric = rubric
        # Every call is bounded by settings.timeout in _attempt: the client need not time it too.
        self.client = client or provider_for(settings).build_client(settings, rubric, bounded=True)
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

    def _call_deadlines(self, progress: ProgressAge | None) -> CallDeadlines:
        """The deadlines of this model's calls on the running loop, under its timeout (and,
        for a model in this process, its ``progress``)."""
        loop = asyncio.get_running_loop()
        deadlines = self._deadlines
        if (
            deadlines is None
            or deadlines.loop is not loop
            or deadlines.delay != self.settings.timeout
            or deadlines.progress is not progress
        ):
            deadlines = self._deadlines = CallDeadlines(loop, self.settings.timeout, progress)
        return deadlines

    def _client_kind(self) -> _ClientKind:
        kind = self._kind
        if kind is None or kind.client is not self.client:
            kind = self._kind = _ClientKind.of(self.client)
        return kind

    async def generate(
        self, turns: Sequence[ChatTurn], config: CallConfig = PLAIN_CALL
    ) -> CallOutcome:
        """Send one chat request built from rendered turns: the one call path of workflows
        and the runner.

        Args:
            turns: The conversation so far.
            config: What the call asks for beyond the model's settings (reply schema, cap on
                generated tokens, the sample's variation, ...).

        Raises:
            ProviderFault: The call failed (classified); or, without tools offered, the reply
                held tool calls rather than text.
        """
        messages = chat_messages(turns)
        # What generate_chat() does, without one more coroutine per call.
        mode, probe = self._plan(config)
        if probe:
            outcome = await self._probing(messages, config)
        else:
            outcome = await self._send(messages, config, mode)
        if not config.tools and outcome.result is not None and outcome.result.tool_calls:
            raise ProviderFault("reply held tool calls, not text", retryable=False)
        return outcome

    async def generate_chat(
        self, messages: Sequence[ChatMessage], config: CallConfig = PLAIN_CALL
    ) -> CallOutcome:
        """:meth:`generate` for a conversation of messages (agents in group chats, whose
        messages carry who said them and tool calls); a reply may hold tool calls.

        Args:
            messages: The conversation.
            config: What the call asks for (tools and JSON mode included).
        """
        mode, probe = self._plan(config)
        if probe:
            return await self._probing(messages, config)
        return await self._send(messages, config, mode)

    def output_mode(self, schema: ReplySchema | None, json_output: Any) -> OutputMode:
        """The mode a call is sent in, from the settings and what the endpoint said so far.

        Args:
            schema: The reply schema the call asks for, if any.
            json_output: The call's JSON-mode flag (True asks for a JSON object).
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

    def _plan(self, config: CallConfig) -> tuple[OutputMode, bool]:
        """A call's output mode, and whether it must wait for the endpoint's first answer to
        a schema request."""
        mode = self.output_mode(config.schema, config.json_output)
        probe = (
            mode == "json_schema"
            and not self._schema_accepted
            and self.settings.structured_output == "auto"
            and self._settings_facts().probes_schemas
        )
        return mode, probe

    async def _probing(self, messages: Sequence[ChatMessage], config: CallConfig) -> CallOutcome:
        """A schema call before the endpoint has answered one: until it has, one call at a
        time finds out whether it takes schemas (at most one rejected call per run and
        endpoint)."""
        async with self._probe_lock():
            # The probe may have settled it.
            mode = self.output_mode(config.schema, config.json_output)
            if mode == "json_schema" and not self._schema_accepted:
                return await self._send(messages, config, mode)
        return await self._send(messages, config, mode)

    async def _send(
        self, messages: Sequence[ChatMessage], config: CallConfig, mode: OutputMode
    ) -> CallOutcome:
        settings = self.settings
        facts = self._settings_facts()
        variation, max_tokens, schema = config.variation, config.max_tokens, config.schema
        extra_args = config.request_args()
        extra = {**facts.provider.variation_args(variation), **extra_args}
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
            key = cache_key(
                settings, messages, config.tools, config.json_output, variation, keyed or None
            )
            hit = self.cache.get(key)
            if hit is not None:
                return replace(_cached_outcome(hit), max_tokens=settings.max_tokens)
        args = {**facts.sampling, **extra}
        started = time.perf_counter()
        try:
            result = await self._attempt(
                Generation(self.settings, self.rubric, messages, config, mode, args)
            )
        except ProviderFault as fault:
            if not (mode == "json_schema" and self._falls_back(fault)):
                fault.output_mode = mode
                raise
            mode = "json_object"
            try:
                result = await self._attempt(
                    Generation(self.settings, self.rubric, messages, config, mode, args)
                )
            except ProviderFault as retry_fault:
                retry_fault.output_mode = mode
                raise
        if mode == "json_schema":
            self._schema_accepted = True
        outcome = self._outcome(messages, result, time.perf_counter() - started, facts.prices)
        outcome.max_tokens = settings.max_tokens
        outcome.output_mode = mode
        if key is not None and self.cache is not None and not result.tool_calls:
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

    async def _attempt(self, call: Generation) -> Completion:
        """One request through the model's client; faults come back classified."""
        kind = self._client_kind()
        provider = self._settings_facts().provider
        try:
            # Bounded like asyncio.timeout(settings.timeout), under one timer for all calls
            # (neither wait_for, a task more per call, nor a timer of its own per call).
            deadlines = self._call_deadlines(kind.progress)
            deadline = deadlines.start()
            try:
                result = await kind.client.generate(call)
            except BaseException as exc:
                if deadlines.finish(deadline) and isinstance(exc, asyncio.CancelledError):
                    raise TimeoutError from exc
                raise
            deadlines.finish(deadline)
            return result
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - every provider fault is classified
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            fault = provider.classify_fault(exc)
            if fault.usage is not None:
                fault.cost_usd = call_cost(self.settings, *fault.usage)
            raise fault from exc

    def _outcome(
        self,
        messages: Sequence[ChatMessage],
        result: Completion,
        latency: float,
        prices: TokenPrices | None,
    ) -> CallOutcome:
        text = result.text
        if result.tool_calls:
            text = json.dumps(
                [{"name": c.name, "arguments": c.arguments} for c in result.tool_calls]
            )
        # Every client's counts pass one check: an absurd count would corrupt the cost roll-up
        # (check_token_count, called only for what its first test would not pass).
        prompt_tokens = result.prompt_tokens
        if type(prompt_tokens) is not int or not 0 <= prompt_tokens <= MAX_TOKENS_PER_CALL:
            prompt_tokens = check_token_count("prompt_tokens", prompt_tokens)
        completion_tokens = result.completion_tokens
        if type(completion_tokens) is not int or not 0 <= completion_tokens <= MAX_TOKENS_PER_CALL:
            completion_tokens = check_token_count("completion_tokens", completion_tokens)
        cached, written = result.cached_input_tokens, result.cache_write_tokens
        estimated = not prompt_tokens
        if estimated:
            prompt_tokens = count_message_tokens([m.text for m in messages])
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
