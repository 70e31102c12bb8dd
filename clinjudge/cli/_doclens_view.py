"""Rendering of DocLens scores for `judge runs show`."""

from __future__ import annotations

from typing import Any

from rich.table import Table

_COLUMNS = (
    ("section", "section"),
    ("items", "items"),
    ("claim_recall", "claim recall"),
    ("claim_precision", "claim precision"),
    ("citation_recall", "citation recall"),
    ("citation_precision", "citation precision"),
    ("reference_claims", "ref claims"),
    ("output_claims", "out claims"),
    ("statements", "statements"),
    ("citations", "citations"),
    ("failed", "failed judgments"),
    ("extraction_failed", "extraction failed"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def doclens_table(report: dict[str, Any]) -> Table:
    """Pooled (micro) DocLens scores per section and total, then the per-instance mean.

    Args:
        report: What :func:`clinjudge.runs.doclens_report` returns.
    """
    table = Table(title=f"DocLens pooled (micro) scores, agent {report['agent'] or '-'}")
    for _, header in _COLUMNS:
        table.add_column(header, justify="left" if header == "section" else "right")
    for row in report["pooled"]:
        failed = row["reference_failed"] + row["output_failed"] + row["statements_failed"]
        values = {**row, "failed": failed}
        table.add_row(*(_cell(values.get(key)) for key, _ in _COLUMNS))
    macro = report["macro"]
    table.caption = "mean of per-instance scores (not DocLens's pooling): " + ", ".join(
        f"{key} {_cell(value)}" for key, value in macro.items()
    )
    return table
