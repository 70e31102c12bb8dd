"""PRM step scores as ``prm_steps`` rows of the run store (the table is defined in ``runs``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clinjudge._util.modes import PRM_AGENT, PRM_MODE, PRM_ROLE
from clinjudge.prm_bridge._backend import ChainScore, StepScore

__all__ = ["PRM_AGENT", "PRM_MODE", "PRM_ROLE", "prm_step_rows"]


def prm_step_rows(run_id: str, result: ChainScore, model: str) -> list[dict[str, Any]]:
    """One ``prm_steps`` row per step of a scored candidate."""
    return step_rows(run_id, result.id, result.candidate, result.steps, model)


def step_rows(
    run_id: str, item_id: str, candidate: str, steps: Sequence[StepScore], model: str
) -> list[dict[str, Any]]:
    """``prm_steps`` rows of one candidate's step scores.

    Args:
        run_id: The run.
        item_id: The input (or judged item).
        candidate: The candidate's name.
        steps: Its scored steps.
        model: The PRM.
    """
    return [
        {
            "run_id": run_id,
            "item_id": item_id,
            "candidate": candidate,
            "step": step.index,
            "kind": step.kind,
            "text": step.text,
            "score": step.score,
            "flagged": step.flagged,
            "label": step.label,
            "model": model,
        }
        for step in steps
    ]
