"""The vendor audit report: ``report.html`` and ``report.md`` of an audit's statistics."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from clinjudge._util.version import __version__
from clinjudge.analysis import AuditStatistics
from clinjudge.reports._charts import _svg, _text
from clinjudge.reports._document import (
    SIMULATED_TEXT,
    ReportFiles,
    _banner,
    _Doc,
    _Table,
    fmt_ci,
    fmt_num,
    fmt_p,
    fmt_seconds,
    fmt_usd,
    html_page,
    write_report_files,
)
from clinjudge.reports._ppi_section import ppi_section
from clinjudge.runs import now


def _means_chart(audit: AuditStatistics, attributes: Sequence[str]) -> str:
    """Dot-and-whisker chart: each vendor's mean with its 95% CI, one row per attribute."""
    vendors = audit.vendors
    palette = ["#1f6feb", "#b42318", "#d97706", "#1a7f37", "#8250df", "#57606a"]
    lo_all, hi_all = [], []
    for v in vendors:
        for a in attributes:
            s = audit.summaries[v][a]
            if s.ci95:
                lo_all.append(s.ci95[0])
                hi_all.append(s.ci95[1])
    if not lo_all:
        return ""
    lo, hi = math.floor(min(lo_all)), math.ceil(max(hi_all))
    if hi <= lo:
        hi = lo + 1
    left, right, row_h, top = 120, 24, 16 * max(1, len(vendors)) + 10, 34
    width = 640
    height = top + row_h * len(attributes) + 30

    def x(value: float) -> float:
        return left + (value - lo) / (hi - lo) * (width - left - right)

    body = [f'<rect width="{width}" height="{height}" fill="#fff"/>']
    for i, v in enumerate(vendors):
        color = palette[i % len(palette)]
        body.append(f'<circle cx="{left + 8 + i * 110}" cy="14" r="4" fill="{color}"/>')
        body.append(_text(left + 16 + i * 110, 18, v))
    tick = lo
    while tick <= hi:
        body.append(
            f'<line x1="{x(tick):.1f}" y1="{top - 6}" x2="{x(tick):.1f}" '
            f'y2="{height - 24}" stroke="#d0d7de"/>'
        )
        body.append(_text(x(tick), height - 10, str(tick), anchor="middle"))
        tick += 1
    for row, a in enumerate(attributes):
        y0 = top + row * row_h
        body.append(_text(left - 8, y0 + row_h / 2 + 4, a, anchor="end"))
        for i, v in enumerate(vendors):
            s = audit.summaries[v][a]
            if s.mean is None:
                continue
            y = y0 + 8 + i * 16
            color = palette[i % len(palette)]
            if s.ci95:
                body.append(
                    f'<line x1="{x(s.ci95[0]):.1f}" y1="{y}" x2="{x(s.ci95[1]):.1f}" '
                    f'y2="{y}" stroke="{color}" stroke-width="2"/>'
                )
            body.append(f'<circle cx="{x(s.mean):.1f}" cy="{y}" r="4" fill="{color}"/>')
    svg = _svg(width, height, body, "Mean score per vendor and attribute with 95% CI")
    return (
        f'<figure class="chart" data-chart="vendor-means">{svg}<figcaption>'
        "Mean final score per vendor and attribute; whiskers are bootstrap 95% CIs of the mean."
        "</figcaption></figure>"
    )


def render_audit_report(audit: AuditStatistics) -> tuple[str, str]:
    """The HTML and Markdown text of an audit report.

    Args:
        audit: The result of :func:`audit_for_run`.
    """
    title = f"clinjudge vendor audit: run {audit.run_id}"
    doc = _Doc([], [])
    if audit.simulated:
        doc.html.append(_banner([audit.run_id]))
        doc.md.append(f"> **SIMULATED** - {SIMULATED_TEXT} Simulated run(s): {audit.run_id}.\n")
    doc.heading(1, title)
    models = ", ".join(f"{k}: {v}" for k, v in (audit.models or {}).items())
    doc.para(
        f"Generated {now().strftime('%Y-%m-%d %H:%M UTC')} by clinjudge {__version__}. "
        f"Rubric {audit.rubric}, mode {audit.mode}, {models}, "
        f"{audit.samples_per_item} sample(s) per item; {len(audit.vendors)} vendors "
        f"({', '.join(audit.vendors)}), {audit.n_encounters} encounters, "
        f"{audit.n_items} items.",
        "meta",
    )
    attributes = audit.attributes
    doc.heading(2, "Scores per vendor")
    header = ["attribute"]
    for v in audit.vendors:
        header += [f"{v} mean", f"{v} 95% CI", f"{v} median", f"{v} n"]
    rows = []
    for a in attributes:
        row = [a]
        for v in audit.vendors:
            s = audit.summaries[v][a]
            row += [fmt_num(s.mean, 2), fmt_ci(s.ci95), fmt_num(s.median, 1), str(s.n)]
        rows.append(row)
    doc.table(_Table(header, rows))
    settings = audit.settings
    doc.para(
        f"Final score per item is the {audit.reducer} of its valid samples. CIs are percentile "
        f"bootstraps of the mean ({settings.n_boot} resamples, seed {settings.seed}).",
        "note",
    )
    chart = _means_chart(audit, attributes)
    if chart:
        doc.html.append(f'<div class="charts">{chart}</div>')
    doc.heading(2, "Paired comparisons between vendors")
    comp_rows = [
        [
            f"{c.vendor_a} vs {c.vendor_b}",
            c.attribute,
            str(c.n_pairs),
            fmt_num(c.median_difference, 2),
            fmt_num(c.mean_difference, 2),
            fmt_p(c.p),
            fmt_p(c.p_holm),
            "yes" if c.significant else "no",
        ]
        for c in audit.comparisons
    ]
    doc.table(
        _Table(
            [
                "vendors",
                "attribute",
                "n pairs",
                "median diff",
                "mean diff",
                "p",
                "p (Holm)",
                "significant",
            ],
            comp_rows,
            left=2,
        )
    )
    doc.para(
        "Differences are first vendor minus second on encounters both vendors have. Wilcoxon "
        "signed-rank test, zero differences dropped (zero_method 'wilcox'); p values are "
        f"Holm-corrected across all {len(audit.comparisons)} comparisons; significant at "
        f"{settings.alpha} after correction.",
        "note",
    )
    ppi_section(doc, audit)
    doc.heading(2, "Flagged items")
    doc.para(f"Rules: {', '.join(audit.flag_rules) or 'none'}.", "meta")
    if audit.flagged:
        doc.table(
            _Table(
                ["vendor", "encounter", "reasons"],
                [[f.vendor, f.encounter_id, "; ".join(f.reasons)] for f in audit.flagged],
                left=3,
            )
        )
    else:
        doc.para("No item tripped a rule.", "note")
    doc.heading(2, "Unmatched encounters")
    if audit.unmatched:
        doc.table(
            _Table(
                ["encounter", "present", "missing"],
                [
                    [u.encounter_id, ", ".join(u.present), ", ".join(u.missing)]
                    for u in audit.unmatched
                ],
                left=3,
            )
        )
    else:
        doc.para("Every vendor has every encounter.", "note")
    doc.heading(2, "Cost and time per vendor")
    doc.table(
        _Table(
            [
                "vendor",
                "items",
                "calls",
                "tokens in",
                "tokens out",
                "cost",
                "cost per item",
                "model time",
                "time per item",
            ],
            [
                [
                    v,
                    str(c.items),
                    str(c.calls),
                    str(c.tokens_in),
                    str(c.tokens_out),
                    fmt_usd(c.cost_usd, c.cost_known),
                    fmt_usd(c.cost_per_item_usd, c.cost_known),
                    fmt_seconds(c.latency_s),
                    fmt_seconds(c.latency_per_item_s),
                ]
                for v, c in audit.cost.items()
            ],
        )
    )
    doc.para("Time is the sum of the model calls' latencies of the vendor's items.", "note")
    doc.heading(2, "Notes")
    doc.notes(audit.notes)
    # One page shell for every report: the same CSP (no script, nothing fetched) as run reports.
    return html_page(title, doc.html), "\n".join(doc.md)


def write_audit_report(audit: AuditStatistics, out_dir: str | Path) -> ReportFiles:
    """Write ``report.html`` and ``report.md`` of an audit into ``out_dir`` (created if absent)."""
    html_text, md_text = render_audit_report(audit)
    return write_report_files(out_dir, html_text, md_text)
