"""Process reward model bridge (SPEC §7): score each step of a note or reasoning chain.

Segment text into steps, render them in a PRM family's format (``medprm``, ``prm-clinic``,
``math-shepherd`` or ``custom``), read P(correct) at every step marker in one forward pass per
candidate (transformers in-process, or a vLLM pooling server), aggregate, select best-of-n,
evaluate against labels (PRMScore) and store the steps in DuckDB. torch and transformers are
imported only when a model is loaded (``pip install 'clinjudge[prm]'``).
"""

from clinjudge.prm_bridge._aggregate import AGGREGATES, aggregate, best_candidate
from clinjudge.prm_bridge._backend import ChainScore, PRMModelError, PRMScorer, token_batches
from clinjudge.prm_bridge._inputs import SEGMENTERS, Segmenter, load_chains
from clinjudge.prm_bridge._metrics import evaluate
from clinjudge.prm_bridge._presets import (
    PRMFormatError,
    load_format_file,
    make_format,
    parse_overrides,
)
from clinjudge.prm_bridge._ray_evidence import ScoredEvidence, evidence_on_ray
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

__all__ = [
    "PRM_VERIFIER_NAME",
    "AGGREGATES",
    "Chain",
    "ChainScore",
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
