"""The runner's call function over rendered turns (``SampleContext.call_fn``): its first attempt is
made without a coroutine per layer and its retries go on through ``retry_after``, so it must
record, retry, fail and stop exactly as the general path (``SampleContext.send`` through
``retry_send``) does. A cancelled call leaves nothing counted in flight and no slot taken, and a
single-judge run keeps its calls within ``concurrency`` without the run-wide slots.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from clinjudge.judges import CallOutcome, JudgeModel, ModelSettings, ProviderFault
from clinjudge.judges.clients import PLAIN_CALL, CallConfig
from clinjudge.judges.workflows import one_call_at_a_time, workflow_for
from clinjudge.orchestration import (
    RetryPolicy,
    RunConfig,
    SampleRunner,
    create_run,
    prepare_run,
)
from clinjudge.orchestration._context import ModelPool, SampleContext
from clinjudge.orchestration._session import missing_work
from clinjudge.rubrics import ChatTurn, Rubric, render_messages
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl
from tests.fake_openai import pdsqi9_scores

FAST = RetryPolicy(max_attempts=4, timeout_retries=1, initial_wait=0.0, max_wait=0.01, jitter=0.0)

# A script entry: a fault to raise, or None for a reply.
Script = list[ProviderFault | None]


def _fault(kind: str) -> ProviderFault:
    if kind == "502":
        return ProviderFault("HTTP 502: bad gateway", retryable=True)
    if kind == "429":
        return ProviderFault("HTTP 429: slow down", retryable=True, retry_after=0.001)
    if kind == "timeout":
        return ProviderFault("timed out: after 5 s", retryable=True, timed_out=True)
    return ProviderFault("HTTP 400: bad request", retryable=False)


SCRIPTS: dict[str, tuple[str, ...]] = {
    "ok at once": (),
    "502 then ok": ("502",),
    "429, 502 then ok": ("429", "502"),
    "timeout then ok": ("timeout",),
    "two timeouts: the second is final": ("timeout", "timeout"),
    "not retryable": ("400",),
    "attempts run out": ("502", "502", "502", "502"),
    "timeout, 502, timeout: final": ("timeout", "502", "timeout"),
}


class _Scripted:
    """Stands in for ``JudgeModel.generate``: raises the scripted faults in turn, then replies;
    notes what every attempt was sent."""

    def __init__(self, faults: tuple[str, ...], text: str):
        self.faults = list(faults)
        self.text = text
        self.sent: list[tuple[int, str, int | None]] = []

    async def __call__(self, turns: list[ChatTurn], config: CallConfig = PLAIN_CALL) -> CallOutcome:
        self.sent.append((len(turns), config.variation, config.max_tokens))
        await asyncio.sleep(0)
        if self.faults:
            raise _fault(self.faults.pop(0))
        return CallOutcome(
            text=self.text,
            finish_reason="stop",
            prompt_tokens=11,
            completion_tokens=7,
            tokens_estimated=False,
            cost_usd=0.25,
            latency_s=0.0,
        )


def _context(rubric: Rubric, tmp_path: Path, **config: Any) -> tuple[SampleContext, JudgeModel]:
    settings = ModelSettings(model="openai/local-judge", base_url="http://127.0.0.1:9/v1")
    run_config = RunConfig(
        data=str(tmp_path / "none.jsonl"), judge=settings, retry=FAST, seed=7, **config
    )
    model = JudgeModel(settings, rubric)
    pool = ModelPool(run_config, rubric, model)
    return SampleContext("run-1", make_items(1)[0], 3, run_config, rubric, pool), model


def _comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Start times and latencies differ between any two runs; everything else must not.
    return [{k: v for k, v in row.items() if k not in ("started_at", "latency_s")} for row in rows]


async def _through(ctx: SampleContext, model: JudgeModel, fast: bool, turns: list[ChatTurn]):
    try:
        if fast:
            return await ctx.call_fn("judge", "judge")(turns, CallConfig(max_tokens=123))
        # The general path, as every call went before the call function made its own first
        # attempt: send() with an attempt function, retried by retry_send.
        return await ctx.send(
            "judge",
            "judge",
            model,
            lambda: model.generate(turns, CallConfig(max_tokens=123, variation=ctx.variation)),
        )
    except ProviderFault as fault:
        return fault


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_call_fn_records_and_retries_as_send_does(
    pdsqi9: Rubric, tmp_path: Path, name: str
) -> None:
    faults = SCRIPTS[name]
    turns = render_messages(make_items(1)[0], pdsqi9)
    seen: dict[bool, tuple[Any, list[dict[str, Any]], list[tuple[int, str, int | None]]]] = {}
    for fast in (True, False):
        ctx, model = _context(pdsqi9, tmp_path)
        scripted = _Scripted(faults, "reply")
        model.generate = scripted  # type: ignore[method-assign]
        result = asyncio.run(_through(ctx, model, fast, turns))
        seen[fast] = (result, ctx.calls, scripted.sent)
    (fast_result, fast_rows, fast_sent), (slow_result, slow_rows, slow_sent) = (
        seen[True],
        seen[False],
    )
    assert _comparable(fast_rows) == _comparable(slow_rows)
    assert fast_sent == slow_sent
    if isinstance(slow_result, ProviderFault):
        assert isinstance(fast_result, ProviderFault)
        assert fast_result.reason == slow_result.reason
    else:
        assert isinstance(fast_result, CallOutcome) and fast_result.text == slow_result.text
    # What the policy says, independently of either path: timeouts retried once, other
    # retryable faults until max_attempts, a non-retryable fault never.
    expected_attempts = {
        "ok at once": 1,
        "502 then ok": 2,
        "429, 502 then ok": 3,
        "timeout then ok": 2,
        "two timeouts: the second is final": 2,
        "not retryable": 1,
        "attempts run out": 4,
        "timeout, 502, timeout: final": 3,
    }[name]
    assert len(fast_rows) == expected_attempts
    assert [row["seq"] for row in fast_rows] == list(range(expected_attempts))
    assert all(row["agent"] == "judge" and row["item_id"] == "item-0000" for row in fast_rows)
    assert all(sent == (len(turns), "7|3", 123) for sent in fast_sent)
    statuses = [row["status"] for row in fast_rows]
    succeeded = isinstance(fast_result, CallOutcome)
    assert statuses == ["error"] * (expected_attempts - succeeded) + ["ok"] * succeeded


@pytest.mark.parametrize("bounded", [False, True])
def test_a_cancelled_call_leaves_nothing_in_flight(
    pdsqi9: Rubric, tmp_path: Path, bounded: bool
) -> None:
    turns = render_messages(make_items(1)[0], pdsqi9)

    async def go() -> None:
        ctx, model = _context(pdsqi9, tmp_path, concurrency=2)
        ctx = SampleContext(
            ctx.run_id,
            ctx.item,
            ctx.sample,
            ctx.config,
            ctx.rubric,
            ctx.models,
            calls_bounded=bounded,
        )
        started = asyncio.Event()

        async def hang(turns: list[ChatTurn], *_: Any) -> CallOutcome:
            started.set()
            await asyncio.Event().wait()
            raise AssertionError("never answered")

        model.generate = hang  # type: ignore[method-assign]
        task = asyncio.ensure_future(ctx.call_fn("judge", "judge")(turns, PLAIN_CALL))
        await started.wait()
        assert ctx.models.calls_in_flight()[0] == 1
        # Of the two slots, the call holds one unless its calls are bounded by the caller.
        slots = ctx.models.call_slots()
        await asyncio.wait_for(slots.acquire(), 1)
        assert slots.locked() is not bounded
        slots.release()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()
        assert ctx.models.calls_in_flight() == (0, None)
        assert ctx.calls == []  # a cancelled attempt is not a recorded call
        # Every slot is free again: both can be taken at once without waiting.
        for _ in range(2):
            await asyncio.wait_for(slots.acquire(), 1)

    asyncio.run(go())


def test_only_the_single_judge_calls_one_at_a_time() -> None:
    assert one_call_at_a_time(workflow_for("single")[1])
    assert not one_call_at_a_time(workflow_for("panel")[1])
    assert not one_call_at_a_time(workflow_for("magentic")[1])


def test_a_single_judge_run_stays_within_concurrency(tmp_path: Path, pdsqi9: Rubric) -> None:
    concurrency = 3
    data = write_jsonl(tmp_path / "items.jsonl", make_items(12))
    config = RunConfig(
        data=str(data),
        db=str(tmp_path / "x.duckdb"),
        judge=ModelSettings(model="openai/local-judge", base_url="http://127.0.0.1:9/v1"),
        concurrency=concurrency,
        samples=2,
        retry=FAST,
    )
    prepared = prepare_run(config)
    assert config.judge is not None
    model = JudgeModel(config.judge, prepared.rubric)
    reply = json.dumps(pdsqi9_scores("x"))
    in_flight = [0, 0]  # now, most seen
    failed_once: set[tuple[str, str]] = set()

    async def generate(turns: list[ChatTurn], config: CallConfig = PLAIN_CALL) -> CallOutcome:
        variation = config.variation
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        try:
            await asyncio.sleep(0.002)
            # The first attempt of each item's first sample fails once and is retried.
            first = (turns[-1].content, variation)
            if variation.endswith("|1") and first not in failed_once:
                failed_once.add(first)
                raise _fault("502")
            return await _Scripted((), reply)(turns)
        finally:
            in_flight[0] -= 1

    model.generate = generate  # type: ignore[method-assign]
    with RunStore(config.db) as store:
        run_id = create_run(store, prepared)
        runner = SampleRunner(store, run_id, prepared.rubric, config, model, show_progress=False)
        tally = asyncio.run(runner.run(missing_work(store, run_id, prepared)))
        failed = store.query("SELECT count(*) AS n FROM calls WHERE status = 'error'")
    assert tally.ok == 24 and tally.failed == 0
    assert failed == [{"n": 12}]
    assert in_flight[1] == concurrency
