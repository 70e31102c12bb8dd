"""The process reward model in judge runs (``--prm``): evidence for single judges, panels and
discussions, scored once per item and recorded.

The model loads once per process (``shared_scorer``); the runner checks it before a run starts. Each
item's summary is scored once, whichever sample asks first (later samples and panel members
reuse the result); that sample records the PRM call (role ``prm``) and the ``prm_steps`` rows.
"""

from __future__ import annotations

import asyncio
import time

from clinjudge._util.timestamps import now
from clinjudge.judges.workflows._contract import WorkflowContext
from clinjudge.prm_bridge import (
    PRM_VERIFIER_NAME,
    PRMEvidence,
    PRMRunSettings,
    PRMScorer,
    evidence_rows,
    evidence_text,
    score_item,
    shared_scorer,
)

PRM_ROLE = "prm"


def prm_scorer(settings: PRMRunSettings) -> PRMScorer:
    """The process-wide PRM for these settings (loaded on first use)."""
    return shared_scorer(
        settings.model,
        settings.preset,
        overrides=settings.overrides or None,
        device=settings.device,
        dtype=settings.dtype,
        batch_tokens=settings.batch_tokens,
        prm_url=settings.url,
        served_model=settings.served_model,
    )


async def item_evidence(ctx: WorkflowContext) -> PRMEvidence | None:
    """The PRM's evidence on the item's summary, or None without ``--prm``.

    Args:
        ctx: The sample's context; the sample that scores the item records the call and steps.
    """
    settings = ctx.config.prm
    if settings is None:
        return None
    cache: dict[str, asyncio.Task[PRMEvidence]] = ctx.models.shared_state.setdefault("prm", {})
    task = cache.get(ctx.item.id)
    if task is not None:
        return await asyncio.shield(task)
    started, clock = now(), time.perf_counter()
    # Shielded: a cancelled sample must not cancel the scoring other samples wait for.
    task = cache[ctx.item.id] = asyncio.ensure_future(_score(ctx, settings))
    evidence = await asyncio.shield(task)
    ctx.record_local_call(
        PRM_VERIFIER_NAME,
        PRM_ROLE,
        settings.model,
        started=started,
        latency_s=time.perf_counter() - clock,
        prompt_tokens=evidence.n_tokens,
        error=evidence.error,
    )
    ctx.extra_rows.setdefault("prm_steps", []).extend(evidence_rows(ctx.run_id, evidence))
    return evidence


async def prompt_evidence(ctx: WorkflowContext) -> str | None:
    """The PRM's report on the item as prompt text (None without ``--prm``)."""
    evidence = await item_evidence(ctx)
    return None if evidence is None else evidence_text(evidence)


async def _score(ctx: WorkflowContext, settings: PRMRunSettings) -> PRMEvidence:
    try:
        return await score_item(
            prm_scorer(settings),
            ctx.item,
            threshold=settings.threshold,
            segmenter=settings.segmenter,
            section=settings.section,
        )
    except Exception as exc:  # noqa: BLE001 - a PRM failure must not cost the judgment
        return PRMEvidence(
            item_id=ctx.item.id,
            model=settings.model,
            format=settings.preset,
            threshold=settings.threshold,
            error=f"{type(exc).__name__}: {exc}"[:500],
        )
