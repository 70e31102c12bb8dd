"""Samples run in their worker's own task (issue 27: no task per sample). The circuit breaker
stops the samples in flight by cancelling their workers; a cancellation of the run itself that
arrives at the same moment still ends the run as cancelled, and nothing hangs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from clinjudge.judges import JudgeModel, ModelSettings
from clinjudge.judges.workflows import JUDGE_AGENT, SampleVerdict, WorkflowResult
from clinjudge.orchestration import (
    CircuitBreakerOpen,
    RunConfig,
    SampleRunner,
    create_run,
    prepare_run,
)
from clinjudge.orchestration._session import missing_work
from clinjudge.runs import RunStore
from tests.factories import make_items, write_jsonl

FAILING = {"item-0000", "item-0001"}


def _runner(tmp_path: Path) -> tuple[SampleRunner, RunStore, list]:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(6))
    config = RunConfig(
        data=str(data),
        db=str(tmp_path / "x.duckdb"),
        judge=ModelSettings(model="mock/judge"),
        concurrency=4,
        max_consecutive_failures=2,
    )
    prepared = prepare_run(config)
    store = RunStore(config.db)
    run_id = create_run(store, prepared)
    assert config.judge is not None
    model = JudgeModel(config.judge, prepared.rubric)
    runner = SampleRunner(store, run_id, prepared.rubric, config, model, show_progress=False)
    return runner, store, missing_work(store, run_id, prepared)


def _workflow(stopped: list[str], on_second_failure=None):
    failures = []

    async def workflow(ctx) -> WorkflowResult:
        item = ctx.item.id
        if item in FAILING:
            await asyncio.sleep(0.01)
            ctx.calls.append(
                {
                    "item_id": item,
                    "model": "mock/judge",
                    "status": "error",
                    "error": "HTTP 502: bad gateway",
                    "cost_usd": None,
                }
            )
            failures.append(item)
            if len(failures) == 2 and on_second_failure is not None:
                on_second_failure()
            return WorkflowResult(
                JUDGE_AGENT, SampleVerdict("failed", error="provider: HTTP 502: bad gateway")
            )
        try:
            await asyncio.sleep(30)  # a hang: only a cancellation ends it
        except asyncio.CancelledError:
            stopped.append(item)
            raise
        raise AssertionError("a hanging sample finished")

    return workflow


def test_the_breaker_cancels_the_samples_in_flight(tmp_path):
    runner, store, work = _runner(tmp_path)
    stopped: list[str] = []
    runner.workflow = _workflow(stopped)
    started = time.monotonic()
    with pytest.raises(CircuitBreakerOpen):
        asyncio.run(runner.run(work))
    assert time.monotonic() - started < 10
    assert sorted(stopped) == [
        "item-0002",
        "item-0003",
        "item-0004",
    ]  # every other sample in flight
    assert runner.tally.ok == runner.tally.failed == 0  # held failures dropped, for --resume
    assert runner.tally.interrupted
    store.close()


def test_a_run_cancelled_as_the_breaker_trips_ends_cancelled(tmp_path):
    runner, store, work = _runner(tmp_path)
    stopped: list[str] = []

    async def main() -> None:
        inner = asyncio.create_task(runner.run(work))
        runner.workflow = _workflow(stopped, on_second_failure=inner.cancel)
        await inner

    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert time.monotonic() - started < 10
    assert sorted(stopped) == ["item-0002", "item-0003", "item-0004"]
    assert runner.tally.interrupted
    store.close()
