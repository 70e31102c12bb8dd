"""Retrying model calls with tenacity, honouring Retry-After, recording every attempt."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from datetime import datetime

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from clinjudge.judges import CallOutcome, JudgeModel, ProviderFault
from clinjudge.orchestration._config import RetryPolicy
from clinjudge.rubrics import ChatTurn

AttemptRecorder = Callable[[datetime, CallOutcome | None, ProviderFault | None], None]


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, ProviderFault) and exc.retryable


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

    Args:
        send: Makes one attempt (one model call).
        policy: Retry policy.
        record: Called once per attempt with its start time and outcome or fault.

    Raises:
        ProviderFault: The last fault, when attempts run out or the fault is not retryable.
    """
    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.max_attempts),
        wait=_ProviderAwareWait(policy),
        retry=retry_if_exception(_is_retryable),
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            started = datetime.now().astimezone()
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
    return await retry_send(lambda: model.complete(turns, variation=variation), policy, record)
