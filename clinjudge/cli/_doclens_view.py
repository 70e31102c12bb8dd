"""Rendering of DocLens scores for `judge runs show`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:
    from clinjudge.analysis import DocLensReport

_ROWS = (
    ("items", "items"),
    ("claim_recall", "claim recall"),
    ("claim_precision", "claim precision"),
    ("citation_recall", "citation recall"),
    ("citation_precision", "citation precision"),
    ("reference_claims", "reference claims"),
    ("output_claims", "output claims"),
    ("statements", "output statements"),
    ("citations", "citations"),
    ("failed", "failed judgments"),
    ("extraction_failed", "failed extractions"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def doclens_table(report: DocLensReport) -> Table:
    """Pooled (micro) DocLens scores: one column per section and the total (metrics as rows,
    so a few sections fit a terminal), then the per-instance mean.

    Args:
        report: What :func:`clinjudge.analysis.doclens_report` returns.
    """
    arithmetic = "official DocLens arithmetic" if report.compat == "official" else "clinjudge rules"
    table = Table(
        title=f"DocLens pooled (micro) scores, agent {report.agent or '-'} ({arithmetic})"
    )
    table.add_column("metric")
    for row in report.pooled:
        table.add_column(str(row.section), justify="right")
    for key, label in _ROWS:
        table.add_row(label, *(_cell(getattr(row, key)) for row in report.pooled))
    table.caption = "mean of per-instance scores (not DocLens's pooling): " + ", ".join(
        f"{key} {_cell(value)}" for key, value in report.macro.to_dict().items()
    )
    return table
