"""Per-model rate limits: the limiter on a fake clock, the shared pool limiter, the fake server."""

from __future__ import annotations

import asyncio
import io
import json
import urllib.error
import urllib.request
from pathlib import Path

from rich.console import Console

from clinjudge.judges import ModelSettings
from clinjudge.orchestration import (
    RetryPolicy,
    RunConfig,
    SampleRunner,
    create_run,
    prepare_run,
)
from clinjudge.orchestration._context import ModelPool
from clinjudge.orchestration._limits import FakeClock, RateLimiter
from clinjudge.orchestration._session import missing_work
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

FAST = RetryPolicy(max_attempts=4, initial_wait=0.01, max_wait=0.05, jitter=0.01)


def max_in_window(times: list[float], seconds: float = 60.0) -> int:
    """Most events in any half-open window [t, t + seconds)."""
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - seconds:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def tokens_in_window(events: list[tuple[float, int]], seconds: float = 60.0) -> int:
    """Most tokens started in any half-open window [t, t + seconds)."""
    events = sorted(events)
    best = 0
    for i, (start, _) in enumerate(events):
        best = max(best, sum(n for t, n in events[i:] if t < start + seconds))
    return best


async def _burst(limiter: RateLimiter, clock: FakeClock, n: int, tokens: int = 0) -> list:
    """n concurrent callers, each taking 0.05 s of (virtual) call time after admission."""

    async def one() -> float:
        ticket = await limiter.acquire(tokens)
        await asyncio.sleep(0)
        return ticket.started

    return await asyncio.gather(*(one() for _ in range(n)))


def test_rpm_never_exceeded_in_any_window() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=100, clock=clock)
    starts = asyncio.run(_burst(limiter, clock, 350))
    assert max_in_window(starts) <= 100
    # Paced, not bursty: evenly spread at a little below the limit.
    assert max_in_window(starts, 6.0) <= 10
    achieved = (len(starts) - 1) / (max(starts) - min(starts)) * 60
    assert 0.9 * 100 <= achieved <= 100
    assert clock.slept > 0  # waited on the fake clock, never for real


def test_rpm_window_holds_with_a_full_headroom() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=50, clock=clock, headroom=1.0)
    starts = asyncio.run(_burst(limiter, clock, 200))
    assert max_in_window(starts) <= 50


def test_tpm_honoured() -> None:
    clock = FakeClock()
    limiter = RateLimiter(tpm=1000, clock=clock)

    async def main() -> list[tuple[float, int]]:
        events = []
        for n in (100, 250, 50, 400, 300, 120, 90, 600, 30, 200) * 4:
            ticket = await limiter.acquire(n)
            events.append((ticket.started, n))
            clock.advance(0.5)
        return events

    events = asyncio.run(main())
    assert tokens_in_window(events) <= 1000
    assert events[-1][0] > 60  # it had to wait: 8,560 tokens at 1,000 per minute


def test_tpm_request_larger_than_limit_waits_for_an_empty_window() -> None:
    clock = FakeClock()
    limiter = RateLimiter(tpm=1000, clock=clock)

    async def main() -> tuple[float, float]:
        first = await limiter.acquire(900)
        big = await limiter.acquire(5000)
        return first.started, big.started

    first, big = asyncio.run(main())
    assert big >= first + 60


def test_correction_after_actual_usage() -> None:
    async def second_start(actual: int | None) -> float:
        clock = FakeClock()
        limiter = RateLimiter(tpm=1000, clock=clock)
        ticket = await limiter.acquire(500)
        if actual is not None:
            limiter.settle(ticket, actual, completion_tokens=actual // 2)
        nxt = await limiter.acquire(400)
        return nxt.started

    uncorrected = asyncio.run(second_start(None))
    lower = asyncio.run(second_start(100))
    higher = asyncio.run(second_start(900))
    # Pacing charged 500 tokens (about 30 s at 1,000/min); the actual 100 frees most of it.
    assert lower < 10 < uncorrected
    assert higher > uncorrected
    # Window accounting follows the correction too: 900 + 400 > 1,000 must wait out the window.
    assert higher >= 60


def test_estimate_uses_running_average_of_completions() -> None:
    clock = FakeClock()
    limiter = RateLimiter(tpm=10_000, clock=clock, completion_guess=400)
    assert limiter.estimate(100) == 500

    async def main() -> None:
        for completion in (20, 40):
            ticket = await limiter.acquire(limiter.estimate(100))
            limiter.settle(ticket, 100 + completion, completion)

    asyncio.run(main())
    assert limiter.expected_completion() == 30
    assert limiter.estimate(100) == 130


def test_retry_after_holds_every_caller() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=6000, clock=clock)

    async def main() -> float:
        await limiter.acquire()
        limiter.hold(7.5)
        return (await limiter.acquire()).started

    assert asyncio.run(main()) >= 7.5


def test_pool_shares_one_limiter_per_model(tmp_path: Path) -> None:
    judge = ModelSettings(model="openai/m", base_url="http://127.0.0.1:9/v1", rpm=100)
    config = RunConfig(
        judge=judge,
        roles={
            "persona": judge.model_copy(update={"temperature": 0.7, "rpm": 60}),
            "orchestrator": ModelSettings(model="openai/other", base_url="http://127.0.0.1:9/v1"),
        },
        db=str(tmp_path / "x.duckdb"),
    )
    pool = ModelPool(config, None)  # type: ignore[arg-type]
    shared = pool.limiter_for(pool.settings_for("judge", "judge"))
    assert shared is not None and shared.rpm == 60  # the strictest limit of the model
    assert pool.limiter_for(pool.settings_for("Alice", "persona")) is shared
    assert pool.limiter_for(pool.settings_for("orchestrator", "orchestrator")) is None


def test_runner_honours_rpm_and_shows_achieved_rate(tmp_path: Path) -> None:
    with FakeOpenAIServer(rpm_limit=1200) as srv:
        data = write_jsonl(tmp_path / "items.jsonl", make_items(12))
        judge = ModelSettings(
            model="openai/local-judge", base_url=srv.base_url, timeout=5, rpm=1200
        )
        config = RunConfig(
            data=str(data), judge=judge, db=str(tmp_path / "r.duckdb"), retry=FAST, concurrency=8
        )
        prepared = prepare_run(config)
        store = RunStore(config.db)
        run_id = create_run(store, prepared)
        out = io.StringIO()
        console = Console(file=out, width=200, force_terminal=False)
        runner = SampleRunner(
            store,
            run_id,
            prepared.rubric,
            config,
            ModelPool(config, prepared.rubric),
            console=console,
        )

        async def go():
            try:
                return await runner.run(missing_work(store, run_id, prepared))
            finally:
                await runner.models.close()

        tally = asyncio.run(go())
        store.close()
        assert tally.ok == 12
        assert srv.rate_limited == 0
        assert tally.achieved_rpm is not None and tally.achieved_rpm <= 1200
        assert "req/min" in out.getvalue()
        # 12 requests paced at 20/s: the last starts about 0.55 s after the first. Unpaced, eight
        # workers would land within milliseconds; the bound leaves two intervals for network
        # jitter on a loaded machine (the first request also opens the connection).
        times = srv.accepted_times
        assert times[-1] - times[0] >= 9 * 60 / 1200


def test_fake_server_rpm_limit_answers_429_with_retry_after() -> None:
    with FakeOpenAIServer(rpm_limit=2) as srv:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()

        def post() -> tuple[int, str | None]:
            request = urllib.request.Request(
                srv.base_url + "/chat/completions",
                data=body,
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    return response.status, None
            except urllib.error.HTTPError as exc:
                return exc.code, exc.headers.get("Retry-After")

        assert post()[0] == 200
        assert post()[0] == 200
        status, retry_after = post()
        assert status == 429
        assert retry_after is not None and 0 < float(retry_after) <= 60
        assert srv.rate_limited == 1
        assert srv.max_in_window() == 2
