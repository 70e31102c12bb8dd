"""The dry run's local wall time scales a warm-up to the run (#39): prompts read at the measured
speed, batches of ``--concurrency`` items decoding their replies step by step; it warns before a
long run and when a batch's prompts take longer to read than ``--timeout``."""

from __future__ import annotations

import pytest

from clinjudge.judges.clients import DecodeTiming
from clinjudge.orchestration import DryRunEstimate, duration_text
from clinjudge.orchestration._local_estimate import LONG_RUN_S, _scaled


def _timing(step_s: float | None = 0.1, load_s: float = 2.0, layers: int = 0) -> DecodeTiming:
    return DecodeTiming(
        device="cpu",
        prompt_tokens=5000,
        prompt_s=10.0,
        step_s=step_s,
        load_s=load_s,
        max_batch=8,
        layers=layers,
    )


def _counted(prompts: int, prompt_tokens: int, reply: int = 100) -> DryRunEstimate:
    return DryRunEstimate(prompts, prompt_tokens, prompts * reply, 0.0, prompt_tokens // prompts)


def test_prompts_batches_and_steps_add_up() -> None:
    # 20 prompts of 4,000 counted tokens at 2.5 ms each (10 s per prompt); batches of 8: 3
    # batches of 100 steps at 0.1 s; and the load.
    local = _scaled(_timing(), _counted(20, 80_000), 10.0 / 4000, 16, 600)
    assert local.seconds == pytest.approx(2.0 + 200.0 + 3 * 100 * 0.1)
    assert "3 batch(es) of up to 8" in local.note
    assert local.warning is None


def test_a_long_run_is_warned_of() -> None:
    local = _scaled(_timing(), _counted(400, 1_600_000), 10.0 / 4000, 8, 600)
    assert local.seconds is not None and local.seconds > LONG_RUN_S
    assert local.warning is not None and local.warning.startswith("this run would take about")


def test_a_batch_read_longer_than_the_timeout_is_warned_of() -> None:
    # 8 prompts of 10 s each are read before the batch's first token: 80 s > --timeout 60.
    local = _scaled(_timing(), _counted(8, 32_000), 10.0 / 4000, 8, 60)
    assert local.warning is not None
    assert "~80 s without progress" in local.warning and "above 120 s" in local.warning
    # Fewer items than a batch: only those are read together.
    assert _scaled(_timing(), _counted(2, 8_000), 10.0 / 4000, 8, 60).warning is None
    # Each of 30 layers reports progress as it ends: under 3 s without any.
    assert _scaled(_timing(layers=30), _counted(8, 32_000), 10.0 / 4000, 8, 60).warning is None


def test_a_reply_ended_at_once_counts_no_decoding() -> None:
    local = _scaled(_timing(step_s=None, load_s=0.0), _counted(1, 4000), 10.0 / 4000, 8, 600)
    assert local.seconds == pytest.approx(10.0)
    assert "ms per decoding step" not in local.note


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(12.4, "12 s"), (89, "89 s"), (600, "10 min"), (3900, "1 h 05 min"), (36000, "10 h 00 min")],
)
def test_durations_read_as_people_say_them(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text
