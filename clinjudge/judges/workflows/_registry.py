"""Judge workflows by mode: each turns one sample's context into a WorkflowResult."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from clinjudge._util.modes import deciding_agent, set_deciding_agent
from clinjudge.judges.workflows._contract import (
    JUDGE_AGENT,
    ORCHESTRATOR_AGENT,
    WorkflowContext,
    WorkflowResult,
)
from clinjudge.judges.workflows._prm_evidence import prompt_evidence
from clinjudge.judges.workflows._single import judge_single_sample
from clinjudge.rubrics import Rubric

Workflow = Callable[[WorkflowContext], Awaitable[WorkflowResult]]


async def single_workflow(ctx: WorkflowContext) -> WorkflowResult:
    """One judge, one prompt, bounded repair."""
    config = ctx.config
    call = ctx.call_fn(JUDGE_AGENT, "judge")
    # Without --prm there is no evidence: no coroutine per sample to find that out.
    evidence = None if config.prm is None else await prompt_evidence(ctx)
    verdict = await judge_single_sample(
        ctx.item,
        ctx.rubric,
        call,
        shots=ctx.shots,
        explanations=config.explanations,
        max_repairs=config.max_repairs,
        evidence=evidence,
    )
    return WorkflowResult(agent=JUDGE_AGENT, verdict=verdict)


async def _magentic_on_use(ctx: WorkflowContext) -> WorkflowResult:
    """The magentic mode, its module loaded with the first magentic sample: it imports AutoGen's
    agent framework (autogen_agentchat) and the PRM verifier agent, which a single or panel run
    must not pay for before its first request (#39). The real workflow then takes this one's
    place (registered here: the module imports nothing of this one, so no circle)."""
    from clinjudge.judges.workflows._magentic import magentic_workflow

    register_workflow("magentic", ORCHESTRATOR_AGENT, magentic_workflow)
    return await magentic_workflow(ctx)


def one_call_at_a_time(workflow: Workflow) -> bool:
    """Whether a workflow makes at most one model call at a time per sample (the built-in
    single judge): a runner whose workers are no more than its concurrency, one sample each,
    keeps such a run's calls within bounds without counting them again.

    Args:
        workflow: A registered workflow.
    """
    return workflow is single_workflow


# Only the workflows: each mode's deciding agent lives in one table (clinjudge/_util/modes.py),
# which readers of a stored run consult without importing this package.
_WORKFLOWS: dict[str, Workflow] = {"single": single_workflow, "magentic": _magentic_on_use}
# Workflows of rubrics whose attributes are computed from claims (``method: claims``, DocLens).
_CLAIM_WORKFLOWS: dict[str, Workflow] = {}
set_deciding_agent("single", JUDGE_AGENT)
set_deciding_agent("magentic", ORCHESTRATOR_AGENT)


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
