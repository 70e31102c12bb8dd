"""A model run in this process (``hf/``) times out when it stops making progress, not when it
is slow (#39): with ``--timeout 120`` a CPU run of SmolLM2 failed after 254 s while every step
still brought a token. The deadline of its calls follows the model's progress; a remote
endpoint's calls (and the Ray replicas') keep one wall clock each. The dry run of such a model
measures a short warm-up and says how long the run would take."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import clinjudge
from clinjudge.judges import JudgeModel, ModelSettings, ProviderFault
from clinjudge.judges.clients import TIMED_OUT
from clinjudge.judges.clients._deadlines import CallDeadlines, ProgressAge
from clinjudge.rubrics import ChatTurn, load_rubric
from tests.judges.clients._hf_models import save_tiny_chat_model


async def _call(deadlines: CallDeadlines, seconds: float) -> float:
    """A call of ``seconds`` under ``deadlines``; how long it ran (TimeoutError past its due)."""
    started = time.monotonic()
    entry = deadlines.start()
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if deadlines.finish(entry):
            raise TimeoutError(time.monotonic() - started) from None
        raise
    deadlines.finish(entry)
    return time.monotonic() - started


def _run(seconds: float, delay: float, progress: ProgressAge | None) -> float:
    async def main() -> float:
        return await _call(CallDeadlines(asyncio.get_running_loop(), delay, progress), seconds)

    return asyncio.run(main())


def test_a_call_outlives_its_timeout_while_the_model_makes_progress() -> None:
    # Five timeouts long, with a token "just now" at every look: never overdue.
    assert _run(0.5, 0.1, lambda: 0.0) >= 0.5


def test_a_call_times_out_a_timeout_after_the_model_stopped() -> None:
    started = time.monotonic()
    stops_at = started + 0.3  # progress until then, none after

    def age() -> float:
        return max(time.monotonic() - stops_at, 0.0)

    with pytest.raises(TimeoutError) as raised:
        _run(5.0, 0.2, age)
    ran = raised.value.args[0]
    assert 0.45 <= ran < 1.5  # 0.3 s of progress, then 0.2 s of none


def test_without_progress_each_call_keeps_its_wall_clock() -> None:
    with pytest.raises(TimeoutError) as raised:
        _run(5.0, 0.2, None)
    assert 0.19 <= raised.value.args[0] < 1.0
    with pytest.raises(TimeoutError):
        _run(5.0, 0.2, lambda: None)  # progress not known (yet): the same


def test_later_calls_still_expire_in_order_when_the_model_stalls() -> None:
    stalled_since = time.monotonic()

    async def main() -> list[str]:
        deadlines = CallDeadlines(
            asyncio.get_running_loop(), 0.2, lambda: time.monotonic() - stalled_since
        )

        async def one(wait: float) -> str:
            await asyncio.sleep(wait)
            try:
                await _call(deadlines, 5.0)
            except TimeoutError:
                return "timed out"
            return "done"

        return list(await asyncio.gather(one(0.0), one(0.1), one(0.3)))

    assert asyncio.run(main()) == ["timed out"] * 3


# -- the hf/ model through JudgeModel -----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random chat model saved as a checkpoint folder."""
    return save_tiny_chat_model(tmp_path_factory.mktemp("hf") / "tiny")


def _slow_steps(monkeypatch: pytest.MonkeyPatch, pause: Callable[[int], float]) -> None:
    """Every decoding step of the padded engine sleeps ``pause(step)`` seconds first."""
    from clinjudge.judges.clients import _hf_engine

    original = _hf_engine._Cancelled.__call__
    steps = 0

    def slow(self: Any, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        nonlocal steps
        steps += 1
        time.sleep(pause(steps))
        return original(self, input_ids, scores, **kwargs)

    monkeypatch.setattr(_hf_engine._Cancelled, "__call__", slow)


def _judge(tiny_model: Path, timeout: float, **settings: Any) -> JudgeModel:
    model = ModelSettings(
        model=f"hf/{tiny_model}", timeout=timeout, max_tokens=30, temperature=0, **settings
    )
    return JudgeModel(model, load_rubric("pdsqi9"))


def _generate(judge: JudgeModel) -> Any:
    async def main() -> Any:
        return await judge.generate([ChatTurn(role="user", content="Grade: stable, follow up.")])

    return asyncio.run(main())


def test_a_local_call_slower_than_its_timeout_succeeds_while_tokens_come(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge = _judge(tiny_model, timeout=0.5)
    _generate(judge)  # loaded and warm: the timed call below only decodes
    _slow_steps(monkeypatch, lambda step: 0.05)  # 30 steps: about 1.5 s, 3 timeouts
    started = time.monotonic()
    outcome = _generate(judge)
    assert time.monotonic() - started > 1.0
    assert outcome.result is not None and outcome.result.completion_tokens == 30


def test_a_local_call_times_out_when_its_batch_stops_decoding(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge = _judge(tiny_model, timeout=0.5)
    _generate(judge)
    _slow_steps(monkeypatch, lambda step: 1.5 if step == 5 else 0.0)  # one step stalls
    started = time.monotonic()
    with pytest.raises(ProviderFault) as raised:
        _generate(judge)
    assert raised.value.timed_out and str(raised.value) == TIMED_OUT
    assert time.monotonic() - started < 1.4  # failed during the stall, not after it
    # The abandoned batch ends in the model's thread; the next test waits for it to.
    engine = judge.client.engine  # type: ignore[attr-defined]
    engine.executor.submit(lambda: None).result()


def test_reading_a_batch_of_prompts_longer_than_the_timeout_is_progress_layer_by_layer(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge = _judge(tiny_model, timeout=0.5)
    _generate(judge)
    engine = judge.client.engine  # type: ignore[attr-defined]
    layers = engine.model.get_decoder().layers
    assert len(layers) == 2
    reading = [True]

    def slow_prompt(module: Any, args: Any) -> None:
        if reading[0]:  # the first forward pass reads the prompt: 0.3 s per layer
            time.sleep(0.3)

    handles = [layer.register_forward_pre_hook(slow_prompt) for layer in layers]
    _slow_steps(monkeypatch, lambda step: reading.__setitem__(0, False) or 0.0)
    try:
        started = time.monotonic()
        outcome = _generate(judge)  # 0.6 s without a token, never 0.5 s without a layer
    finally:
        for handle in handles:
            handle.remove()
    assert time.monotonic() - started > 0.6
    assert outcome.result is not None


# -- the dry run measures a warm-up --------------------------------------------------------------


def test_the_dry_run_of_a_local_model_estimates_its_wall_time_from_a_warm_up(
    tiny_model: Path,
) -> None:
    data = str(Path(__file__).resolve().parents[3] / "examples" / "pdsqi9_demo.jsonl")
    estimate = clinjudge.estimate(data, model=f"hf/{tiny_model}", limit=2, timeout=120)
    assert estimate.local_seconds is not None and estimate.local_seconds > 0
    assert estimate.local_note is not None and "measured on cpu" in estimate.local_note
    assert estimate.local_warning is None  # seconds, and no batch reads for 120 s
    # Reading a batch's prompts (a layer at a time) outlasts a tiny timeout: said before.
    short = clinjudge.estimate(data, model=f"hf/{tiny_model}", limit=2, timeout=0.001)
    assert short.local_warning is not None and "raise --timeout above" in short.local_warning
    # A hosted model's dry run measures nothing.
    assert clinjudge.estimate(data, model="mock/judge", limit=2).local_seconds is None
