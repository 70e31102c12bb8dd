"""The PRM evidence of a judge run scored on Ray before judging starts (``judge run --prm --ray``).

Every item's summary becomes the chain the in-process evidence step would score
(:func:`item_chain`), the chains go through :func:`score_on_ray` (one model replica per GPU, the
token-budget batching of one process), and each result becomes the item's
:class:`PRMEvidence` as :func:`score_text` would build it. Nothing is written here: the judge
run's evidence step takes each item's evidence when the item is judged and records it with the
item's sample (the ``prm`` call and the ``prm_steps`` rows), so the driver stays the only
writer and a run judged this way stores what an in-process run stores.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from clinjudge.prm_bridge._presets import make_format
from clinjudge.prm_bridge._ray_runner import (
    RayOptions,
    RayProgress,
    ScorerSpec,
    plan_batches,
    require_ray,
    score_on_ray,
)
from clinjudge.prm_bridge._segment import Chain
from clinjudge.prm_bridge._settings import PRMRunSettings
from clinjudge.prm_bridge._tool import PRMEvidence, item_chain, with_result
from clinjudge.rubrics import Item

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScoredEvidence:
    """An item's evidence scored ahead, and its share of its forward pass's time (seconds)."""

    evidence: PRMEvidence
    latency_s: float


def ray_spec(settings: PRMRunSettings) -> tuple[ScorerSpec, RayOptions]:
    """How the replicas load the run's PRM, and where they run.

    Args:
        settings: The run's PRM settings (with ``ray`` set).
    """
    spec = ScorerSpec(
        model=settings.model,
        fmt=make_format(settings.preset, settings.overrides or None),
        # Ray gives each replica its own GPU, which it sees as cuda:0.
        device="cuda" if settings.device.startswith("cuda") else settings.device,
        dtype=settings.dtype,
        batch_tokens=settings.batch_tokens,
    )
    address = None if settings.ray in (None, "local") else settings.ray
    return spec, RayOptions(address=address, replicas=settings.ray_replicas)


def evidence_on_ray(
    settings: PRMRunSettings, items: Sequence[Item], *, progress_every_s: float = 30.0
) -> dict[str, ScoredEvidence]:
    """Score every item's summary on Ray (blocking); the evidence by item id.

    Args:
        settings: The run's PRM settings (``ray`` names the cluster).
        items: The items still to judge (each once).
        progress_every_s: Seconds between progress lines in the log.

    Raises:
        RayDependencyError: Ray is not installed.
        PRMModelError: The model cannot be read, or Ray returned no result for a chain.
    """
    require_ray()
    spec, options = ray_spec(settings)
    out: dict[str, ScoredEvidence] = {}
    chains: list[Chain] = []
    owners: list[PRMEvidence] = []
    for item in items:
        if item.id in out:
            continue
        evidence = PRMEvidence(
            item_id=item.id, model=settings.model, format=spec.fmt.name,
            threshold=settings.threshold,
        )  # fmt: skip
        out[item.id] = ScoredEvidence(evidence, 0.0)
        try:
            chain = item_chain(
                item, spec.fmt, segmenter=settings.segmenter, section=settings.section
            )
        except ValueError as exc:  # as in one process: an error, no forward pass
            evidence.error = str(exc)
            continue
        chains.append(chain)
        owners.append(evidence)
    if not chains:
        return out

    last: list[RayProgress] = []

    def report(progress: RayProgress) -> None:
        last[:] = [progress]
        log.info("prm on ray: %s", progress.line())

    batches = plan_batches(chains, spec, options.batch_size)
    for part in score_on_ray(
        chains, spec, options, settings.threshold, batches=batches, on_progress=report,
        progress_every_s=progress_every_s,
    ):  # fmt: skip
        for index, result in part:
            evidence = with_result(owners[index], result)
            out[evidence.item_id] = ScoredEvidence(evidence, result.latency_s)
    for line in last[0].replica_lines() if last else []:
        log.info("prm on ray: %s", line)
    return out
