"""Judge workflows by mode: each turns one sample's context into a WorkflowResult."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from clinjudge.judges.workflows._contract import (
    DECIDING_AGENTS,
    JUDGE_AGENT,
    WorkflowContext,
    WorkflowResult,
)
from clinjudge.judges.workflows._prm_evidence import prompt_evidence
from clinjudge.judges.workflows._single import judge_single_sample
from clinjudge.rubrics import Rubric

Workflow = Callable[[WorkflowContext], Awaitable[WorkflowResult]]


async def single_workflow(ctx: WorkflowContext) -> WorkflowResult:
    """One judge, one prompt, bounded repair."""
    verdict = await judge_single_sample(
        ctx.item,
        ctx.rubric,
        ctx.call_fn(JUDGE_AGENT, "judge"),
        shots=ctx.shots,
        explanations=ctx.config.explanations,
        max_repairs=ctx.config.max_repairs,
        evidence=await prompt_evidence(ctx),
    )
    return WorkflowResult(agent=JUDGE_AGENT, verdict=verdict)


_WORKFLOWS: dict[str, tuple[str, Workflow]] = {"single": (JUDGE_AGENT, single_workflow)}
# Workflows of rubrics whose attributes are computed from claims (``method: claims``, DocLens).
_CLAIM_WORKFLOWS: dict[str, tuple[str, Workflow]] = {}


def _check_agent(agent: str) -> None:
    # Counts (summary, runs show, compare) read a run's samples from these agents' rows.
    if agent not in DECIDING_AGENTS:
        raise ValueError(f"deciding agent {agent!r} must be one of {', '.join(DECIDING_AGENTS)}")


def register_workflow(mode: str, agent: str, workflow: Workflow) -> None:
    """Make a workflow available as a mode.

    Args:
        mode: The ``--mode`` name.
        agent: Name under which the workflow's sample-level decision is stored.
        workflow: The workflow.
    """
    _check_agent(agent)
    _WORKFLOWS[mode] = (agent, workflow)


def register_claims_workflow(mode: str, agent: str, workflow: Workflow) -> None:
    """Make a workflow available as a mode for claim rubrics (``method: claims``).

    Args:
        mode: The ``--mode`` name.
        agent: Name under which the workflow's sample-level decision is stored.
        workflow: The workflow.
    """
    _check_agent(agent)
    _CLAIM_WORKFLOWS[mode] = (agent, workflow)


def registered_modes() -> list[str]:
    """Every mode a workflow is registered for (score rubrics or claim rubrics), sorted."""
    return sorted({*_WORKFLOWS, *_CLAIM_WORKFLOWS})


def workflow_for(mode: str, rubric: Rubric | None = None) -> tuple[str, Workflow]:
    """The deciding agent's name and the workflow of a mode (for the rubric's method).

    Args:
        mode: The ``--mode`` name.
        rubric: The run's rubric; a claim rubric (DocLens) gets its claim workflows.
    """
    registry = _WORKFLOWS
    if rubric is not None and rubric.method == "claims":
        registry = _CLAIM_WORKFLOWS
    try:
        return registry[mode]
    except KeyError:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(sorted(registry))}") from None
