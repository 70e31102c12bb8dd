"""The dry run's wall-time estimate of a model run in this process (``hf/``; #39).

A hosted model's dry run prices its tokens; a local model costs time, which on a CPU can be
hours for a few items. The estimate reads one of the run's prompts on the model and decodes a
few tokens (:func:`clinjudge.judges.clients.measure_decoding`), then scales those timings to the
run: every prompt token read at the measured rate, and each batch (``--concurrency`` items, at
most the model's batch size) decoding its replies one step at a time, up to ``--max-tokens``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clinjudge.judges.clients import (
    DecodeTiming,
    count_message_tokens,
    measure_decoding,
    provider_for,
)
from clinjudge.judges.doclens import doclens_estimate_prompts
from clinjudge.orchestration._run_items import run_items
from clinjudge.rubrics import ChatTurn, render_messages

if TYPE_CHECKING:
    from clinjudge.orchestration._session import DryRunEstimate, PreparedRun

LONG_RUN_S = 600.0
"""A local run estimated above this many seconds gets a warning before it starts."""


@dataclass(frozen=True)
class LocalWallTime:
    """How long a local model would take for a run.

    Args:
        seconds: The estimate (load, prompts and decoding; replies at their cap); None when
            the warm-up failed (``note`` says why).
        note: What it was measured on and how it was scaled.
        warning: Said before a long run, or when reading one batch's prompts (no token yet)
            outlasts ``--timeout``; None otherwise.
    """

    seconds: float | None
    note: str
    warning: str | None


def duration_text(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3 h 05 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def _first_prompt(prepared: PreparedRun) -> list[dict[str, str]] | None:
    """The run's first prompt as role/content turns (None without items)."""
    config = prepared.config
    item = next(iter(run_items(prepared.items)), None)
    if item is None:
        return None
    turns: list[ChatTurn]
    if prepared.rubric.method == "claims":
        turns = next(iter(doclens_estimate_prompts(item, config, prepared.personas)))
    else:
        shots = config.shots_for(prepared.shots, item.id, 1)
        turns = render_messages(item, prepared.rubric, shots, explanations=config.explanations)
    return [{"role": t.role, "content": t.content} for t in turns]


def estimate_local_wall_time(
    prepared: PreparedRun, counted: DryRunEstimate
) -> LocalWallTime | None:
    """Measure a warm-up of the run's ``hf/`` model and scale it to the run.

    Args:
        prepared: The validated run.
        counted: Its token counts (:func:`estimate_run`).

    Returns:
        The estimate; None for a model that does not run in this process (another provider,
        or ``hf/`` on Ray replicas) or a run without prompts.

    A warm-up that fails (the ``prm`` extra missing, unreadable files) gives no seconds and
    says why: the dry run still counts tokens.
    """
    settings = prepared.config.judge
    if settings is None or not provider_for(settings).in_process or settings.ray is not None:
        return None
    messages = _first_prompt(prepared) if counted.prompts else None
    if messages is None:
        return None
    try:
        timing = measure_decoding(settings, messages)
    except Exception as exc:  # noqa: BLE001 - the dry run goes on without it
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        return LocalWallTime(None, f"local wall time not measured: {reason}", None)
    if timing is None:
        return None
    # The run's prompts were counted with tiktoken, the warm-up's by the model's tokenizer:
    # the measured prompt, counted as the run's were, converts one into the other.
    counted_first = count_message_tokens([m["content"] for m in messages])
    scale = timing.prompt_s / max(counted_first, 1)
    return _scaled(timing, counted, scale, prepared.config.concurrency, settings.timeout)


def _scaled(
    timing: DecodeTiming,
    counted: DryRunEstimate,
    seconds_per_counted: float,
    concurrency: int,
    timeout: float,
) -> LocalWallTime:
    """The warm-up's timings scaled to the run's prompts (``seconds_per_counted``: seconds to
    read one token as the dry run counts them), batches and reply caps."""
    batch = max(1, min(concurrency, timing.max_batch))
    batches = math.ceil(counted.prompts / batch)
    rate = timing.prompt_tokens_per_s
    reading = counted.prompt_tokens * seconds_per_counted
    reply = counted.max_completion_tokens / counted.prompts
    decoding = batches * reply * (timing.step_s or 0.0)
    seconds = timing.load_s + reading + decoding
    step = "" if timing.step_s is None else f", {timing.step_s * 1000:,.0f} ms per decoding step"
    note = (
        f"local wall time measured on {timing.device}: prompts read at {rate:,.0f} tokens/s"
        f"{step} (one prompt of {timing.prompt_tokens:,} tokens); {batches} batch(es) of up to "
        f"{batch}: prompts ~{duration_text(reading)}, decoding ~{duration_text(decoding)} "
        "with every reply at its --max-tokens cap (an upper bound; shared prompt prefixes are "
        "read once), model load "
        f"~{duration_text(timing.load_s)}; on a CPU a step of a batch takes longer than one "
        "row's"
    )
    # The longest a working model goes without progress: reading one batch's prompts, in
    # which each decoder layer's forward pass reports progress as it ends.
    silence = min(batch, counted.prompts) * reading / counted.prompts / max(timing.layers, 1)
    return LocalWallTime(seconds, note, _warning(seconds, silence, timeout))


def _warning(seconds: float, silence: float, timeout: float) -> str | None:
    """Before a long run, or when the model would go ``silence`` seconds without progress
    (reading a batch's prompts) and that outlasts ``timeout``: its calls would time out."""
    if silence > timeout:
        return (
            f"reading one batch's prompts leaves the model ~{duration_text(silence)} without "
            f"progress, longer than --timeout {timeout:g} s: raise --timeout above "
            f"{math.ceil(silence * 1.5)} s (a local call times out only when its model makes "
            "no progress for that long)"
        )
    if seconds > LONG_RUN_S:
        return (
            f"this run would take about {duration_text(seconds)} in this process; try "
            "--limit on a few items first, a GPU, or a served model (--base-url)"
        )
    return None
