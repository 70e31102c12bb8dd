"""Judging: model clients (``judges.clients``), the judge workflows (``judges.workflows``: single,
panel, magentic) and DocLens (``judges.doclens``). The names most callers need are re-exported
here; each subpackage is a front door of its own.
"""

from clinjudge.judges.clients import (
    COUNT_ENCODING,
    SIMULATED_NOTICE,
    TIMED_OUT,
    BatchClient,
    CallOutcome,
    JudgeModel,
    ModelConfigError,
    ModelSettings,
    ProviderFault,
    ResponseCache,
    count_message_tokens,
    count_tokens,
    counts_exactly,
    price_per_token,
    token_prices,
)
from clinjudge.judges.doclens import DocLensSettings, NLIError, source_units
from clinjudge.judges.workflows import (
    DECIDING_AGENTS,
    CallFn,
    SampleVerdict,
    WorkflowContext,
    WorkflowResult,
    draw_shots,
    register_claims_workflow,
    register_workflow,
    registered_modes,
)

__all__ = [
    "BatchClient",
    "COUNT_ENCODING",
    "CallFn",
    "CallOutcome",
    "DECIDING_AGENTS",
    "DocLensSettings",
    "JudgeModel",
    "ModelConfigError",
    "ModelSettings",
    "NLIError",
    "ProviderFault",
    "ResponseCache",
    "SIMULATED_NOTICE",
    "SampleVerdict",
    "TIMED_OUT",
    "WorkflowContext",
    "WorkflowResult",
    "count_message_tokens",
    "count_tokens",
    "counts_exactly",
    "draw_shots",
    "price_per_token",
    "token_prices",
    "register_claims_workflow",
    "register_workflow",
    "registered_modes",
    "source_units",
]
