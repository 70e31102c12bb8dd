"""The advice after timed-out calls fits the provider (#39): an in-process `hf/` model shares one
batch between the calls in flight, so lowering --concurrency (right for a server) is wrong."""

from __future__ import annotations

from clinjudge.judges import ModelSettings
from clinjudge.orchestration import timeout_advice


def test_a_server_is_told_to_lower_concurrency_or_raise_the_timeout() -> None:
    advice = timeout_advice(ModelSettings(model="openai/local-judge", timeout=120), 8)
    assert "raise --timeout" in advice and "lower --concurrency (now 8" in advice


def test_an_in_process_model_is_told_to_keep_concurrency_at_the_batch_size() -> None:
    advice = timeout_advice(ModelSettings(model="hf/models/SmolLM2-135M", timeout=120), 3)
    assert "raise --timeout" in advice
    assert "keep --concurrency at the batch size" in advice
    assert "lower --concurrency" not in advice


def test_an_in_process_model_times_out_on_no_progress_and_ray_on_the_wall_clock() -> None:
    # Its calls' deadlines follow the model's progress (#39): the advice says what timed out.
    local = timeout_advice(ModelSettings(model="hf/models/SmolLM2-135M", timeout=120), 3)
    assert local.startswith("the hf/ model made no progress for --timeout 120 s")
    on_ray = ModelSettings(model="hf/models/SmolLM2-135M", timeout=120, ray="local")
    remote = timeout_advice(on_ray, 3)
    assert remote.startswith("calls take longer than --timeout 120 s")
    assert "keep --concurrency at the batch size" in remote
