"""clinjudge: judge AI-written clinical text with LLMs and measure agreement with physicians.

The public API (``judge run`` and ``judge audit`` call these functions)::

    import clinjudge

    clinjudge.estimate("items.jsonl", model="openai/gpt-4o-mini").cost_usd   # a dry run
    result = clinjudge.evaluate("items.jsonl", rubric="pdsqi9", model="openai/gpt-4o-mini")
    run = clinjudge.load_run(result.run_id)
    run.judgments(final=True).to_pandas()

    # Process reward models (`judge prm score|best-of-n|eval` call these):
    clinjudge.score_prm("chains.jsonl", model="path/to/prm", device="cpu").to_pandas()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clinjudge._util.offline import configure_offline_environment
from clinjudge.errors import ClinJudgeError, UserError

configure_offline_environment()

from clinjudge._util.version import __version__  # noqa: E402 (after the offline setup)

if TYPE_CHECKING:
    from clinjudge._api import (
        AgreementResult,
        AuditResult,
        Comparison,
        Estimate,
        FailureSummary,
        ImportSummary,
        ProbeOptions,
        ProbeResult,
        Run,
        RunFlag,
        RunOptions,
        RunResult,
        RunStart,
        audit,
        audit_async,
        compare,
        estimate,
        estimate_audit,
        estimate_probe,
        evaluate,
        evaluate_async,
        import_ratings,
        load_run,
        probe,
        probe_async,
        resume,
        resume_async,
    )
    from clinjudge._prm_api import (
        PRMBestOfNResult,
        PRMCandidate,
        PRMEvalResult,
        PRMModelError,
        PRMNotice,
        PRMOptions,
        PRMPick,
        PRMRunStopped,
        PRMScoreResult,
        best_of_n_prm,
        evaluate_prm,
        score_prm,
    )

__all__ = [
    "AgreementResult",
    "AuditResult",
    "ClinJudgeError",
    "Comparison",
    "Estimate",
    "FailureSummary",
    "ProbeOptions",
    "ProbeResult",
    "UserError",
    "audit",
    "audit_async",
    "Run",
    "RunFlag",
    "RunOptions",
    "RunResult",
    "RunStart",
    "__version__",
    "compare",
    "estimate",
    "estimate_audit",
    "estimate_probe",
    "evaluate",
    "evaluate_async",
    "ImportSummary",
    "import_ratings",
    "load_run",
    "probe",
    "probe_async",
    "resume",
    "resume_async",
    # Process reward models (#40): loaded without the judge workflows that `_api` imports.
    "PRMBestOfNResult",
    "PRMCandidate",
    "PRMEvalResult",
    "PRMModelError",
    "PRMNotice",
    "PRMOptions",
    "PRMPick",
    "PRMRunStopped",
    "PRMScoreResult",
    "best_of_n_prm",
    "evaluate_prm",
    "score_prm",
]


def __getattr__(name: str) -> Any:
    # Imported on first use: `judge --version` must not pay for AutoGen, litellm and scipy.
    if name == "import_ratings":  # without the API's workflows and model clients (#39)
        from clinjudge._ratings_api import import_ratings

        return import_ratings
    if name in __all__ and (name.startswith("PRM") or name.endswith("_prm")):
        from clinjudge import _prm_api

        return getattr(_prm_api, name)
    if name in __all__ and name != "__version__":
        from clinjudge import _api

        return getattr(_api, name)
    raise AttributeError(f"module 'clinjudge' has no attribute {name!r}")
