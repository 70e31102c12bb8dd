"""Reports of runs and comparisons: ``report.html`` (self-contained) and ``report.md``.

The HTML file carries its CSS inline and draws its charts as inline SVG: no scripts, no fonts,
no images or stylesheets fetched from anywhere (a Content-Security-Policy says so to the
browser), so it opens offline and can be mailed or archived as one file. Every run's section
shows its scores (distributions, DocLens metrics, failures, flags, items); where physicians'
ratings exist it adds ICC(3,k) of the judge against the human median per attribute with 95% CI
bars and histograms of judge-minus-human-median differences (the judge paper's Fig. 3); a
comparison adds agreement against cost per item. A run made with the mock provider carries a
SIMULATED banner at the top of both files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clinjudge._util.version import __version__
from clinjudge.analysis import (
    AgreementAnalysis,
    AgreementResult,
    AttributeAgreement,
    Comparison,
    ComparisonRow,
    RunSummary,
    compare_runs,
    computed_statistics,
    run_summary,
    table_columns,
)
from clinjudge.reports._charts import (
    _diff_label,
    cost_agreement_scatter,
    difference_histogram,
    icc_chart,
)
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
    md_text,
    write_report_files,
)
from clinjudge.reports._probe_section import PROBE_NOTE, probe_comparison_table
from clinjudge.reports._scores_section import DEFAULT_MAX_ITEMS, _scores_section
from clinjudge.reports._statistic_cells import column_headers, compare_cells, statistic_cells
from clinjudge.runs import RunStore, now


def comparison_cells(row: ComparisonRow) -> list[str]:
    """The formatted shots-to-latency cells of one `judge compare` row (terminal and report):
    the registry's ``compare`` columns between samples and mean |diff|."""
    return [
        str(row.shots),
        str(row.samples),
        *compare_cells(row, table_columns("compare")),
        fmt_num(row.mean_abs_diff),
        f"{row.failed_samples}/{row.samples_total}"
        + (f", {row.suspect_samples} suspect" if row.suspect_samples else ""),
        fmt_usd(row.cost_per_item_usd, row.cost_known),
        fmt_seconds(row.latency_per_item_s),
    ]


def comparison_table(comparison: Comparison) -> _Table:
    """The `judge compare` table."""
    rows, classes = [], []
    for r in comparison.rows:
        model = (r.model or "") + (" (SIMULATED)" if r.simulated else "")
        rows.append(
            [
                r.run_id,
                r.name or "",
                r.rubric,
                r.mode or "",
                model,
                *comparison_cells(r),
            ]
        )
        classes.append("sim" if r.simulated else "")
    header = [
        "run",
        "name",
        "rubric",
        "mode",
        "model",
        "shots",
        "samples",
        *column_headers(table_columns("compare")),
        "mean |diff|",
        "failed samples",
        "cost/item",
        "latency/item",
    ]
    return _Table(header, rows, left=5, classes=classes)


def attribute_table(agreement: AgreementAnalysis) -> _Table:
    """Per-attribute agreement of one run, plus the pooled row: the registry's ``report``
    columns (``analysis.register_statistic``)."""
    columns = table_columns("report")
    rows, classes = [], []
    for name, block in agreement.blocks():
        judged = block.judge_vs_physicians
        rows.append(
            [
                name,
                "binary" if block.binary else "ordinal",
                fmt_num(judged.n_units if judged else None),
                *statistic_cells(block, name, columns),
            ]
        )
        classes.append("pooled" if name == "pooled" else "")
    header = ["attribute", "scale", "units", *column_headers(columns)]
    return _Table(header, rows, left=2, classes=classes)


def _registered_notes(agreement: AgreementAnalysis) -> list[str]:
    """Help lines of the registered statistics computed beyond the built-in ones that show in
    the table (the built-in ones are described by the note under it)."""
    shown = {(c.comparison, s) for c in table_columns("report") for s in c.statistic}
    notes = []
    for statistic in computed_statistics():
        if (statistic.comparison, statistic.name) in shown and any(
            statistic.name in (b.statistics or {}) for _, b in agreement.blocks()
        ):
            notes.append(f"{statistic.label or statistic.name}: {statistic.help}")
    return notes


def substitution_table(agreement: AgreementAnalysis) -> _Table:
    """The judge in place of each physician, and as an extra rater (pooled block)."""
    judged = agreement.pooled.judge_vs_physicians
    changes = [(f"judge replaces {s.rater}", s) for s in (judged.substitution if judged else [])]
    if judged is not None and judged.added_rater is not None:
        changes.append(("judge added as a rater", judged.added_rater))
    rows = [
        [
            label,
            fmt_num(change.icc_base),
            fmt_num(change.icc_with_judge),
            fmt_num(change.delta_icc),
            fmt_ci(change.ci95),
            fmt_p(change.p),
        ]
        for label, change in changes
    ]
    header = ["change", "raters' ICC(3,k)", "with judge", "delta", "95% CI", "p"]
    return _Table(header, rows)


def _differences(block: AttributeAgreement) -> dict[str, int]:
    judged = block.judge_vs_physicians
    return judged.differences if judged else {}


def difference_table(agreement: AgreementAnalysis) -> _Table:
    """Counts of judge-minus-human-median differences per attribute (Fig. 3 as numbers)."""
    keys = sorted({float(k) for b in agreement.per_attribute.values() for k in _differences(b)})
    labels = [_diff_label(k) for k in keys]
    rows = []
    for name, block in agreement.per_attribute.items():
        counts = {float(k): v for k, v in _differences(block).items()}
        rows.append([name, *[str(counts.get(k, 0)) for k in keys]])
    return _Table(["attribute", *labels], rows)


def _run_summary_table(summary: RunSummary) -> _Table:
    keys = [
        ("status", summary.status),
        ("mode", summary.mode),
        ("rubric", summary.rubric),
        ("models", ", ".join(f"{k}: {v}" for k, v in (summary.models or {}).items())),
        ("items", summary.items),
        ("samples per item", summary.samples_per_item),
        ("items ok / failed", f"{summary.items_ok} / {summary.items_failed}"),
        (
            "samples ok / failed",
            f"{summary.samples_ok} / {summary.samples_failed}",
        ),
        ("calls", summary.calls),
        ("tokens in / out", f"{summary.tokens_in} / {summary.tokens_out}"),
        ("cost", fmt_usd(summary.cost_usd)),
        (
            "item latency p50 / p95",
            f"{fmt_seconds(summary.item_latency_p50_s)} / "
            f"{fmt_seconds(summary.item_latency_p95_s)}",
        ),
        ("created", summary.created_at[:19]),
    ]
    return _Table(["what", "value"], [[k, "-" if v is None else str(v)] for k, v in keys], left=2)


@dataclass(frozen=True)
class _ScoreOptions:
    flag_rules: Sequence[str] | None
    max_items: int | None
    full: bool
    doclens_compat: str | None = None


def _run_section(
    doc: _Doc,
    store: RunStore,
    row: ComparisonRow,
    agreement: AgreementResult | None,
    reason: str | None,
    options: _ScoreOptions,
) -> None:
    title = f"Run {row.run_id}" + (f" ({row.name})" if row.name else "")
    doc.heading(2, title)
    sim = " SIMULATED (mock provider)." if row.simulated else ""
    doc.para(
        f"{row.rubric}, mode {row.mode}, model {row.model}, {row.shots} shot(s), "
        f"{row.samples} sample(s) per item.{sim}",
        "meta",
    )
    _scores_section(
        doc,
        store,
        row.run_id,
        flag_rules=options.flag_rules,
        max_items=options.max_items,
        full=options.full,
        doclens_compat=options.doclens_compat,
    )
    doc.heading(3, "Agreement with physicians")
    if agreement is None:
        doc.para(f"Agreement not computed: {reason}", "note")
        return
    doc.para(
        f"{agreement.n_items_rated} of {agreement.n_items_run} items rated by "
        f"{len(agreement.raters)} physician(s) ({', '.join(agreement.raters)}); the "
        f"judge's value is its final score ({agreement.reducer} of its valid samples).",
        "meta",
    )
    doc.table(attribute_table(agreement))
    doc.para(
        "ICC(3,k), alpha and AC2 compare the judge with the physicians' median; median diff "
        "and IQR are of judge minus human median; Wilcoxon p uses zero_method 'wilcox' "
        "(zero differences dropped). Raters' ICC(3,k) is the physicians among themselves.",
        "note",
    )
    for note in _registered_notes(agreement):
        doc.para(note, "note")
    doc.html.append('<div class="charts">')
    doc.html.append(icc_chart(agreement))
    doc.html.append("</div>")
    doc.heading(3, "Judge in place of a physician, and as an extra rater (pooled)")
    doc.table(substitution_table(agreement))
    doc.heading(3, "Differences, judge minus human median")
    doc.html.append('<div class="charts">')
    for attribute, block in agreement.per_attribute.items():
        if _differences(block):
            doc.html.append(difference_histogram(attribute, block))
    doc.html.append("</div>")
    doc.md.append("Counts per difference (the histograms in report.html):\n")
    doc.md.append(difference_table(agreement).to_markdown() + "\n")
    doc.heading(3, "Notes")
    doc.notes(agreement.notes)


def render_report(
    store: RunStore,
    comparison: Comparison,
    *,
    compare: bool,
    flag_rules: Sequence[str] | None = None,
    max_items: int | None = DEFAULT_MAX_ITEMS,
    doclens_compat: str | None = None,
) -> tuple[str, str]:
    """The HTML and Markdown text of a report.

    Args:
        store: The run store.
        comparison: The runs' comparison (with their agreement analyses).
        compare: Whether this is a comparison report (adds the cost-vs-agreement chart; each
            run gets its score summary, not its charts and item table).
        flag_rules: Flag rules such as ``accurate<=2`` (default: the audit defaults that apply
            to the run's rubric).
        max_items: Most rows of the per-item table (None: every item).
        doclens_compat: DocLens arithmetic of claim runs (``clinjudge`` or ``official``;
            default: each run's own setting).
    """
    options = _ScoreOptions(flag_rules, max_items, full=not compare, doclens_compat=doclens_compat)
    rows = comparison.rows
    simulated = [r.run_id for r in rows if r.simulated]
    if compare:
        title = f"clinjudge comparison of {len(rows)} run(s)"
    else:
        title = f"clinjudge report: run {rows[0].run_id}"
    stamp = now().strftime("%Y-%m-%d %H:%M UTC")
    doc = _Doc([], [])
    if simulated:
        doc.html.append(_banner(simulated))
        doc.md.append(
            f"> **SIMULATED** - {SIMULATED_TEXT} Simulated run(s): "
            f"{md_text(', '.join(simulated))}.\n"
        )
    doc.heading(1, title)
    doc.para(f"Generated {stamp} by clinjudge {__version__}.", "meta")
    if not compare:
        summary = run_summary(store, rows[0].run_id)
        doc.heading(2, "Run")
        doc.table(_run_summary_table(summary))
    doc.heading(2, "Configurations" if compare else "Configuration")
    doc.table(comparison_table(comparison))
    doc.para(
        "Agreement columns are pooled over the Likert attributes: ICC(3,k) of the judge against "
        "the physicians' median with its F-based 95% CI, Krippendorff's alpha and Gwet's AC2 on "
        "the ordinal scale; mean |diff| is the mean absolute judge-minus-median difference. "
        "Cost and latency are per item, summed over the item's calls.",
        "note",
    )
    if compare:
        scatter = cost_agreement_scatter(comparison)
        if scatter:
            doc.html.append(scatter)
        else:
            doc.para("No run has both agreement and cost, so there is no scatter.", "note")
    if comparison.probes:
        # Probe runs side by side: the judge that reacts to what it should (docs/trust.md).
        doc.heading(2, "Probes")
        doc.table(probe_comparison_table(comparison))
        doc.para(PROBE_NOTE, "note")
    # "agreement not computed" notes are said again in each run's section; keep the rest.
    doc.notes([n for n in comparison.notes if not _is_run_error(n, comparison.errors)])
    for row in rows:
        agreement = comparison.agreements.get(row.run_id)
        error = comparison.errors.get(row.run_id)
        _run_section(doc, store, row, agreement, error, options)
    return html_page(title, doc.html), "\n".join(doc.md)


def _is_run_error(note: str, errors: dict[str, str]) -> bool:
    return any(note == f"{rid}: agreement not computed: {err}" for rid, err in errors.items())


def write_report(
    store: RunStore,
    run_ids: list[str],
    out_dir: str | Path,
    *,
    compare: bool = False,
    n_boot: int = 1000,
    seed: int = 0,
    flag_rules: Sequence[str] | None = None,
    max_items: int | None = DEFAULT_MAX_ITEMS,
    doclens_compat: str | None = None,
) -> ReportFiles:
    """Write ``report.html`` and ``report.md`` for one run or a comparison of runs.

    Args:
        store: The run store.
        run_ids: Run ids or unique parts of them (exactly one unless ``compare``).
        out_dir: Directory to write into (created if absent).
        compare: Comparison report across runs.
        n_boot: Bootstrap resamples of the agreement analysis.
        seed: Bootstrap seed.
        flag_rules: Flag rules such as ``accurate<=2`` (default: the audit defaults that apply
            to each run's rubric).
        max_items: Most rows of each run's per-item table (None: every item).
        doclens_compat: DocLens arithmetic of claim runs (default: each run's own).
    """
    if not run_ids:
        raise ValueError("name at least one run")
    if not compare and len(run_ids) != 1:
        raise ValueError("a run report takes one run; use compare for several")
    comparison = compare_runs(store, run_ids, n_boot=n_boot, seed=seed)
    html_text, markdown = render_report(
        store,
        comparison,
        compare=compare,
        flag_rules=flag_rules,
        max_items=max_items,
        doclens_compat=doclens_compat,
    )
    return write_report_files(out_dir, html_text, markdown)
