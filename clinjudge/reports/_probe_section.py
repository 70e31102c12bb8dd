"""The probe table of a comparison (``judge compare``, ``judge report --compare``, the viewer's
compare page): per probe a verdict row, then a row per attribute, one column per probe run.

One cell's words are made here for every output, so the terminal, the report and the viewer
say the same thing.
"""

from __future__ import annotations

from clinjudge.analysis import Comparison, ComparisonRow, ProbeCell, ProbeComparisonRow
from clinjudge.reports._document import _Table

PROBE_NOTE = (
    "Per probe: its verdict in each run (the worst of its attributes with data) and the "
    "variants judged. Per attribute: the verdict, the share of pairs (original, variant) that "
    "moved as expected with its Wilson 95% interval, and n, the pairs counted. pass: the lower "
    "bound reaches 0.5 (directional) or 0.8 (invariance); weak: the share does, its bound does "
    "not; fail: below. Passing probes is necessary, not sufficient (docs/trust.md)."
)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def probe_verdict_text(cell: ProbeCell) -> str:
    """A probe row's cell: ``PASS, 16 variants``."""
    return f"{cell.verdict.upper()}, {cell.variants or 0} variant(s)"


def probe_share_text(cell: ProbeCell) -> str:
    """An attribute row's cell: ``1.00 [0.81, 1.00]`` (``-`` when no pair was counted)."""
    if cell.share_as_expected is None:
        return "-"
    return f"{cell.share_as_expected:.2f} [{_fmt(cell.ci_low)}, {_fmt(cell.ci_high)}]"


def probe_cell_text(row: ProbeComparisonRow, run_id: str) -> str:
    """One cell of the table in one line (the report and the JSON-less outputs).

    Args:
        row: The table's row.
        run_id: The run of the column.
    """
    cell = row.runs.get(run_id)
    if cell is None:
        return "not run"
    if row.attribute is None:
        return probe_verdict_text(cell)
    return f"{cell.verdict}, {probe_share_text(cell)}, n {cell.n or 0}"


def probe_row_label(row: ProbeComparisonRow) -> str:
    """The first cell: the probe (and its kind), or an attribute and its expected move."""
    if row.attribute is None:
        return f"{row.probe} ({row.kind})"
    return f"  {row.attribute}: {row.expected}"


def probe_runs(comparison: Comparison) -> list[ComparisonRow]:
    """The compared runs that have a cell in the probe table, in the comparison's order."""
    present = {rid for row in comparison.probes for rid in row.runs}
    return [r for r in comparison.rows if r.run_id in present]


def run_label(row: ComparisonRow) -> str:
    """A column header: the run's name, else its id, with its model."""
    model = (row.model or "") + (" (SIMULATED)" if row.simulated else "")
    return f"{row.name or row.run_id}: {model}" if model else row.name or row.run_id


def probe_comparison_table(comparison: Comparison) -> _Table:
    """The probe table of a comparison report (rows of probe verdicts carry class ``pooled``).

    Args:
        comparison: The comparison (its ``probes`` not empty).
    """
    runs = probe_runs(comparison)
    rows = [
        [probe_row_label(p), *(probe_cell_text(p, r.run_id) for r in runs)]
        for p in comparison.probes
    ]
    classes = ["pooled" if p.attribute is None else "" for p in comparison.probes]
    header = ["probe / attribute", *(run_label(r) for r in runs)]
    return _Table(header, rows, classes=classes, name="probes")
