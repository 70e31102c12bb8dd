"""Process reward model bridge (SPEC §7): score each step of a note or reasoning chain.

Segment text into steps, render them in a PRM family's format (``medprm``, ``prm-clinic``,
``math-shepherd`` or ``custom``), read P(correct) at every step marker in one forward pass per
candidate (transformers in-process, or a vLLM pooling server), aggregate, select best-of-n,
evaluate against labels (PRMScore) and store the steps in DuckDB. torch and transformers are
imported only when a model is loaded (``pip install 'clinjudge[prm]'``).
"""

from typing import TYPE_CHECKING, Any

from clinjudge._util.lazy_module import lazy_exports
from clinjudge.prm_bridge._aggregate import AGGREGATES, aggregate, best_candidate
from clinjudge.prm_bridge._backend import ChainScore, PRMModelError, PRMScorer, token_batches
from clinjudge.prm_bridge._inputs import SEGMENTERS, Segmenter, load_chains
from clinjudge.prm_bridge._metrics import EvalReport, evaluate
from clinjudge.prm_bridge._presets import (
    PRMFormatError,
    load_format_file,
    make_format,
    parse_overrides,
)
from clinjudge.prm_bridge._ray_runner import (
    RayDependencyError,
    RayOptions,
    ScorerSpec,
    plan_batches,
    require_ray,
    score_on_ray,
    stored_result,
)
from clinjudge.prm_bridge._render import PRMInputError, render
from clinjudge.prm_bridge._rows import PRM_AGENT, PRM_MODE, PRM_ROLE, prm_step_rows
from clinjudge.prm_bridge._scorer import PRMDependencyError, TransformersPRM
from clinjudge.prm_bridge._sections import SectionError
from clinjudge.prm_bridge._segment import Chain, Step
from clinjudge.prm_bridge._settings import PRMRunSettings

if TYPE_CHECKING:
    from clinjudge.prm_bridge._ray_evidence import ScoredEvidence, evidence_on_ray
    from clinjudge.prm_bridge._tool import (
        PRM_VERIFIER_NAME,
        PRMEvidence,
        PRMVerifierAgent,
        evidence_rows,
        evidence_text,
        make_prm_tool,
        score_item,
        shared_scorer,
    )
    from clinjudge.prm_bridge._vllm import VLLMPRM

# The AutoGen tool, the verifier agent and the vLLM client pull in autogen_agentchat and HTTP
# clients: loaded on first use, so the store (which imports this package for step rows) and the
# commands that only read it start fast.
_LAZY = {
    "ScoredEvidence": "_ray_evidence",
    "evidence_on_ray": "_ray_evidence",
    "PRM_VERIFIER_NAME": "_tool",
    "PRMEvidence": "_tool",
    "PRMVerifierAgent": "_tool",
    "evidence_rows": "_tool",
    "evidence_text": "_tool",
    "make_prm_tool": "_tool",
    "score_item": "_tool",
    "shared_scorer": "_tool",
    "VLLMPRM": "_vllm",
}


_load = lazy_exports(__name__, _LAZY, globals())


def __getattr__(name: str) -> Any:
    return _load(name)


__all__ = [
    "PRM_VERIFIER_NAME",
    "AGGREGATES",
    "Chain",
    "ChainScore",
    "EvalReport",
    "PRMDependencyError",
    "PRMEvidence",
    "PRMRunSettings",
    "PRMVerifierAgent",
    "SEGMENTERS",
    "Segmenter",
    "VLLMPRM",
    "RayDependencyError",
    "RayOptions",
    "ScorerSpec",
    "plan_batches",
    "require_ray",
    "score_on_ray",
    "stored_result",
    "ScoredEvidence",
    "evidence_on_ray",
    "evidence_rows",
    "evidence_text",
    "load_chains",
    "make_prm_tool",
    "prm_step_rows",
    "score_item",
    "shared_scorer",
    "PRM_AGENT",
    "PRM_MODE",
    "PRM_ROLE",
    "PRMFormatError",
    "PRMInputError",
    "PRMModelError",
    "PRMScorer",
    "SectionError",
    "Step",
    "TransformersPRM",
    "aggregate",
    "best_candidate",
    "evaluate",
    "load_format_file",
    "make_format",
    "parse_overrides",
    "render",
    "token_batches",
]
