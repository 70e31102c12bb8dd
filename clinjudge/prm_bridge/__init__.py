"""Process reward model bridge (SPEC §7): score each step of a note or reasoning chain.

Segment text into steps, render them in a PRM family's format (``medprm``, ``prm-clinic``,
``math-shepherd`` or ``custom``), read P(correct) at every step marker in one forward pass per
candidate (transformers in-process, or a vLLM pooling server), aggregate, select best-of-n,
evaluate against labels (PRMScore) and store the steps in DuckDB. torch and transformers are
imported only when a model is loaded (``pip install 'clinjudge[prm]'``).
"""

from clinjudge.prm_bridge._aggregate import (
    AGGREGATES,
    DEFAULT_THRESHOLD,
    aggregate,
    all_aggregates,
    best_candidate,
)
from clinjudge.prm_bridge._backend import (
    ChainScore,
    PRMModelError,
    PRMScorer,
    StepScore,
    label_ids,
    token_batches,
)
from clinjudge.prm_bridge._inputs import (
    SEGMENTERS,
    PRMRecord,
    Segmenter,
    StepInput,
    chain_from_text,
    load_chains,
)
from clinjudge.prm_bridge._metrics import EvalReport, StepMetrics, evaluate
from clinjudge.prm_bridge._presets import (
    PRESETS,
    STEP_KINDS,
    PRMFormat,
    PRMFormatError,
    load_format_file,
    make_format,
    parse_overrides,
    preset_names,
)
from clinjudge.prm_bridge._render import Encoded, PRMInputError, encode, render
from clinjudge.prm_bridge._rows import PRM_AGENT, PRM_MODE, PRM_ROLE, prm_step_rows, step_rows
from clinjudge.prm_bridge._scorer import INSTALL_HINT, PRMDependencyError, TransformersPRM
from clinjudge.prm_bridge._sections import (
    Section,
    SectionError,
    heading_of,
    select_sections,
    split_sections,
)
from clinjudge.prm_bridge._segment import (
    Chain,
    Step,
    segment_note,
    split_chain,
    split_lines,
    split_medprm,
    split_note,
    split_sentences,
    steps_from_note_json,
)
from clinjudge.prm_bridge._settings import PRMRunSettings
from clinjudge.prm_bridge._tool import (
    PRM_TOOL_NAME,
    PRM_VERIFIER_NAME,
    PRMEvidence,
    PRMVerifierAgent,
    evidence_rows,
    evidence_text,
    item_context,
    make_prm_tool,
    score_item,
    score_text,
    shared_scorer,
)
from clinjudge.prm_bridge._vllm import VLLMPRM

__all__ = [
    "PRM_TOOL_NAME",
    "PRM_VERIFIER_NAME",
    "AGGREGATES",
    "DEFAULT_THRESHOLD",
    "INSTALL_HINT",
    "PRESETS",
    "STEP_KINDS",
    "Chain",
    "ChainScore",
    "Encoded",
    "EvalReport",
    "PRMDependencyError",
    "PRMEvidence",
    "PRMRecord",
    "PRMRunSettings",
    "PRMVerifierAgent",
    "SEGMENTERS",
    "Segmenter",
    "StepInput",
    "VLLMPRM",
    "chain_from_text",
    "evidence_rows",
    "evidence_text",
    "item_context",
    "load_chains",
    "make_prm_tool",
    "prm_step_rows",
    "score_item",
    "score_text",
    "shared_scorer",
    "step_rows",
    "PRM_AGENT",
    "PRM_MODE",
    "PRM_ROLE",
    "PRMFormat",
    "PRMFormatError",
    "PRMInputError",
    "PRMModelError",
    "PRMScorer",
    "Section",
    "SectionError",
    "Step",
    "StepMetrics",
    "StepScore",
    "TransformersPRM",
    "aggregate",
    "all_aggregates",
    "best_candidate",
    "encode",
    "evaluate",
    "label_ids",
    "load_format_file",
    "make_format",
    "parse_overrides",
    "preset_names",
    "render",
    "heading_of",
    "segment_note",
    "select_sections",
    "split_chain",
    "split_lines",
    "split_medprm",
    "split_note",
    "split_sections",
    "split_sentences",
    "steps_from_note_json",
    "token_batches",
]
