"""call_with_retries against the fake server: backoff, Retry-After, one record per attempt."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import pytest

from clinjudge.judges import CallOutcome, JudgeModel, ModelSettings, ProviderFault
from clinjudge.judges.clients import CallConfig
from clinjudge.orchestration import RetryPolicy
from clinjudge.orchestration._retry import call_with_retries
from clinjudge.rubrics import ChatTurn, Rubric, render_messages
from tests.factories import make_items
from tests.fake_openai import FakeOpenAIServer, Fault

# tenacity >= 9.2 deprecates wait_exponential_jitter(initial=...); clinjudge still passes it so
# that tenacity 8.x (allowed by the project's pin) keeps working.

FAST = RetryPolicy(max_attempts=4, initial_wait=0.01, max_wait=0.05, jitter=0.0)

Record = tuple[datetime, CallOutcome | None, ProviderFault | None]


@pytest.fixture(scope="module")
def turns(pdsqi9: Rubric) -> list[ChatTurn]:
    return render_messages(make_items(1)[0], pdsqi9)


def call(
    srv: FakeOpenAIServer,
    rubric: Rubric,
    turns: list[ChatTurn],
    policy: RetryPolicy,
    *,
    base_url: str | None = None,
    timeout: float = 5.0,
) -> tuple[CallOutcome | ProviderFault, list[Record], float]:
    settings = ModelSettings(
        model="openai/local-judge", base_url=base_url or srv.base_url, timeout=timeout
    )
    records: list[Record] = []

    def record(started: datetime, outcome: CallOutcome | None, fault: ProviderFault | None):
        records.append((started, outcome, fault))

    async def go() -> CallOutcome | ProviderFault:
        model = JudgeModel(settings, rubric)
        try:
            return await call_with_retries(model, turns, policy, record)
        except ProviderFault as fault:
            return fault
        finally:
            await model.close()

    started = time.perf_counter()
    result = asyncio.run(go())
    return result, records, time.perf_counter() - started


def test_retries_rate_limit_then_succeeds_after_retry_after(fake_openai, pdsqi9, turns):
    fake_openai.script([Fault("rate_limit", retry_after=0.2)])
    policy = RetryPolicy(max_attempts=3, initial_wait=0.0, max_wait=5.0, jitter=0.0)
    result, records, elapsed = call(fake_openai, pdsqi9, turns, policy)

    assert isinstance(result, CallOutcome) and result.finish_reason == "stop"
    assert elapsed >= 0.2
    assert fake_openai.request_count == 2
    assert len(records) == 2
    (t1, out1, fault1), (t2, out2, fault2) = records
    assert out1 is None and fault1 is not None and fault1.retry_after == pytest.approx(0.2)
    assert out2 is result and fault2 is None
    assert (t2 - t1).total_seconds() >= 0.2
    assert t1.tzinfo is not None


def test_retry_after_is_capped_by_max_wait(fake_openai, pdsqi9, turns):
    fake_openai.script([Fault("rate_limit", retry_after=30)])
    result, records, elapsed = call(fake_openai, pdsqi9, turns, FAST)
    assert isinstance(result, CallOutcome)
    assert len(records) == 2
    assert elapsed < 2.0


@pytest.mark.parametrize(
    "fault",
    [
        Fault("server_error"),
        Fault("bad_gateway"),
        Fault("unavailable"),
        Fault("reset"),
        Fault("malformed_json"),
        Fault("empty_choices"),
    ],
    ids=lambda f: f.kind,
)
def test_transient_faults_are_retried(fake_openai, pdsqi9, turns, fault):
    fake_openai.script([fault, fault])
    result, records, _ = call(fake_openai, pdsqi9, turns, FAST)
    assert isinstance(result, CallOutcome)
    assert [r[2] is None for r in records] == [False, False, True]
    assert fake_openai.request_count == 3


def test_hang_is_retried_after_timeout(fake_openai, pdsqi9, turns):
    fake_openai.script([Fault("hang", hang_seconds=3)])
    result, records, elapsed = call(fake_openai, pdsqi9, turns, FAST, timeout=0.3)
    assert isinstance(result, CallOutcome)
    assert records[0][2].reason == "timed out"
    assert 0.3 <= elapsed < 2.5


def test_stops_after_max_attempts_and_reraises(fake_openai, pdsqi9, turns):
    fake_openai.script([Fault("server_error")] * 10)
    policy = RetryPolicy(max_attempts=3, initial_wait=0.01, max_wait=0.02, jitter=0.0)
    result, records, _ = call(fake_openai, pdsqi9, turns, policy)
    assert isinstance(result, ProviderFault)
    assert "HTTP 500" in result.reason
    assert len(records) == 3
    assert all(outcome is None and fault is not None for _, outcome, fault in records)
    assert result is records[-1][2]
    assert fake_openai.request_count == 3


def test_single_attempt_policy(fake_openai, pdsqi9, turns):
    fake_openai.script([Fault("server_error")])
    policy = RetryPolicy(max_attempts=1, initial_wait=0, max_wait=0, jitter=0)
    result, records, _ = call(fake_openai, pdsqi9, turns, policy)
    assert isinstance(result, ProviderFault) and len(records) == 1


def test_non_retryable_fault_is_not_retried(fake_openai, pdsqi9, turns):
    result, records, _ = call(
        fake_openai, pdsqi9, turns, FAST, base_url=fake_openai.base_url + "/nope"
    )
    assert isinstance(result, ProviderFault)
    assert not result.retryable
    assert len(records) == 1


def test_backoff_grows_without_retry_after(fake_openai, pdsqi9, turns):
    fake_openai.script([Fault("server_error")] * 3)
    policy = RetryPolicy(max_attempts=4, initial_wait=0.05, max_wait=1.0, jitter=0.0)
    result, records, elapsed = call(fake_openai, pdsqi9, turns, policy)
    assert isinstance(result, CallOutcome)
    gaps = [(b[0] - a[0]).total_seconds() for a, b in zip(records, records[1:], strict=False)]
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and gaps[2] >= 0.2
    assert elapsed >= 0.35


class _Flaky:
    """A stand-in model whose faults are scripted (for the exact retry decisions)."""

    def __init__(self, faults: list[ProviderFault | None]):
        self.faults = faults
        self.calls = 0
        self.variations: list[str] = []

    async def generate(self, turns: list[Any], config: CallConfig) -> CallOutcome:
        self.calls += 1
        self.variations.append(config.variation)
        fault = self.faults.pop(0) if self.faults else None
        if fault is not None:
            raise fault
        return CallOutcome("{}", "stop", 1, 1, False, None, 0.0)


def test_retry_decisions_follow_the_fault():
    records: list[Record] = []
    model = _Flaky(
        [ProviderFault("HTTP 500", retryable=True), ProviderFault("HTTP 400: bad", retryable=False)]
    )
    with pytest.raises(ProviderFault, match="HTTP 400"):
        asyncio.run(
            call_with_retries(model, [], FAST, lambda *r: records.append(r), variation="3|2")
        )
    assert model.calls == 2 and len(records) == 2
    assert model.variations == ["3|2", "3|2"]


# -- timeouts (issue #28): a slow endpoint gets slower when asked again -------------------------


def test_a_timeout_is_retried_once_by_default(pdsqi9, turns):
    # Every answer takes longer than the timeout: the default retries it once, not six times.
    with FakeOpenAIServer(latency=1.5) as srv:
        result, records, _ = call(srv, pdsqi9, turns, FAST, timeout=0.3)
        assert isinstance(result, ProviderFault) and result.timed_out
        assert [fault.reason for _, _, fault in records] == ["timed out", "timed out"]
        assert srv.request_count == 2
        assert RetryPolicy().timeout_retries == 1


@pytest.mark.parametrize("retries", [0, 2])
def test_timeout_retries_sets_how_many(pdsqi9, turns, retries):
    policy = FAST.model_copy(update={"timeout_retries": retries})
    with FakeOpenAIServer(latency=1.5) as srv:
        result, records, _ = call(srv, pdsqi9, turns, policy, timeout=0.3)
        assert isinstance(result, ProviderFault)
        assert len(records) == srv.request_count == retries + 1


def test_other_faults_keep_max_attempts_after_a_timeout():
    timeout = ProviderFault("timed out", retryable=True, timed_out=True)
    model = _Flaky([timeout, ProviderFault("HTTP 503", retryable=True), timeout])
    records: list[Record] = []
    with pytest.raises(ProviderFault, match="timed out"):
        asyncio.run(call_with_retries(model, [], FAST, lambda *r: records.append(r)))
    # A 503 between the timeouts is retried as before; the second timeout is the last try.
    assert model.calls == 3
