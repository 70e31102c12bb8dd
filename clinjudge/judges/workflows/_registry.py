"""Judge workflows by mode: each turns one sample's context into a WorkflowResult."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from clinjudge._util.modes import deciding_agent, set_deciding_agent
from clinjudge.judges.workflows._contract import JUDGE_AGENT, WorkflowContext, WorkflowResult
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


# Only the workflows: each mode's deciding agent lives in one table (clinjudge/_util/modes.py),
# which readers of a stored run consult without importing this package.
_WORKFLOWS: dict[str, Workflow] = {"single": single_workflow}
# Workflows of rubrics whose attributes are computed from claims (``method: claims``, DocLens).
_CLAIM_WORKFLOWS: dict[str, Workflow] = {}
set_deciding_agent("single", JUDGE_AGENT)


def register_workflow(mode: str, agent: str, workflow: Workflow) -> None:
    """Make a workflow available as a mode.

    Args:
        mode: The ``--mode`` name.
        agent: Name under which the workflow's sample-level decision is stored; a built-in
            mode's must be the one in the table of deciding agents (``_util/modes.py``).
        workflow: The workflow.

    Raises:
        ValueError: The agent is not a deciding agent, or the mode decides by another.
    """
    # Counts (summary, runs show, compare, the viewer) read a run's samples from its rows.
    set_deciding_agent(mode, agent)
    _WORKFLOWS[mode] = workflow


def register_claims_workflow(mode: str, agent: str, workflow: Workflow) -> None:
    """Make a workflow available as a mode for claim rubrics (``method: claims``).

    Args:
        mode: The ``--mode`` name.
        agent: Name under which the workflow's sample-level decision is stored (as for
            :func:`register_workflow`).
        workflow: The workflow.

    Raises:
        ValueError: The agent is not a deciding agent, or the mode decides by another.
    """
    set_deciding_agent(mode, agent)
    _CLAIM_WORKFLOWS[mode] = workflow


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
    agent = deciding_agent(mode)
    if mode not in registry or agent is None:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(sorted(registry))}")
    return agent, registry[mode]
