"""A short measured warm-up of an ``hf/`` model, for the dry run's wall-time estimate (#39).

A hosted model's dry run prices tokens; a model run in this process costs time instead, and on
a CPU that can be hours. The warm-up loads the model (the process-wide one: a run that follows
in the same process reuses it), reads one of the run's prompts and decodes a few tokens, timing
both: how fast prompts are read (tokens per second) and how long one decoding step takes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from clinjudge.judges.clients._hf_client import HFClient, batch_size_for
from clinjudge.judges.clients._settings import ModelSettings
from clinjudge.judges.clients.providers.hf import hf_client

WARMUP_STEPS = 8
"""Tokens decoded by the warm-up (after the prompt is read)."""


@dataclass(frozen=True)
class DecodeTiming:
    """What a warm-up measured on one prompt.

    Args:
        device: Where the model runs (``cpu``, ``cuda:0``).
        prompt_tokens: Tokens of the prompt read.
        prompt_s: Seconds to read it (up to the first new token).
        step_s: Seconds per decoding step after it; None when the model ended its reply at
            the first token, or with the ``paged`` engine (which reports no steps: ``prompt_s``
            is then the whole warm-up).
        load_s: Seconds the model took to load (0 when it was loaded already).
        max_batch: Most requests one batch of this model holds.
        layers: Decoder layers that report progress as each finishes its forward pass (0:
            progress comes with batches and tokens only).
    """

    device: str
    prompt_tokens: int
    prompt_s: float
    step_s: float | None
    load_s: float
    max_batch: int
    layers: int = 0

    @property
    def prompt_tokens_per_s(self) -> float:
        """How fast prompts are read."""
        return self.prompt_tokens / self.prompt_s if self.prompt_s > 0 else float("inf")


def measure_decoding(
    settings: ModelSettings, messages: list[dict[str, str]], steps: int = WARMUP_STEPS
) -> DecodeTiming | None:
    """Load an ``hf/`` model and time reading one prompt and ``steps`` decoding steps.

    Args:
        settings: The model's settings (device, dtype and engine as a run would use them).
        messages: One prompt, as role/content turns.
        steps: Tokens to decode after the prompt.

    Returns:
        The timing; None for a model run on Ray replicas (nothing runs here).

    Raises:
        ProviderFault: torch, transformers or llguidance is not installed.
        OSError: The model's files cannot be read.
    """
    client = hf_client(settings)
    if type(client) is not HFClient:  # Ray: the replicas decode elsewhere
        return None
    from clinjudge.judges.clients._hf_engine import GenerationRequest, GenerationResult

    engine = client.engine
    started = time.perf_counter()
    engine.start_loading().result()
    load_s = time.perf_counter() - started
    # The padded engine reports the end of every decoding step (its calls' deadlines follow
    # the model's progress): the first ends once the prompt is read, the others one token each.
    beats: list[float] = []
    stepped = engine._stepped

    def step() -> None:
        beats.append(time.perf_counter())
        stepped()

    def run() -> list[GenerationResult | BaseException]:
        beats.append(time.perf_counter())
        return engine.run_batch([request])

    request = GenerationRequest(messages=messages, max_tokens=steps, temperature=0)
    engine._stepped = step  # type: ignore[method-assign]
    try:
        [result] = engine.executor.submit(run).result()
    finally:
        del engine._stepped  # the class's method again
    if isinstance(result, BaseException):
        raise result
    return DecodeTiming(
        device=engine.device,
        prompt_tokens=result.prompt_tokens,
        prompt_s=beats[1] - beats[0] if len(beats) > 1 else result.generate_s,
        step_s=(beats[-1] - beats[1]) / (len(beats) - 2) if len(beats) > 2 else None,
        load_s=0.0 if load_s < 0.05 else load_s,
        max_batch=batch_size_for(engine),
        layers=engine.watched_layers,
    )
