"""Retrying model calls with tenacity, honouring Retry-After, recording every attempt."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from datetime import datetime

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from clinjudge._util.timestamps import now
from clinjudge.judges import TIMED_OUT, CallOutcome, JudgeModel, ModelSettings, ProviderFault
from clinjudge.judges.clients import CallConfig, provider_for
from clinjudge.orchestration._config import RetryPolicy
from clinjudge.rubrics import ChatTurn
from clinjudge.runs import RunStore
from clinjudge.runs.orchestration_reads import calls_with_error

AttemptRecorder = Callable[[datetime, CallOutcome | None, ProviderFault | None], None]


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, ProviderFault) and exc.retryable


def _retry_filter(policy: RetryPolicy) -> Callable[[BaseException], bool]:
    """Retryable faults, but a timeout only ``policy.timeout_retries`` times per call."""
    timeouts = 0

    def should_retry(exc: BaseException) -> bool:
        nonlocal timeouts
        if not _is_retryable(exc):
            return False
        if getattr(exc, "timed_out", False):
            timeouts += 1
            return timeouts <= policy.timeout_retries
        return True

    return should_retry


def timed_out_calls(store: RunStore, run_id: str) -> int:
    """How many of a run's model calls (attempts) ran past their timeout.

    Args:
        store: The run store.
        run_id: Full run id.
    """
    return calls_with_error(store, run_id, TIMED_OUT)


def timeout_advice(settings: ModelSettings, concurrency: int) -> str:
    """What to change when calls time out: the model is slower than the timeout allows.

    Args:
        settings: The judge model's settings.
        concurrency: The run's calls in flight at once.
    """
    advice = provider_for(settings).timeout_advice(settings, concurrency)
    if advice is not None:
        return advice
    return (
        f"calls take longer than --timeout {settings.timeout:g} s; raise --timeout (judge."
        f"timeout) or lower --concurrency (now {concurrency}: a local server shares itself "
        "between the calls in flight)"
    )


class _ProviderAwareWait:
    """Wait what the provider asked for (capped), else exponential backoff with jitter."""

    def __init__(self, policy: RetryPolicy):
        self._policy = policy
        self._backoff = wait_exponential_jitter(
            multiplier=policy.initial_wait, max=policy.max_wait, jitter=policy.jitter
        )

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, ProviderFault) and exc.retry_after is not None:
            return min(exc.retry_after, self._policy.max_wait) + random.uniform(0, 0.05)
        return self._backoff(state)


async def retry_send(
    send: Callable[[], Awaitable[CallOutcome]], policy: RetryPolicy, record: AttemptRecorder
) -> CallOutcome:
    """Run ``send`` until it succeeds or a fault is final; every attempt goes to ``record``.

    A timeout is final after ``policy.timeout_retries`` retries (other faults after
    ``policy.max_attempts`` attempts).

    Args:
        send: Makes one attempt (one model call).
        policy: Retry policy.
        record: Called once per attempt with its start time and outcome or fault.

    Raises:
        ProviderFault: The last fault, when attempts run out or the fault is not retryable.
    """
    # Nearly every call succeeds at once: make the first attempt without setting tenacity up
    # (its retrying object and generator cost more CPU than the rest of a call's overhead).
    # Start times in UTC: the same instant as local time (the store keeps TIMESTAMPTZ), a
    # quarter of the CPU (no local-time conversion per call).
    started = now()
    try:
        outcome = await send()
    except ProviderFault as exc:
        record(started, None, exc)
        first = exc
    else:
        record(started, outcome, None)
        return outcome
    # Outside the handler: the retries' faults must not chain to the first one.
    return await retry_after(first, send, policy, record)


async def retry_after(
    first: ProviderFault,
    send: Callable[[], Awaitable[CallOutcome]],
    policy: RetryPolicy,
    record: AttemptRecorder,
) -> CallOutcome:
    """Go on after a first attempt that failed with ``first`` (already recorded): retry
    ``send`` as :func:`retry_send` would, or raise ``first`` when it is final.

    Callers that make the first attempt themselves (the runner's call functions, without a
    coroutine per layer) share the retry schedule this way.

    Args:
        first: The first attempt's fault.
        send: Makes one attempt (one model call).
        policy: Retry policy.
        record: Called once per attempt with its start time and outcome or fault.

    Raises:
        ProviderFault: The last fault, when attempts run out or the fault is not retryable.
    """
    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.max_attempts),
        wait=_ProviderAwareWait(policy),
        retry=retry_if_exception(_retry_filter(policy)),
        reraise=True,
    )
    pending: ProviderFault | None = first
    async for attempt in retrying:
        with attempt:
            if pending is not None:
                # tenacity's first attempt is the one made already: it sees its fault, so its
                # stop, wait and filter (timeouts counted) decide exactly as before.
                made, pending = pending, None
                raise made
            started = now()
            try:
                outcome = await send()
            except ProviderFault as fault:
                record(started, None, fault)
                raise
            record(started, outcome, None)
    return outcome


async def call_with_retries(
    model: JudgeModel,
    turns: list[ChatTurn],
    policy: RetryPolicy,
    record: AttemptRecorder,
    *,
    variation: str = "",
) -> CallOutcome:
    """Call a model with rendered turns, retrying transient faults (see :func:`retry_send`).

    Args:
        model: The model to call.
        turns: The conversation.
        policy: Retry policy.
        record: Called once per attempt with its start time and outcome or fault.
        variation: Passed to the model (distinguishes samples for the simulated provider).
    """
    config = CallConfig(variation=variation)
    return await retry_send(lambda: model.generate(turns, config), policy, record)
