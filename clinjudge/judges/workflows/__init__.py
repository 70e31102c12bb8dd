"""Judge workflows: one sample judged by a single judge, an independent panel or a MagenticOne
discussion, and the contract between a workflow and the runner that calls it.

Importing this package registers the ``single``, ``panel`` and ``magentic`` modes."""

from clinjudge.judges.workflows._contract import (
    DECIDING_AGENTS,
    JUDGE_AGENT,
    ORCHESTRATOR_AGENT,
    PANEL_AGENT,
    WorkflowContext,
    WorkflowModels,
    WorkflowResult,
    WorkflowSettings,
)
from clinjudge.judges.workflows._magentic import magentic_workflow
from clinjudge.judges.workflows._panel import (
    PANEL_MEMBER_ROLE,
    aggregate_members,
    panel_personas,
    panel_workflow,
)
from clinjudge.judges.workflows._prm_evidence import (
    item_evidence,
    prescore_evidence,
    prm_scorer,
    prompt_evidence,
)
from clinjudge.judges.workflows._registry import (
    Workflow,
    register_claims_workflow,
    register_workflow,
    registered_modes,
    single_workflow,
    workflow_for,
)
from clinjudge.judges.workflows._single import (
    CallFn,
    SampleVerdict,
    draw_shots,
    first_turns,
    judge_single_sample,
    repair_max_tokens,
    reply_problem,
)

__all__ = [
    "CallFn",
    "DECIDING_AGENTS",
    "JUDGE_AGENT",
    "ORCHESTRATOR_AGENT",
    "PANEL_AGENT",
    "PANEL_MEMBER_ROLE",
    "SampleVerdict",
    "Workflow",
    "WorkflowContext",
    "WorkflowModels",
    "WorkflowResult",
    "WorkflowSettings",
    "aggregate_members",
    "draw_shots",
    "first_turns",
    "item_evidence",
    "judge_single_sample",
    "magentic_workflow",
    "panel_personas",
    "panel_workflow",
    "prm_scorer",
    "prescore_evidence",
    "prompt_evidence",
    "register_claims_workflow",
    "register_workflow",
    "registered_modes",
    "repair_max_tokens",
    "reply_problem",
    "single_workflow",
    "workflow_for",
]
