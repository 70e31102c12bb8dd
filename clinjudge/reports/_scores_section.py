"""The scores part of a run report, with or without physicians' ratings: distributions of
the final scores per attribute, DocLens claim metrics per section and per instance, failures
by reason, flags, and the per-item table (capped, the counts covering every item)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clinjudge.analysis import METRICS as DOCLENS_METRICS
from clinjudge.analysis import (
    DocLensReport,
    ItemScores,
    ScoreDistribution,
    doclens_report,
    failures_by_reason,
    instance_tallies,
    item_scores,
    run_rubric,
    score_distributions,
)
from clinjudge.reports._charts import Bar, _figure, _svg, bar_chart_body
from clinjudge.reports._document import _Doc, _Table, fmt_num
from clinjudge.runs import RunStore, StoreError

DEFAULT_MAX_ITEMS = 200
"""Rows of the per-item table in a report; the counts above it always cover every item."""


def fmt_score(value: float | None, scale: str) -> str:
    """A final score: proportions with three decimals, Likert and binary as they are."""
    if value is None:
        return "-"
    return f"{value:.3f}" if scale == "proportion" else f"{value:g}"


def _bins(dist: ScoreDistribution) -> list[tuple[str, int, str]]:
    """(label, count, tooltip) per bar: tenths for proportions, each value for scales."""
    counts = dist.counts
    if dist.scale == "proportion":
        tenths = [0] * 10
        for value, n in counts.items():
            tenths[min(max(int(value * 10 + 1e-9), 0), 9)] += n
        return [
            ("0" if i == 0 else f".{i}", n, f"{i / 10:.1f}-{(i + 1) / 10:.1f}: {n}")
            for i, n in enumerate(tenths)
        ]
    domain = sorted({float(v) for v in range(dist.min, dist.max + 1)} | set(counts))
    return [(f"{v:g}", counts.get(v, 0), f"{v:g}: {counts.get(v, 0)}") for v in domain]


def score_histogram(dist: ScoreDistribution) -> str:
    """Bar chart of one attribute's final scores over the run's items."""
    bars = [Bar(label, count, tip) for label, count, tip in _bins(dist)]
    axis = "score (tenths; the last bin holds 1)" if dist.scale == "proportion" else "score"
    title = f"{dist.key} (n = {dist.n})"
    body, width, height = bar_chart_body(title, bars, axis, plot_h=100, bar_class="bar")
    caption = f"{dist.name} ({dist.key}): final scores of {dist.n} item(s)"
    if dist.mean is not None:
        caption += f", mean {dist.mean:.2f}, median {fmt_score(dist.median, dist.scale)}"
    extra = []
    if dist.null:
        extra.append(f"{dist.null} without a number (not applicable)")
    if dist.failed:
        extra.append(f"{dist.failed} failed")
    caption += (" (" + ", ".join(extra) + ")" if extra else "") + "."
    return _figure(
        "score-dist",
        _svg(width, height, body, f"Distribution of final {dist.key} scores"),
        caption,
    )


def distribution_table(dists: Sequence[ScoreDistribution]) -> _Table:
    """Per attribute: items with a number, mean, median, not applicable, failed, counts."""
    rows = []
    for d in dists:
        counts = ", ".join(f"{label}: {n}" for label, n, _ in _bins(d))
        rows.append(
            [
                d.key,
                d.scale,
                str(d.n),
                fmt_num(d.mean, 2),
                fmt_score(d.median, d.scale),
                str(d.null),
                str(d.failed),
                counts,
            ]
        )
    header = ["attribute", "scale", "items", "mean", "median", "n/a", "failed", "counts"]
    return _Table(header, rows, left=2, wrap=frozenset({7}), name="distributions")


_DOCLENS_COUNTS = (
    ("reference_entailed", "reference_claims", "reference_failed"),
    ("output_entailed", "output_claims", "output_failed"),
    ("statements_entailed", "statements", "statements_failed"),
    ("citations_counted", "citations", None),
)


def _tally_cell(row: Mapping[str, Any], hits: str, total: str, failed: str | None) -> str:
    text = f"{row.get(hits, 0)}/{row.get(total, 0)}"
    if failed and row.get(failed):
        text += f" ({row[failed]} failed)"
    return text


def doclens_section_table(report: DocLensReport) -> _Table:
    """DocLens pooled (micro) scores per section and total, and the per-instance mean."""
    rows, classes = [], []
    for r in report.pooled:
        tallies = r.to_dict()
        rows.append(
            [
                str(r.section),
                str(r.items),
                *(fmt_num(r.metric(m)) for m in DOCLENS_METRICS),
                *(_tally_cell(tallies, *parts) for parts in _DOCLENS_COUNTS),
                str(r.extraction_failed),
            ]
        )
        classes.append("pooled" if r.section == "total" else "")
    macro = report.macro
    rows.append(["mean per instance", "", *(fmt_num(macro.metric(m)) for m in DOCLENS_METRICS)])
    rows[-1] += [""] * 5
    classes.append("")
    header = [
        "section",
        "items",
        *DOCLENS_METRICS,
        "reference claims entailed",
        "output claims entailed",
        "statements supported",
        "citations counted",
        "extractions failed",
    ]
    return _Table(header, rows, left=1, classes=classes, name="doclens-sections")


def failures_table(failures: Sequence[dict[str, Any]], unjudged: int) -> _Table:
    """Failed samples grouped by reason, with the first few items of each."""
    rows = [
        [f["reason"], str(f["samples"]), str(f["items"]), ", ".join(f["example_items"])]
        for f in failures
    ]
    if unjudged:
        rows.append(["not judged (the run did not reach these items)", "-", str(unjudged), ""])
    header = ["reason", "failed samples", "items", "first items"]
    return _Table(header, rows, left=0, wrap=frozenset({0, 3}), name="failures")


def flag_rule_table(items: ItemScores) -> _Table:
    """Items flagged per rule, and items whose text addresses the judge."""
    rows = [[rule, str(n)] for rule, n in items.rule_counts.items()]
    rows.append(["text addresses the judge (items.flags)", str(items.injected)])
    rows.append(["any of these", str(items.flagged)])
    classes = [""] * (len(rows) - 1) + ["pooled"]
    return _Table(["flag", "items"], rows, left=1, classes=classes, name="flag-rules")


def item_table(
    items: ItemScores,
    dists: Sequence[ScoreDistribution],
    tallies: dict[str, dict[str, Any]] | None = None,
) -> _Table:
    """The per-item table: final scores, status, failure reason, flags, start of the text."""
    rows_in = items.rows
    lead = ["item"]
    if any(r.vendor for r in rows_in):
        lead.append("vendor")
    if any(r.section for r in rows_in):
        lead.append("section")
    lead.append("status")
    counts = ["ref. claims", "output claims", "statements", "citations"] if tallies else []
    header = [*lead, *(d.key for d in dists), *counts, "failure reason", "flags", "text"]
    rows, classes = [], []
    for r in rows_in:
        cells = [r.item_id]
        cells += [r.vendor or ""] if "vendor" in lead else []
        cells += [r.section or ""] if "section" in lead else []
        cells.append(r.status)
        cells += [fmt_score(r.values.get(d.key), d.scale) for d in dists]
        if tallies is not None:
            mine = tallies.get(r.item_id, {})
            cells += [_tally_cell(mine, *parts) for parts in _DOCLENS_COUNTS]
        excerpt = r.excerpt or ""
        if (r.text_chars or 0) > len(excerpt):
            excerpt += " ..."
        cells += [r.reason, "; ".join(r.flags), excerpt]
        rows.append(cells)
        classes.append("bad" if r.status != "ok" else "flag" if r.flags else "")
    n = len(header)
    return _Table(
        header,
        rows,
        left=len(lead),
        classes=classes,
        wrap=frozenset({n - 3, n - 2, n - 1}),
        wide=frozenset({n - 1}),
        name="items",
        tall=True,
    )


def _items_caption(items: ItemScores, run_id: str) -> str:
    text = (
        f"{items.total} item(s): {items.failed} failed, {items.unjudged} not judged, "
        f"{items.partial} with some failed samples, {items.flagged} flagged."
    )
    shown = len(items.rows)
    if shown < items.total:
        text += (
            f" Showing {shown} of {items.total} items: failed, not judged and flagged items "
            f"first, then the rest in input order. `judge export {run_id} --out FILE` writes "
            "every item's scores."
        )
    else:
        text += " Failed, not judged and flagged items come first, then input order."
    return text


def _scores_section(
    doc: _Doc,
    store: RunStore,
    run_id: str,
    *,
    flag_rules: Sequence[str] | None,
    max_items: int | None,
    full: bool,
    doclens_compat: str | None = None,
) -> None:
    """Scores of one run, with or without physicians' ratings."""
    run = store.get_run(run_id)
    try:
        rubric = run_rubric(run)
    except StoreError as exc:
        doc.para(f"No scores: {exc}", "note")
        return
    dists = score_distributions(store, run_id, rubric)
    doc.heading(3, "Final scores per attribute")
    doc.table(distribution_table(dists))
    if full:
        doc.html.append('<div class="charts">')
        doc.html.extend(score_histogram(d) for d in dists if d.n)
        doc.html.append("</div>")
    claims = doclens_report(store, run_id, doclens_compat)
    if claims is not None:
        doc.heading(3, "DocLens claim metrics per section (pooled)")
        doc.table(doclens_section_table(claims))
        doc.para(
            "Pooled (micro) scores as DocLens reports them: entailed claims over all claims of "
            "all items in the section (failed verdicts count as not entailed). The last row is "
            "the mean of the per-instance scores, for comparison. Arithmetic: "
            f"{claims.compat} (the run's DocLens compat setting unless "
            "the report asked for another; the per-item counts below use clinjudge's).",
            "note",
        )
    if not full:
        return
    # Imported here: the audit module builds its report from this one.
    from clinjudge.analysis import run_flag_rules

    rules = run_flag_rules(store, run_id, rubric, flag_rules)
    items = item_scores(store, run_id, rules, limit=max_items)
    doc.heading(3, "Failures by reason")
    failures = failures_by_reason(store, run_id)
    if failures or items.unjudged:
        doc.table(failures_table(failures, items.unjudged))
    else:
        doc.para("No sample failed.", "note")
    doc.heading(3, "Flags")
    doc.table(flag_rule_table(items))
    doc.heading(3, "Items")
    doc.para(_items_caption(items, run_id), "meta")
    ids = [r.item_id for r in items.rows]
    tallies = instance_tallies(store, run_id, ids) if claims is not None else None
    doc.table(item_table(items, dists, tallies))
    if tallies is not None:
        doc.para(
            "Claim counts are entailed/total over the item's samples; its scores are the "
            "median over samples.",
            "note",
        )
