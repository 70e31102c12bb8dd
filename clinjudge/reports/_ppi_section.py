"""The judge-corrected part of an audit report: physicians' means by PPI++, beside the
physicians-only and judge-only figures, as tables and one forest plot per attribute."""

from __future__ import annotations

import math
from collections.abc import Sequence

from clinjudge.analysis import AuditStatistics, PPIMean
from clinjudge.reports._charts import _svg, _text
from clinjudge.reports._document import _Doc, _esc, _Table, fmt_num

# (key prefix in a ``ppi`` row, legend, colour)
_SERIES = (
    ("", "PPI++ (judge-corrected)", "#1f6feb"),
    ("classical_", "physicians only", "#1a7f37"),
    ("judge_", "judge only", "#b42318"),
)


def _bounds(row: PPIMean, prefix: str) -> tuple[float | None, float | None, float | None]:
    if prefix == "":
        return row.estimate, row.ci_low, row.ci_high
    if prefix == "classical_":
        return row.classical_mean, row.classical_ci_low, row.classical_ci_high
    return row.judge_mean, row.judge_ci_low, row.judge_ci_high


def ppi_forest(rows: Sequence[PPIMean], attribute: str) -> str:
    """A forest plot of one attribute: per vendor, the three intervals of its mean.

    Args:
        rows: The audit's ``ppi`` rows.
        attribute: The attribute drawn.
    """
    mine = [r for r in rows if r.attribute == attribute]
    if not any(r.estimate is not None for r in mine):
        return ""  # no physician ratings of this attribute: nothing to correct
    numbers = [
        v
        for r in mine
        for prefix, _, _ in _SERIES
        for v in _bounds(r, prefix)
        if v is not None and math.isfinite(v)
    ]
    if not numbers:
        return ""
    lo, hi = math.floor(min(numbers) * 2) / 2, math.ceil(max(numbers) * 2) / 2
    hi = hi if hi > lo else lo + 1
    left, right, top, group_h = 130, 20, 30, 14 * len(_SERIES) + 10
    width, height = 620, top + group_h * len(mine) + 28

    def x(value: float) -> float:
        return left + (value - lo) / (hi - lo) * (width - left - right)

    body = [f'<rect width="{width}" height="{height}" fill="#fff"/>']
    for i, (_, label, color) in enumerate(_SERIES):
        body.append(f'<rect x="{left + i * 160}" y="8" width="10" height="10" fill="{color}"/>')
        body.append(_text(left + 14 + i * 160, 17, label))
    tick = lo
    while tick <= hi + 1e-9:
        body.append(
            f'<line x1="{x(tick):.1f}" y1="{top - 4}" x2="{x(tick):.1f}" y2="{height - 22}" '
            'stroke="#d0d7de"/>'
        )
        body.append(_text(x(tick), height - 8, f"{tick:g}", anchor="middle"))
        tick += 0.5 if hi - lo <= 4 else 1
    for g, row in enumerate(mine):
        y0 = top + g * group_h
        label = f"{_short(row.vendor)} (n={row.n})"
        body.append(_text(left - 8, y0 + group_h / 2 + 2, label, anchor="end"))
        for i, (prefix, _, color) in enumerate(_SERIES):
            point, low, high = _bounds(row, prefix)
            y = y0 + 8 + i * 14
            if low is not None and high is not None:
                body.append(
                    f'<line x1="{x(low):.1f}" y1="{y}" x2="{x(high):.1f}" y2="{y}" '
                    f'stroke="{color}" stroke-width="2"/>'
                )
            if point is not None:
                body.append(f'<circle cx="{x(point):.1f}" cy="{y}" r="3.5" fill="{color}"/>')
    svg = _svg(width, height, body, f"Physicians' mean of {attribute} per vendor, three ways")
    return (
        f'<figure class="chart" data-chart="ppi-forest">{svg}<figcaption>'
        f"{_caption(attribute)}</figcaption></figure>"
    )


def _short(name: str, most: int = 14) -> str:
    # Labels sit left of the axis, anchored at their end: a long name would run off the chart.
    return name if len(name) <= most else name[: most - 1] + "\u2026"


def _caption(attribute: str) -> str:
    return _esc(
        f"{attribute}: the physicians' mean per vendor with 95% CIs: judge-corrected (PPI++), "
        "from the physicians' ratings alone, and the judge's own mean."
    )


def ppi_section(doc: _Doc, audit: AuditStatistics) -> None:
    """Append the judge-corrected estimates to an audit report, when the audit has ratings.

    Args:
        doc: The report being written.
        audit: The result of ``audit_for_run`` with ``ratings``.
    """
    if audit.ppi is None:
        return
    doc.heading(2, "Physicians' means, judge-corrected (PPI++)")
    doc.para(
        "Physicians rated a sample of the items; the judge scored every item. Prediction-"
        "powered inference with power tuning (PPI++) combines both into an estimate of the mean "
        "the physicians would give each vendor's items, with a valid 95% CI when the rated items "
        "were drawn at random. Lambda 0 means the judge added nothing; effective n is the number "
        "of physician-rated items the physicians-only CI would need to be as narrow.",
        "note",
    )
    for warning in audit.ppi_warnings or []:
        doc.para(f"Warning: {warning}", "warning")
    doc.para(
        "Rows with physicians' ratings; the JSON output (--json) has every vendor and attribute.",
        "note",
    )
    doc.table(
        _Table(
            ["vendor", "attribute", "n", "N", "lambda", "PPI++", "95% CI", "physicians", "95% CI",
             "judge", "effective n", "warning"],
            [
                [
                    r.vendor, r.attribute, str(r.n), str(r.N), fmt_num(r.lam, 2),
                    _value(r.estimate), _ci(r.ci_low, r.ci_high),
                    _value(r.classical_mean),
                    _ci(r.classical_ci_low, r.classical_ci_high),
                    fmt_num(r.judge_mean, 2), fmt_num(r.effective_n, 1),
                    r.interval_warning or "",
                ]
                for r in audit.ppi
                if r.n
            ],
            left=2,
            wrap=frozenset({11}),
        )
    )  # fmt: skip
    charts = [ppi_forest(audit.ppi, a) for a in dict.fromkeys(r.attribute for r in audit.ppi)]
    if any(charts):
        doc.html.append(f'<div class="charts">{"".join(c for c in charts if c)}</div>')
    if audit.ppi_pairs:
        doc.heading(3, "Differences between vendors (first minus second), judge-corrected")
        doc.table(
            _Table(
                ["vendors", "attribute", "n", "N", "lambda", "PPI++", "95% CI", "physicians",
                 "judge", "warning"],
                [
                    [
                        f"{r.first} - {r.second}", r.attribute, str(r.n), str(r.N),
                        fmt_num(r.lam, 2), _value(r.estimate),
                        _ci(r.ci_low, r.ci_high), _value(r.classical_estimate),
                        fmt_num(r.judge_estimate, 2), r.interval_warning or "",
                    ]
                    for r in audit.ppi_pairs
                    if r.n
                ],
                left=2,
                wrap=frozenset({9}),
            )
        )  # fmt: skip
    doc.heading(3, "The physicians' sample")
    doc.table(
        _Table(
            ["vendor", "items", "rated", "rated encounters"],
            [
                [s.vendor, str(s.items), str(s.rated), ", ".join(s.encounters)]
                for s in audit.physician_sample or []
            ],
            left=4,
        )
    )


def _value(value: float | None) -> str:
    # A missing estimate is undefined, and the row's warning says why.
    return "undefined" if value is None else fmt_num(value, 2)


def _ci(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"[{low:.2f}, {high:.2f}]"
