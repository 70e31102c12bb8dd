"""Rendering of DocLens scores for `judge runs show`."""

from __future__ import annotations

from typing import Any

from rich.table import Table

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


def doclens_table(report: dict[str, Any]) -> Table:
    """Pooled (micro) DocLens scores: one column per section and the total (metrics as rows,
    so a few sections fit a terminal), then the per-instance mean.

    Args:
        report: What :func:`clinjudge.runs.doclens_report` returns.
    """
    compat = report.get("compat", "clinjudge")
    arithmetic = "official DocLens arithmetic" if compat == "official" else "clinjudge rules"
    table = Table(
        title=f"DocLens pooled (micro) scores, agent {report['agent'] or '-'} ({arithmetic})"
    )
    table.add_column("metric")
    columns = []
    for row in report["pooled"]:
        failed = row["reference_failed"] + row["output_failed"] + row["statements_failed"]
        columns.append({**row, "failed": failed})
        table.add_column(str(row["section"]), justify="right")
    for key, label in _ROWS:
        table.add_row(label, *(_cell(column.get(key)) for column in columns))
    macro = report["macro"]
    table.caption = "mean of per-instance scores (not DocLens's pooling): " + ", ".join(
        f"{key} {_cell(value)}" for key, value in macro.items()
    )
    return table
