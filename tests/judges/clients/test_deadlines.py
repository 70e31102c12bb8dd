"""Call deadlines under one shared timer behave as ``asyncio.timeout`` around each call: the same
calls time out, others' cancellations stay theirs, and every task's cancel count is restored."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from clinjudge.judges import JudgeModel, ModelSettings, ProviderFault
from clinjudge.judges.clients._deadlines import CallDeadlines
from clinjudge.rubrics import ChatTurn, Rubric
from tests.fake_openai import FakeOpenAIServer, Fault

Body = Callable[[], Awaitable[str]]


async def _shared(deadlines: CallDeadlines, body: Body) -> str:
    """``body`` bounded the way JudgeModel bounds a call."""
    deadline = deadlines.start()
    try:
        result = await body()
    except BaseException as exc:
        if deadlines.finish(deadline) and isinstance(exc, asyncio.CancelledError):
            raise TimeoutError from exc
        raise
    deadlines.finish(deadline)
    return result


async def _reference(delay: float, body: Body) -> str:
    async with asyncio.timeout(delay):
        return await body()


async def _outcome(call: Awaitable[str]) -> tuple[str, int]:
    """What a call ended in, and its task's cancel count afterwards."""
    try:
        result = await call
    except TimeoutError:
        result = "TimeoutError"
    except asyncio.CancelledError:
        result = "CancelledError"
    task = asyncio.current_task()
    assert task is not None
    return result, task.cancelling()


def _sleeper(seconds: float) -> Body:
    async def body() -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    return body


def _swallower(seconds: float) -> Body:
    """Takes a cancellation in and answers anyway (as some client libraries do)."""

    async def body() -> str:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            return "answered anyway"
        return "finished"

    return body


def _both_ways(delay: float, bodies: list[Body], outside: dict[int, float]) -> list[Any]:
    """Run ``bodies`` concurrently under shared deadlines and under asyncio.timeout; tasks
    named in ``outside`` are also cancelled from outside after that many seconds."""

    async def run(shared: bool) -> list[tuple[str, int]]:
        deadlines = CallDeadlines(asyncio.get_running_loop(), delay)

        async def one(body: Body) -> tuple[str, int]:
            call = _shared(deadlines, body) if shared else _reference(delay, body)
            return await _outcome(call)

        tasks = [asyncio.create_task(one(b)) for b in bodies]
        for index, after in outside.items():
            asyncio.get_running_loop().call_later(after, tasks[index].cancel)
        done = await asyncio.gather(*tasks, return_exceptions=True)
        assert deadlines.in_flight == 0 or not shared  # nothing left behind
        return list(done)

    return [asyncio.run(run(True)), asyncio.run(run(False))]


def test_the_calls_past_the_timeout_time_out_and_the_others_answer() -> None:
    # Margins of most of a second: which call ends first never depends on load.
    bodies = [_sleeper(s) for s in (0.0, 0.05, 2.5, 0.1, 3.0, 0.0)]
    shared, reference = _both_ways(1.0, bodies, {})
    assert shared == reference
    assert [r for r, _ in shared] == [
        "slept 0.0",
        "slept 0.05",
        "TimeoutError",
        "slept 0.1",
        "TimeoutError",
        "slept 0.0",
    ]
    assert all(count == 0 for _, count in shared)


def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    # Call 0 is cancelled by its caller before its deadline, call 1 after it timed out.
    bodies = [_sleeper(3.0), _sleeper(3.0), _sleeper(0.0)]
    shared, reference = _both_ways(1.0, bodies, {0: 0.1})
    assert shared == reference
    assert shared[0] == ("CancelledError", 1)  # the caller's cancellation, still requested
    assert shared[1] == ("TimeoutError", 0)
    assert shared[2] == ("slept 0.0", 0)


def test_a_call_that_swallows_the_cancellation_answers_with_its_count_restored() -> None:
    shared, reference = _both_ways(0.3, [_swallower(3.0), _swallower(0.0)], {})
    assert shared == reference == [("answered anyway", 0), ("finished", 0)]


def test_later_calls_keep_their_own_deadlines_after_the_first_expires() -> None:
    # Calls started one after another: each times out at its own deadline, not the first's.
    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        deadlines = CallDeadlines(loop, 0.4)
        ended: list[float] = []

        async def one(start_after: float) -> None:
            await asyncio.sleep(start_after)
            began = loop.time()
            with contextlib.suppress(TimeoutError):
                await _shared(deadlines, _sleeper(5.0))
            ended.append(loop.time() - began)

        await asyncio.gather(one(0.0), one(0.25), one(0.5))
        assert deadlines.in_flight == 0
        return ended

    for took in asyncio.run(run()):
        assert 0.4 <= took < 2.0  # never before its own deadline, never stuck


def test_deadlines_need_a_task() -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(RuntimeError, match="needs a task"):
            CallDeadlines(loop, 1.0).start()
    finally:
        loop.close()


def test_a_model_times_out_on_each_of_its_event_loops(pdsqi9: Rubric) -> None:
    # One JudgeModel used from two event loops in turn (a warm-up, then the run): the
    # deadlines belong to each loop, and a hanging server times out on both.
    faults = [Fault("hang", hang_seconds=3.0), None, Fault("hang", hang_seconds=3.0)]
    with FakeOpenAIServer(faults=faults) as srv:
        settings = ModelSettings(model="openai/local-judge", base_url=srv.base_url, timeout=0.5)
        model = JudgeModel(settings, pdsqi9)
        turns = [ChatTurn("user", "hi")]

        async def once() -> str:
            try:
                return (await model.generate(turns)).finish_reason
            except ProviderFault as fault:
                return fault.reason
            finally:
                await model.close()

        assert asyncio.run(once()) == "timed out"
        assert asyncio.run(once()) == "stop"
        assert asyncio.run(once()) == "timed out"
