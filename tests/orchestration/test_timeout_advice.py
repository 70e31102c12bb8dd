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
