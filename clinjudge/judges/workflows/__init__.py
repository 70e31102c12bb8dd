"""Judge workflows: one sample judged by a single judge, an independent panel or a MagenticOne
discussion, and the contract between a workflow and the runner that calls it.

Importing this package registers the ``single``, ``panel`` and ``magentic`` modes; the magentic
workflow's module (AutoGen's agent framework) loads with its first sample."""

from clinjudge.judges.workflows._contract import (
    DECIDING_AGENTS,
    JUDGE_AGENT,
    ORCHESTRATOR_AGENT,
    PANEL_AGENT,
    WorkflowContext,
    WorkflowResult,
    WorkflowSettings,
)
from clinjudge.judges.workflows._panel import PANEL_MEMBER_ROLE
from clinjudge.judges.workflows._prm_evidence import prescore_evidence, prm_scorer
from clinjudge.judges.workflows._registry import (
    Workflow,
    one_call_at_a_time,
    register_claims_workflow,
    register_workflow,
    registered_modes,
    workflow_for,
)
from clinjudge.judges.workflows._single import (
    CallFn,
    SampleVerdict,
    draw_shots,
    first_turns,
    judge_call_config,
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
    "WorkflowResult",
    "WorkflowSettings",
    "draw_shots",
    "first_turns",
    "judge_call_config",
    "one_call_at_a_time",
    "prm_scorer",
    "prescore_evidence",
    "register_claims_workflow",
    "register_workflow",
    "registered_modes",
    "repair_max_tokens",
    "reply_problem",
    "workflow_for",
]
