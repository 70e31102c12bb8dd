"""Typed DocLens scores of a run: what :func:`doclens_report` returns and ``judge runs show
--json`` prints under ``doclens`` (``to_dict()``)."""

from __future__ import annotations

from typing import cast

from clinjudge.analysis._result_base import Result


class DocLensMetrics(Result):
    """The four DocLens metrics (None where there was nothing to count)."""

    claim_recall: float | None = None
    claim_precision: float | None = None
    citation_recall: float | None = None
    citation_precision: float | None = None

    def metric(self, name: str) -> float | None:
        """One of the four metrics by name (``claim_recall``, ...)."""
        return _metric(self, name)


def _metric(result: Result, name: str) -> float | None:
    if name not in DocLensMetrics.model_fields:
        raise KeyError(f"not a DocLens metric: {name!r}")
    return cast(float | None, getattr(result, name))


class DocLensSection(Result):
    """Pooled (micro) DocLens scores of one section, or of every section (``total``): the four
    metrics, then the tallies they come from."""

    section: str
    claim_recall: float | None = None
    """Entailed reference claims over reference claims."""
    claim_precision: float | None = None
    """Entailed output claims over output claims."""
    citation_recall: float | None = None
    """Supported output statements over statements."""
    citation_precision: float | None = None
    """Counted citations over citations."""
    items: int = 0
    reference_claims: int = 0
    reference_entailed: int = 0
    reference_failed: int = 0
    output_claims: int = 0
    output_entailed: int = 0
    output_failed: int = 0
    statements: int = 0
    statements_entailed: int = 0
    statements_failed: int = 0
    citations: int = 0
    citations_counted: int = 0
    extraction_failed: int = 0
    """Items whose claims could not be extracted (no claims to count)."""

    @property
    def failed(self) -> int:
        """Failed judgments of claims and statements (counted as not entailed)."""
        return self.reference_failed + self.output_failed + self.statements_failed

    def metric(self, name: str) -> float | None:
        """One of the four metrics by name (``claim_recall``, ...)."""
        return _metric(self, name)


class DocLensReport(Result):
    """Pooled and per-instance DocLens scores of a run (:func:`doclens_report`)."""

    agent: str | None = None
    """The agent whose verdicts are scored (the run's deciding agent; None when unclear)."""
    compat: str
    """The arithmetic: ``clinjudge`` or ``official`` (the official evaluator's)."""
    pooled: list[DocLensSection] = []
    """One row per section (sorted), then the ``total`` row; empty without verdicts."""
    macro: DocLensMetrics = DocLensMetrics()
    """Mean over items of the per-instance scores (not what DocLens reports)."""
