"""The process reward model in judge runs (``--prm``): evidence for single judges, panels and
discussions, scored once per item and recorded.

The model loads once per process (``shared_scorer``); the runner checks it before a run starts. Each
item's summary is scored once, whichever sample asks first (later samples and panel members
reuse the result); that sample records the PRM call (role ``prm``) and the ``prm_steps`` rows.
With ``ray`` in the PRM settings, :func:`prescore_evidence` scores every item still to judge
on Ray before judging starts, and the evidence step takes each item's result from there (and
records it the same way) instead of scoring it in this process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from clinjudge._util.timestamps import now
from clinjudge.judges.workflows._contract import WorkflowContext
from clinjudge.rubrics import Item

if TYPE_CHECKING:
    from clinjudge.prm_bridge import PRMEvidence, PRMRunSettings, PRMScorer, ScoredEvidence

# The PRM bridge's names are imported in the functions that use them, which run only with
# --prm: its evidence module loads AutoGen's agent framework (the verifier agent), which a run
# without a PRM must not pay for before its first request (#39).

PRM_ROLE = "prm"
_AHEAD = "prm_ahead"
"""``shared_state`` key of the evidence :func:`prescore_evidence` scored before judging."""


def prm_scorer(settings: PRMRunSettings) -> PRMScorer:
    """The process-wide PRM for these settings (loaded on first use)."""
    from clinjudge.prm_bridge import shared_scorer

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
    from clinjudge.prm_bridge import PRM_VERIFIER_NAME, evidence_rows

    cache: dict[str, asyncio.Future[PRMEvidence]] = ctx.models.shared_state.setdefault("prm", {})
    task = cache.get(ctx.item.id)
    if task is not None:
        return await asyncio.shield(task)
    started, clock = now(), time.perf_counter()
    ahead: ScoredEvidence | None = ctx.models.shared_state.get(_AHEAD, {}).get(ctx.item.id)
    if ahead is not None:  # scored on Ray before judging: recorded here as if scored now
        task = cache[ctx.item.id] = asyncio.get_running_loop().create_future()
        task.set_result(ahead.evidence)
    else:
        # Shielded: a cancelled sample must not cancel the scoring other samples wait for.
        task = cache[ctx.item.id] = asyncio.ensure_future(_score(ctx, settings))
    evidence = await asyncio.shield(task)
    ctx.record_local_call(
        PRM_VERIFIER_NAME,
        PRM_ROLE,
        settings.model,
        started=started,
        latency_s=ahead.latency_s if ahead is not None else time.perf_counter() - clock,
        prompt_tokens=evidence.n_tokens,
        error=evidence.error,
    )
    ctx.extra_rows.setdefault("prm_steps", []).extend(evidence_rows(ctx.run_id, evidence))
    return evidence


def prescore_evidence(
    shared_state: dict[str, Any], settings: PRMRunSettings | None, items: Sequence[Item]
) -> None:
    """With ``ray`` in the PRM settings, score the items' summaries on Ray now (blocking),
    before judging starts; each item's evidence step then takes its result from here.

    Nothing is stored here: the sample that first asks for an item's evidence records it, as
    in one process. Without ``--prm`` or ``ray``, nothing happens.

    Args:
        shared_state: The run's workflow state (``ModelPool.shared_state``).
        settings: The run's PRM settings.
        items: The items still to judge (repeats are scored once).
    """
    if settings is None or settings.ray is None or not items:
        return
    from clinjudge.prm_bridge import evidence_on_ray

    shared_state[_AHEAD] = evidence_on_ray(settings, items)


async def prompt_evidence(ctx: WorkflowContext) -> str | None:
    """The PRM's report on the item as prompt text (None without ``--prm``)."""
    evidence = await item_evidence(ctx)
    if evidence is None:
        return None
    from clinjudge.prm_bridge import evidence_text

    return evidence_text(evidence)


async def _score(ctx: WorkflowContext, settings: PRMRunSettings) -> PRMEvidence:
    from clinjudge.prm_bridge import PRMEvidence, score_item

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
