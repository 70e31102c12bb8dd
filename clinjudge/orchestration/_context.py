"""What a judge workflow gets for one sample: models per agent, recorded and retried calls.

Every workflow (single judge, independent panel, MagenticOne discussion) asks the context for a
call function over rendered turns or a conversation call per agent. Both retry transient faults
with the run's policy and record every attempt as a row of the calls table under that agent's
name, so per-agent cost, tokens and latency come out the same way whatever the workflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from clinjudge.judges import (
    CallFn,
    CallOutcome,
    JudgeModel,
    ModelSettings,
    ProviderFault,
    ResponseCache,
    count_message_tokens,
)
from clinjudge.judges.clients import (
    PLAIN_CALL,
    CallConfig,
    ChatMessage,
    Completion,
    ModelConfigError,
    provider_for,
)
from clinjudge.orchestration._config import EXPECTED_REPLY_TOKENS, RunConfig
from clinjudge.orchestration._limits import Clock, RateLimiter
from clinjudge.orchestration._retry import AttemptRecorder, retry_after, retry_send
from clinjudge.personas import Persona, PersonaSet, resolve_personas
from clinjudge.rubrics import ChatTurn, Item, Rubric, Shot
from clinjudge.runs import SampleKey, call_row


def resolve_run_personas(config: RunConfig) -> PersonaSet | None:
    """The persona set a run's mode seats, read from ``config.personas`` (None in single mode).

    A run resolves it once, when it is prepared, and stores it; everything after that uses the
    stored copy.

    Args:
        config: The run configuration.
    """
    if config.mode == "single":
        return None
    return resolve_personas(config.personas)


@dataclass(slots=True)
class _AgentCalls:
    """What every call of one agent in a run uses, worked out once per run
    (``ModelPool._agent_calls``).

    Args:
        settings: The agent's settings (the entry they were worked out from).
        model: The shared model the agent calls.
        limiter: The model's rate limiter, None when it has no rpm or tpm limit.
        stance: Appended to each sample's variation (``|stance=...`` for a simulated
            persona with a stance, else empty).
        connection_limited: The model's server has a connection limit
            (``ModelPool.connection_slots``).
    """

    settings: ModelSettings
    model: JudgeModel
    limiter: RateLimiter | None
    stance: str
    connection_limited: bool


class ModelPool:
    """One JudgeModel per distinct settings, shared by all samples of a run.

    Args:
        config: The run configuration (``judge`` plus per-role/agent ``roles``).
        rubric: The rubric (the simulated provider needs it).
        default: A prepared model for the default settings (tests inject one).
        clock: Time source of the rate limiters (tests inject a fake one).
        personas: The run's personas as resolved once when it was prepared
            (``PreparedRun.personas``); None seats none (single mode).
    """

    def __init__(
        self,
        config: RunConfig,
        rubric: Rubric,
        default: JudgeModel | None = None,
        *,
        clock: Clock | None = None,
        personas: PersonaSet | None = None,
    ):
        self._config = config
        self._rubric = rubric
        self._models: dict[str, JudgeModel] = {}
        self._by_settings: dict[int, tuple[ModelSettings, JudgeModel]] = {}
        self._clock = clock
        self._limiters: dict[tuple[str, str | None], RateLimiter] = {}
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._connections: dict[int, tuple[ModelSettings, str, int | None]] = {}
        self._connection_limits: dict[str, int | None] = {}
        self._connection_slots: (
            tuple[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] | None
        ) = None
        self._persona_set = personas
        # The simulated provider scores by stance: read once from the resolved personas.
        self._stances = {
            p.name: str(getattr(p.stance, "value", p.stance))
            for p in (personas.personas if personas is not None else [])
        }
        self.shared_state: dict[str, Any] = {}
        """Run-wide state of workflows, e.g. each item's PRM evidence (scored once per item)."""
        self.response_cache: ResponseCache | None = None
        """Replies every model reuses when the run has ``cache`` on (set by the session)."""
        self._in_flight: dict[int, float] = {}
        self._call_numbers = itertools.count()
        self._agents: dict[tuple[str, str], _AgentCalls] = {}
        if default is not None:
            self._models[default.settings.model_dump_json()] = default

    @contextlib.contextmanager
    def call_in_flight(self) -> Iterator[None]:
        """Count one model call as in flight while the block runs (progress shows them)."""
        number = self.call_started()
        try:
            yield
        finally:
            del self._in_flight[number]

    def call_started(self) -> int:
        """Count one model call as in flight until ``call_ended`` with the number returned
        (the hot path's form of :meth:`call_in_flight`, without a generator per call)."""
        number = next(self._call_numbers)
        self._in_flight[number] = time.monotonic()
        return number

    def call_ended(self, number: int) -> None:
        """The call ``number`` (from :meth:`call_started`) is answered or failed."""
        del self._in_flight[number]

    def calls_in_flight(self) -> tuple[int, float | None]:
        """Model calls sent and not answered yet, and the oldest one's age in seconds."""
        if not self._in_flight:
            return 0, None
        # Insertion order is start order: the first entry left is the oldest call.
        return len(self._in_flight), time.monotonic() - next(iter(self._in_flight.values()))

    @property
    def persona_set(self) -> PersonaSet | None:
        """The run's persona set (None in single mode)."""
        return self._persona_set

    @property
    def personas(self) -> list[Persona]:
        """The run's personas in speaking order, moderators included (empty in single mode)."""
        persona_set = self.persona_set
        return [] if persona_set is None else list(persona_set.personas)

    def limiter_for(self, settings: ModelSettings) -> RateLimiter | None:
        """The limiter shared by every agent calling this model at this endpoint, if limited.

        Agents configured with different limits for the same model get the strictest of them.
        """
        key = (settings.model, settings.base_url)
        limiter = self._limiters.get(key)
        if limiter is None:
            same = [
                s
                for s in (self._config.judge, *self._config.roles.values(), settings)
                if s is not None and (s.model, s.base_url) == key
            ]
            rpms = [s.rpm for s in same if s.rpm is not None]
            tpms = [s.tpm for s in same if s.tpm is not None]
            limiter = self._limiters[key] = RateLimiter(
                min(rpms) if rpms else None,
                min(tpms) if tpms else None,
                clock=self._clock,
                completion_guess=settings.max_tokens or EXPECTED_REPLY_TOKENS,
            )
        return limiter if limiter.limited else None

    def call_slots(self) -> asyncio.Semaphore:
        """Run-wide bound on model calls in flight (``concurrency``), whatever the mode: a panel
        sample's members share the slots with every other sample's calls."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self._config.concurrency))
        return self._slots[1]

    def _connection(self, settings: ModelSettings) -> tuple[str, int | None]:
        """A model's connection key and its own limit (its setting, else its provider's),
        worked out once per settings object (held, so its id is not reused).

        Raises:
            ModelConfigError: The provider's ``max_connections`` is no positive number.
        """
        known = self._connections.get(id(settings))
        if known is None or known[0] is not settings:
            provider = provider_for(settings)
            limit = settings.max_connections
            if limit is None:
                limit = provider.max_connections(settings)
                # A plugin's answer: 0 would stop every call of the run for good.
                if limit is not None and (type(limit) is not int or limit < 1):
                    raise ModelConfigError(
                        f"model {settings.model}: provider {type(provider).__name__} gave "
                        f"max_connections={limit!r}; it must be a positive whole number or None"
                    )
            known = self._connections[id(settings)] = (
                settings,
                provider.connection_key(settings),
                limit,
            )
        return known[1], known[2]

    def connection_limit(self, settings: ModelSettings) -> tuple[str, int] | None:
        """The connection key and limit shared by every model of the run that reaches the same
        server as this one (the smallest limit among them); None when none has one.

        Args:
            settings: The model's settings.
        """
        key, _ = self._connection(settings)
        if key not in self._connection_limits:
            configured = (self._config.judge, *self._config.roles.values(), settings)
            limits = [
                limit
                for other_key, limit in (self._connection(s) for s in configured if s is not None)
                if other_key == key and limit is not None
            ]
            self._connection_limits[key] = min(limits) if limits else None
        limit = self._connection_limits[key]
        return None if limit is None else (key, limit)

    def connection_slots(self, settings: ModelSettings) -> asyncio.Semaphore | None:
        """The bound on calls in flight to this model's server, taken by every call in
        addition to the run-wide :meth:`call_slots`; None when no model there has a limit.

        Args:
            settings: The model's settings.
        """
        shared = self.connection_limit(settings)
        if shared is None:
            return None
        key, limit = shared
        # Per event loop, like the run-wide slots: a semaphore belongs to the loop it was
        # first awaited in.
        loop = asyncio.get_running_loop()
        if self._connection_slots is None or self._connection_slots[0] is not loop:
            self._connection_slots = (loop, {})
        slots = self._connection_slots[1]
        found = slots.get(key)
        if found is None:
            found = slots[key] = asyncio.Semaphore(limit)
        return found

    @property
    def limiters(self) -> list[RateLimiter]:
        """The limiters in use (models with an rpm or tpm limit)."""
        return [limiter for limiter in self._limiters.values() if limiter.limited]

    def settings_for(self, agent: str, role: str) -> ModelSettings:
        """Settings of an agent: its own entry in ``roles``, else its role's, else ``judge``."""
        roles = self._config.roles
        settings = roles.get(agent) or roles.get(role) or self._config.judge
        if settings is None:
            raise ValueError(f"no model configured for agent {agent!r} (role {role!r})")
        return settings

    def model_for(self, agent: str, role: str) -> JudgeModel:
        """The shared model an agent uses."""
        settings = self.settings_for(agent, role)
        # Serialising the settings for the key costs more than the rest of a call's set-up, and
        # every sample asks again: remember the answer per settings object (held, so its id
        # is not reused).
        known = self._by_settings.get(id(settings))
        if known is not None and known[0] is settings:
            model = known[1]
        else:
            cache_key = settings.model_dump_json()
            shared = self._models.get(cache_key)
            if shared is None:
                shared = self._models[cache_key] = JudgeModel(settings, self._rubric)
            model = shared
            self._by_settings[id(settings)] = (settings, model)
        model.cache = self.response_cache
        return model

    def _agent_calls(self, agent: str, role: str) -> _AgentCalls:
        """The model, limiter and variation stance of an agent, worked out on its first call
        of the run and reused (its settings are looked up again, so a changed entry counts).

        Args:
            agent: Agent name.
            role: The agent's role.
        """
        roles = self._config.roles
        found = roles.get(agent) or roles.get(role) or self._config.judge
        known = self._agents.get((agent, role))
        if known is None or known.settings is not found:
            settings = self.settings_for(agent, role)  # the same lookup; raises without one
            model = self.model_for(agent, role)
            stance = self.stance_of(agent, role) if self.simulated else None
            known = self._agents[(agent, role)] = _AgentCalls(
                settings,
                model,
                self.limiter_for(model.settings),
                "" if stance in (None, "neutral") else f"|stance={stance}",
                self.connection_limit(model.settings) is not None,
            )
        else:
            known.model.cache = self.response_cache
        return known

    def stance_of(self, agent: str, role: str) -> str | None:
        """An agent's scoring stance: its persona's (lenient, strict, ...), ``chair`` for the
        orchestrator, None for a plain judge. The simulated provider scores by it."""
        if role == "orchestrator":
            return "chair"
        return self._stances.get(agent)

    @property
    def simulated(self) -> bool:
        """True when any configured model is the mock provider (``RunConfig.simulated``)."""
        return self._config.simulated

    async def close(self) -> None:
        """Close every model's connections."""
        for model in self._models.values():
            await model.close()


async def _connected(
    connection: asyncio.Semaphore, attempt: Callable[[], Awaitable[CallOutcome]]
) -> CallOutcome:
    """One attempt holding a slot of its server's connection limit.

    Taken before the run-wide slot (inside ``attempt``), so calls waiting for a busy server
    hold none of the run's slots that calls to other servers could use; and per attempt, so a
    retry's back-off sleeps without one.

    Args:
        connection: The server's slots (:meth:`ModelPool.connection_slots`).
        attempt: Makes one attempt within the run-wide slots.
    """
    async with connection:
        return await attempt()


class AgentChat:
    """One agent's conversation call (group-chat participants, orchestrators): each call is
    retried with the run's policy and every attempt recorded under the agent's name.

    Args:
        context: The sample's context.
        agent: Agent name the calls are recorded under.
        role: Role recorded with the calls.
        model: The model behind the agent.
    """

    def __init__(self, context: SampleContext, agent: str, role: str, model: JudgeModel):
        self._context = context
        self._agent = agent
        self._role = role
        self._model = model

    @property
    def model_info(self) -> Mapping[str, Any]:
        """What the agent's model can do (AutoGen's ``ModelInfo`` keys)."""
        return self._model.client.model_info

    async def __call__(self, messages: Sequence[ChatMessage], config: CallConfig) -> Completion:
        """The model's reply to the conversation (text or tool calls).

        Args:
            messages: The conversation.
            config: What the call asks for (the sample's variation is added here).
        """
        config = config.varied(self._context.variation_for(self._agent, self._role))
        outcome = await self._context.send(
            self._agent,
            self._role,
            self._model,
            lambda: self._model.generate_chat(messages, config),
            prompt=lambda: [m.text for m in messages],
        )
        assert outcome.result is not None
        return outcome.result


class SampleContext:
    """Everything one sample's workflow needs.

    Args:
        run_id: The run.
        item: The item being judged.
        sample: Sample number (from 1).
        config: The run configuration.
        rubric: The rubric.
        models: The run's model pool.
        shots: Few-shot examples drawn for this sample.
        calls_bounded: The caller already keeps this run's calls in flight within
            ``concurrency`` (the runner's single judge: one call at a time per worker, no more
            workers than ``concurrency``), so calls take no run-wide slot (a server's
            connection limit still holds).
    """

    def __init__(
        self,
        run_id: str,
        item: Item,
        sample: int,
        config: RunConfig,
        rubric: Rubric,
        models: ModelPool,
        shots: list[Shot] | None = None,
        *,
        calls_bounded: bool = False,
    ):
        self.run_id = run_id
        self.item = item
        self.sample = sample
        self.config = config
        self.rubric = rubric
        self.models = models
        self.shots = shots or []
        self.variation = f"{config.seed}|{sample}"
        self.calls: list[dict[str, Any]] = []
        self.extra_rows: dict[str, list[dict[str, Any]]] = {}
        """Rows for other tables (e.g. ``prm_steps``), written with the sample."""
        self._seq: dict[str, int] = {}
        self._calls_bounded = calls_bounded
        self._key: SampleKey | None = None

    @property
    def personas(self) -> list[Persona]:
        """The run's personas as stored with it (empty in single mode)."""
        return self.models.personas

    def variation_for(self, agent: str, role: str) -> str:
        """The sample's variation, plus the agent's stance when it has one (the simulated
        provider spreads a panel by stance; real providers never see it)."""
        if not self.models.simulated:
            return self.variation
        stance = self.models.stance_of(agent, role)
        if stance in (None, "neutral"):
            return self.variation
        return f"{self.variation}|stance={stance}"

    def key(self, agent: str) -> SampleKey:
        """The store key of this sample for an agent."""
        # The last one is kept: a single judge's calls and its sample share one key.
        key = self._key
        if key is None or key.agent != agent:
            key = self._key = SampleKey(self.run_id, self.item.id, self.sample, agent)
        return key

    def _record(self, agent: str, role: str, model: JudgeModel) -> AttemptRecorder:
        return functools.partial(self._record_attempt, agent, role, model.settings.model)

    def _record_attempt(
        self,
        agent: str,
        role: str,
        model: str,
        started: datetime,
        outcome: CallOutcome | None,
        fault: ProviderFault | None,
    ) -> None:
        seq = self._seq.get(agent, 0)
        self._seq[agent] = seq + 1
        self.calls.append(
            call_row(
                self.key(agent),
                seq,
                role=role,
                model=model,
                started=started,
                outcome=outcome,
                fault=fault,
            )
        )

    def record_local_call(
        self,
        agent: str,
        role: str,
        model: str,
        *,
        started: datetime,
        latency_s: float,
        prompt_tokens: int | None = None,
        error: str | None = None,
    ) -> None:
        """Record a call of a model run here (a PRM or NLI forward pass): no provider, no price.

        Args:
            agent: Agent name the call is recorded under.
            role: Role recorded with the call (``prm``, ``nli``).
            model: The model's path or id.
            started: When the call started.
            latency_s: Seconds it took.
            prompt_tokens: Tokens (or pairs) it read, when known.
            error: Why it failed.
        """
        seq = self._seq.get(agent, 0)
        self._seq[agent] = seq + 1
        key = self.key(agent)
        self.calls.append(
            {
                "call_id": f"{key.run_id}/{key.item_id}/{key.sample}/{agent}/{seq}",
                **key.as_columns(),
                "seq": seq,
                "role": role,
                "model": model,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 0,
                "tokens_estimated": False,
                "cost_usd": 0.0,  # runs on the user's own hardware: no per-token price
                "latency_s": latency_s,
                "status": "error" if error else "ok",
                "error": error,
                "finish_reason": None,
                "started_at": started,
            }
        )

    async def send(
        self,
        agent: str,
        role: str,
        model: JudgeModel,
        attempt: Callable[[], Awaitable[CallOutcome]],
        *,
        prompt: Callable[[], list[str]] | None = None,
    ) -> CallOutcome:
        """Run one logical call with retries, recording each attempt under ``agent``.

        Every attempt first waits for the model's rate limiter (when it has an rpm or tpm
        limit), charging the prompt's tokens plus the expected completion, and corrects the
        charge with the actual usage afterwards. A Retry-After holds the limiter for all agents.
        Then it takes a slot of its server's connection limit (when a model there has one) and
        a run-wide slot (unless the caller bounds calls itself), both given back before any
        retry waits.

        Args:
            agent: Agent name the calls are recorded under.
            role: Role recorded with the calls.
            model: The model called.
            attempt: Makes one attempt.
            prompt: The text of each message sent (for the token estimate).
        """
        record = self._record(agent, role, model)
        slots = None if self._calls_bounded else self.models.call_slots()
        bounded = functools.partial(self._bounded, attempt, slots)
        connection = self.models.connection_slots(model.settings)
        if connection is not None:
            bounded = functools.partial(_connected, connection, bounded)
        limiter = self.models.limiter_for(model.settings)
        if limiter is None:
            return await retry_send(bounded, self.config.retry, record)
        prompt_tokens = 0
        if limiter.counts_tokens and prompt is not None:
            prompt_tokens = count_message_tokens(prompt())

        async def limited() -> CallOutcome:
            ticket = await limiter.acquire(limiter.estimate(prompt_tokens))
            try:
                outcome = await bounded()
            except ProviderFault as fault:
                if fault.retry_after is not None:
                    limiter.hold(min(fault.retry_after, self.config.retry.max_wait))
                raise
            limiter.settle(
                ticket, outcome.prompt_tokens + outcome.completion_tokens, outcome.completion_tokens
            )
            return outcome

        return await retry_send(limited, self.config.retry, record)

    async def _bounded(
        self, attempt: Callable[[], Awaitable[CallOutcome]], slots: asyncio.Semaphore | None
    ) -> CallOutcome:
        """One attempt within the run's slots (when taken), counted as in flight meanwhile."""
        if slots is not None:
            await slots.acquire()
        models = self.models
        number = models.call_started()
        try:
            return await attempt()
        finally:
            models.call_ended(number)
            if slots is not None:
                slots.release()

    async def _call(
        self,
        agent: str,
        role: str,
        calls: _AgentCalls,
        turns: list[ChatTurn],
        config: CallConfig = PLAIN_CALL,
    ) -> CallOutcome:
        """One logical call over rendered turns without a rate limit: what :meth:`send` does,
        with the first attempt made here (one coroutine between the workflow and the model
        instead of four); a retry, rare, goes on with :func:`retry_after`'s schedule."""
        model = calls.model
        config = config.varied(self.variation + calls.stance)
        models = self.models
        slots = None if self._calls_bounded else models.call_slots()
        # UTC: the same instant as local time, without a local-time conversion per call.
        started = datetime.now(UTC)
        if slots is not None:
            await slots.acquire()
        number = models.call_started()
        failed: ProviderFault | None = None
        try:
            outcome = await model.generate(turns, config)
        except ProviderFault as fault:
            failed = fault
        finally:
            models.call_ended(number)
            if slots is not None:
                slots.release()
        if failed is None:
            self._record_attempt(agent, role, model.settings.model, started, outcome, None)
            return outcome
        self._record_attempt(agent, role, model.settings.model, started, None, failed)
        again = functools.partial(model.generate, turns, config)
        return await retry_after(
            failed,
            functools.partial(self._bounded, again, slots),
            self.config.retry,
            self._record(agent, role, model),
        )

    def call_fn(self, agent: str, role: str) -> CallFn:
        """A call function over rendered turns for one agent (single judges, panel members)."""
        calls = self.models._agent_calls(agent, role)
        if calls.limiter is None and not calls.connection_limited:
            return functools.partial(self._call, agent, role, calls)
        model = calls.model

        async def call(turns: list[ChatTurn], config: CallConfig = PLAIN_CALL) -> CallOutcome:
            varied = config.varied(self.variation_for(agent, role))
            return await self.send(
                agent,
                role,
                model,
                lambda: model.generate(turns, varied),
                prompt=lambda: [t.content for t in turns],
            )

        return call

    def chat(self, agent: str, role: str) -> AgentChat:
        """A conversation call for one agent (group-chat participants, orchestrators)."""
        return AgentChat(self, agent, role, self.models.model_for(agent, role))
