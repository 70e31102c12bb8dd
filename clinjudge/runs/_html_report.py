"""Reports of runs and comparisons: ``report.html`` (self-contained) and ``report.md``.

The HTML file carries its CSS inline and draws its charts as inline SVG built here: no scripts,
no fonts, no images or stylesheets fetched from anywhere, so it opens offline and can be mailed
or archived as one file. Charts: ICC(3,k) of the judge against the human median per attribute
with 95% CI bars, histograms of judge-minus-human-median differences per attribute (the judge
paper's Fig. 3), and, for comparisons, agreement against cost per item across configurations.
A run made with the mock provider carries a SIMULATED banner at the top of both files.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import html
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clinjudge import __version__
from clinjudge.rubrics import Rubric
from clinjudge.runs._agreement_run import run_rubric
from clinjudge.runs._compare import Comparison, block_summary, compare_runs
from clinjudge.runs._doclens_report import METRICS as DOCLENS_METRICS
from clinjudge.runs._doclens_report import doclens_report, instance_tallies
from clinjudge.runs._report import (
    failures_by_reason,
    item_scores,
    run_summary,
    score_distributions,
)
from clinjudge.runs._store import RunStore, StoreError, now

SIMULATED_TEXT = (
    "Scores from the mock provider are not judgments of any model or person. "
    "Agreement figures below only exercise the pipeline."
)

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
 margin:0;padding:0 2rem 3rem;color:#1d232a;background:#fff;line-height:1.45}
h1{font-size:1.6rem;margin:1.2rem 0 .3rem}h2{font-size:1.25rem;margin:2rem 0 .5rem;
 border-bottom:1px solid #d0d7de;padding-bottom:.2rem}h3{font-size:1.05rem;margin:1.4rem 0 .4rem}
.meta{color:#57606a;font-size:.9rem}
.banner{background:#b42318;color:#fff;font-size:1.25rem;font-weight:700;padding:1rem 1.5rem;
 margin:0 -2rem 1rem;border-bottom:6px solid #7a1109;letter-spacing:.02em}
.banner .big{font-size:2rem;display:block;letter-spacing:.2em}
h1,h2,h3,p,li{overflow-wrap:anywhere}
table{border-collapse:collapse;margin:0;font-size:.88rem}
th,td{border:1px solid #d0d7de;padding:.25rem .55rem;text-align:right;white-space:nowrap;
 vertical-align:top}
th{background:#f6f8fa;position:sticky;top:0}td.l,th.l{text-align:left}
td.w,th.w{white-space:normal;text-align:left;min-width:16rem;max-width:32rem;overflow-wrap:anywhere}
tr.pooled td{font-weight:700;background:#f6f8fa}tr.sim td{background:#fff4e5}
tr.bad td{background:#fff1f0}tr.flag td{background:#fff8c5}
.scroll{overflow:auto;max-width:100%;margin:.5rem 0 1rem}.scroll.tall{max-height:75vh}
.charts{display:flex;flex-wrap:wrap;gap:1rem}
figure.chart{margin:.3rem 0;border:1px solid #d0d7de;border-radius:6px;padding:.4rem .6rem;
 width:min-content;max-width:100%;box-sizing:border-box;overflow-x:auto}
figcaption{font-size:.82rem;color:#57606a;min-width:12rem}
svg{display:block}
.note{font-size:.85rem;color:#57606a}ul.notes{font-size:.85rem;color:#57606a}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif}
"""

CSP = (
    "default-src 'none'; script-src 'none'; style-src 'sha256-{style_hash}'; img-src 'none'; "
    "font-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'"
)
"""Content-Security-Policy of every report page: no script at all, only our own inline style
(allowed by its hash), nothing fetched."""

_BLUE, _RED, _GREY, _ORANGE = "#1f6feb", "#b42318", "#8c959f", "#d97706"


@dataclass(frozen=True)
class ReportFiles:
    """Paths written by :func:`write_report`."""

    html: Path
    markdown: Path


# ---------------------------------------------------------------------------------------------
# Formatting


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


_MD_ALWAYS = re.compile(r"([\\`*\[\]<|~])")
_MD_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
_MD_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_MD_LINE_START = re.compile(r"^(\s*)(>|#{1,6}(?=\s|$)|[+=-]+(?=\s|$)|\d{1,9}(?=[.)](?:\s|$)))")


_LITERAL = r"""(?:'[^'\\]*'|"[^"\\]*"|-?\d+(?:\.\d+)?(?:[eE]-?\d+)?)"""
_LIST_REPR = re.compile(rf"\[(?:{_LITERAL}(?:,\s*{_LITERAL})*)?\]")


def _listed(match: re.Match[str]) -> str:
    values = ast.literal_eval(match.group(0))
    if not values:
        return "none"
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


def plain_note(text: str) -> str:
    """A note with Python list literals (``['a', 'b']``, ``[1.0, 2.0]``) written as text
    (``a, b``; ``1, 2``), as analysis messages may hold them.

    Args:
        text: The note.
    """
    return _LIST_REPR.sub(_listed, text)


def md_text(value: Any, *, cell: bool = False) -> str:
    """Text for Markdown that renders as itself: no emphasis, code, links, HTML, headings,
    quotes, lists or table breaks. Newlines become spaces, so it fits a table cell or a line.

    Args:
        value: Any text (untrusted text included); None gives an empty string.
        cell: For a table cell, where block markers (``#``, ``>``, ``-``, ``1.``) mean nothing.
    """
    text = " ".join(("" if value is None else str(value)).split())
    text = _MD_ALWAYS.sub(r"\\\1", text)
    text = _MD_ENTITY.sub(r"\\&", text)
    text = _MD_UNDERSCORE.sub(r"\\_", text)
    match = None if cell else _MD_LINE_START.match(text)
    if match:  # a block marker at the start: '# x', '> x', '- x', '1. x'
        end = match.end()
        if match.group(2).isdigit():
            return text[:end] + "\\" + text[end:]
        return text[: match.start(2)] + "\\" + text[match.start(2) :]
    return text


def fmt_num(value: Any, digits: int = 3) -> str:
    """A number for a table cell; ``-`` when missing."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def fmt_ci(ci: Sequence[Any] | None) -> str:
    """``[lo, hi]`` or ``-``."""
    if not ci or any(v is None for v in ci):
        return "-"
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def fmt_p(value: Any) -> str:
    """A p value: three decimals, or ``<0.001``."""
    if value is None:
        return "-"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def fmt_usd(value: Any, known: bool = True) -> str:
    """Dollars with enough decimals for per-item costs."""
    if value is None:
        return "-"
    return f"${value:.4f}" + ("" if known else " (partial)")


def fmt_seconds(value: Any) -> str:
    """Seconds with two decimals."""
    return "-" if value is None else f"{value:.2f} s"


# ---------------------------------------------------------------------------------------------
# Tables (as rows of cells, rendered to HTML and Markdown)


@dataclass
class _Table:
    header: list[str]
    rows: list[list[str]]
    left: int = 1  # leading columns aligned left
    classes: list[str] | None = None  # one CSS class per row
    wrap: frozenset[int] = frozenset()  # columns of running text, wrapped
    name: str = ""  # data-table attribute, for tests and styling
    tall: bool = False  # many rows: scroll inside a box of bounded height

    def _cell(self, tag: str, index: int, text: str) -> str:
        css = "w" if index in self.wrap else "l" if index < self.left else ""
        attr = f' class="{css}"' if css else ""
        return f"<{tag}{attr}>{_esc(text)}</{tag}>"

    def to_html(self) -> str:
        head = "".join(self._cell("th", i, h) for i, h in enumerate(self.header))
        body = []
        for index, row in enumerate(self.rows):
            css = (self.classes or [""] * len(self.rows))[index]
            cells = "".join(self._cell("td", i, c) for i, c in enumerate(row))
            body.append(f'<tr class="{css}">{cells}</tr>' if css else f"<tr>{cells}</tr>")
        box = "scroll tall" if self.tall else "scroll"
        named = f' data-table="{_esc(self.name)}"' if self.name else ""
        return (
            f'<div class="{box}"><table{named}><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )

    def to_markdown(self) -> str:
        def cell(text: str) -> str:
            return md_text(text, cell=True)

        lines = ["| " + " | ".join(cell(h) for h in self.header) + " |"]
        lines.append(
            "|"
            + "|".join(":---" if i < self.left else "---:" for i in range(len(self.header)))
            + "|"
        )
        lines.extend("| " + " | ".join(cell(c) for c in row) + " |" for row in self.rows)
        return "\n".join(lines)


def _config_label(row: dict[str, Any]) -> str:
    return row["name"] or row["run_id"]


def comparison_cells(row: dict[str, Any]) -> list[str]:
    """The formatted shots-to-latency cells of one `judge compare` row (terminal and report)."""
    return [
        str(row["shots"]),
        str(row["samples"]),
        fmt_num(row["icc3k"]),
        fmt_ci(row["icc3k_ci95"]),
        fmt_num(row["alpha_ordinal"]),
        fmt_num(row["ac2_ordinal"]),
        fmt_num(row["mean_abs_diff"]),
        f"{row['failed_samples']}/{row['samples_total']}",
        fmt_usd(row["cost_per_item_usd"], row["cost_known"]),
        fmt_seconds(row["latency_per_item_s"]),
    ]


def comparison_table(comparison: Comparison) -> _Table:
    """The `judge compare` table."""
    rows, classes = [], []
    for r in comparison.rows:
        model = (r["model"] or "") + (" (SIMULATED)" if r["simulated"] else "")
        rows.append(
            [
                r["run_id"],
                r["name"] or "",
                r["rubric"],
                r["mode"],
                model,
                *comparison_cells(r),
            ]
        )
        classes.append("sim" if r["simulated"] else "")
    header = [
        "run",
        "name",
        "rubric",
        "mode",
        "model",
        "shots",
        "samples",
        "ICC(3,k)",
        "95% CI",
        "alpha ord.",
        "AC2 ord.",
        "mean |diff|",
        "failed samples",
        "cost/item",
        "latency/item",
    ]
    return _Table(header, rows, left=5, classes=classes)


def attribute_table(agreement: dict[str, Any]) -> _Table:
    """Per-attribute agreement of one run, plus the pooled row."""
    rows, classes = [], []
    blocks = [*agreement["per_attribute"].items(), ("pooled", agreement["pooled"])]
    for name, block in blocks:
        s = block_summary(block)
        rows.append(
            [
                name,
                "binary" if s["binary"] else "ordinal",
                fmt_num(s["n_units"]),
                fmt_num(s["icc3k"]),
                fmt_ci(s["icc3k_ci95"]),
                fmt_num(s["alpha_ordinal"]),
                fmt_num(s["ac2_ordinal"]),
                fmt_num(s["median_difference"], 2),
                fmt_num(s["iqr"], 2),
                fmt_p(s["wilcoxon_p"]),
                fmt_num(s["percent_agreement"]),
                fmt_num(s["kappa"]),
                fmt_num(s["raters_icc3k"]),
            ]
        )
        classes.append("pooled" if name == "pooled" else "")
    header = [
        "attribute",
        "scale",
        "units",
        "ICC(3,k)",
        "95% CI",
        "alpha ord.",
        "AC2 ord.",
        "median diff",
        "IQR",
        "Wilcoxon p",
        "% agree",
        "kappa",
        "raters' ICC(3,k)",
    ]
    return _Table(header, rows, left=2, classes=classes)


def substitution_table(agreement: dict[str, Any]) -> _Table:
    """The judge in place of each physician, and as an extra rater (pooled block)."""
    pooled = agreement["pooled"]
    rows = [
        [
            f"judge replaces {s['rater']}",
            fmt_num(s.get("icc_base")),
            fmt_num(s.get("icc_with_judge")),
            fmt_num(s.get("delta_icc")),
            fmt_ci(s.get("ci95")),
            fmt_p(s.get("p")),
        ]
        for s in pooled.get("substitution") or []
    ]
    added = pooled.get("added_rater")
    if added:
        rows.append(
            [
                "judge added as a rater",
                fmt_num(added.get("icc_base")),
                fmt_num(added.get("icc_with_judge")),
                fmt_num(added.get("delta_icc")),
                fmt_ci(added.get("ci95")),
                fmt_p(added.get("p")),
            ]
        )
    header = ["change", "raters' ICC(3,k)", "with judge", "delta", "95% CI", "p"]
    return _Table(header, rows)


def difference_table(agreement: dict[str, Any]) -> _Table:
    """Counts of judge-minus-human-median differences per attribute (Fig. 3 as numbers)."""
    keys = sorted(
        {float(k) for b in agreement["per_attribute"].values() for k in b.get("differences", {})}
    )
    labels = [_diff_label(k) for k in keys]
    rows = []
    for name, block in agreement["per_attribute"].items():
        counts = {float(k): v for k, v in (block.get("differences") or {}).items()}
        rows.append([name, *[str(counts.get(k, 0)) for k in keys]])
    return _Table(["attribute", *labels], rows)


def _diff_label(value: float) -> str:
    return f"{value:+g}" if value else "0"


# ---------------------------------------------------------------------------------------------
# SVG charts


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{_esc(label)}">{"".join(body)}</svg>'
    )


def _text(
    x: float, y: float, text: str, *, anchor: str = "start", size: int = 11, **kw: Any
) -> str:
    extra = "".join(f' {k.rstrip("_").replace("_", "-")}="{_esc(v)}"' for k, v in kw.items())
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{extra}>'
        f"{_esc(text)}</text>"
    )


def _nice_ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    multiples = (1, 2, 5, 10) if integer else (1, 2, 2.5, 5, 10)
    step = next(m * magnitude for m in multiples if m * magnitude >= raw)
    if integer:
        step = max(1.0, step)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    value = first
    while value <= hi + 1e-9:
        ticks.append(round(value, 10))
        value += step
    return ticks


def icc_chart(agreement: dict[str, Any]) -> str:
    """Forest plot: ICC(3,k) of judge vs human median with 95% CI, per attribute and pooled."""
    entries = []
    for name, block in [*agreement["per_attribute"].items(), ("pooled", agreement["pooled"])]:
        s = block_summary(block)
        if s["binary"]:
            continue
        entries.append((name, s["icc3k"], s["icc3k_ci95"]))
    lo, hi = forest_range(
        [v for _, v, _ in entries if v is not None],
        [ci[0] for _, _, ci in entries if ci and ci[0] is not None],
    )
    left, right, top, row_h = 130, 120, 26, 22
    plot_w = 360
    width = left + plot_w + right
    height = top + row_h * len(entries) + 34

    def x(v: float) -> float:
        return left + (min(max(v, lo), hi) - lo) / (hi - lo) * plot_w

    body = [f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>']
    for tick in _nice_ticks(lo, hi):
        body.append(
            f'<line x1="{x(tick):.1f}" y1="{top - 6}" x2="{x(tick):.1f}" '
            f'y2="{top + row_h * len(entries)}" stroke="#d0d7de" stroke-width="1"/>'
        )
        body.append(_text(x(tick), height - 18, f"{tick:g}", anchor="middle", size=10))
    body.append(
        _text(
            left + plot_w / 2,
            height - 4,
            "ICC(3,k), judge vs human median",
            anchor="middle",
            size=10,
        )
    )
    body.append(_text(left + plot_w + 8, top - 10, "ICC [95% CI]", size=10, fill="#57606a"))
    for index, (name, value, ci) in enumerate(entries):
        cy = top + row_h * index + row_h / 2
        weight = "700" if name == "pooled" else "400"
        body.append(_text(left - 8, cy + 4, name, anchor="end", font_weight=weight))
        if value is None:
            body.append(_text(left + 4, cy + 4, "not computed", size=10, fill=_GREY))
            continue
        if ci and ci[0] is not None and ci[1] is not None:
            body.extend(_interval(x, cy, ci[0], ci[1], lo, hi))
        shape = "rect" if name == "pooled" else "circle"
        if shape == "rect":
            body.append(
                f'<rect x="{x(value) - 5:.1f}" y="{cy - 5:.1f}" width="10" height="10" '
                f'fill="{_RED}"/>'
            )
        else:
            body.append(f'<circle cx="{x(value):.1f}" cy="{cy:.1f}" r="5" fill="{_RED}"/>')
        body.append(_text(left + plot_w + 8, cy + 4, f"{value:.2f} {fmt_ci(ci)}", size=10))
    return _figure(
        "icc-ci",
        _svg(width, height, body, "ICC(3,k) per attribute with 95% confidence intervals"),
        "ICC(3,k) (two-way mixed, consistency) between the judge's final score and the median "
        "of the physicians, per attribute and pooled over (item, attribute) units; bars are "
        "Shrout & Fleiss 95% CIs; an arrow marks an interval that reaches past the axis (its "
        "bounds are printed on the right). Binary attributes are reported with agreement and "
        "kappa.",
        width,
    )


def forest_range(values: Sequence[float], lows: Sequence[float]) -> tuple[float, float]:
    """Axis of the ICC forest plot: 0 (or the lowest point estimate) to 1, widened for CI
    lower bounds down to -1 at most, so one wide interval cannot squash the others; intervals
    reaching past the axis are drawn clipped, with an arrow.

    Args:
        values: Point estimates.
        lows: Lower CI bounds.
    """

    def floor10(v: float) -> float:
        return math.floor(v * 10 + 1e-9) / 10

    lo = min(0.0, floor10(min(values, default=0.0)))
    if lows:
        lo = min(lo, max(-1.0, floor10(min(lows))))
    return lo, 1.0


def _interval(x: Any, cy: float, a: float, b: float, lo: float, hi: float) -> list[str]:
    """A CI bar from a to b on a clipped axis: end caps inside, arrowheads where clipped."""
    parts = [
        f'<line x1="{x(a):.1f}" y1="{cy:.1f}" x2="{x(b):.1f}" y2="{cy:.1f}" '
        f'stroke="{_BLUE}" stroke-width="2"/>'
    ]
    for end, clipped, sign in ((a, a < lo, -1), (b, b > hi, 1)):
        ex = x(end)
        if clipped:
            tip = ex + sign * 2
            parts.append(
                f'<path class="clipped" d="M{tip:.1f},{cy:.1f} L{tip - sign * 8:.1f},'
                f'{cy - 5:.1f} L{tip - sign * 8:.1f},{cy + 5:.1f} Z" fill="{_BLUE}"/>'
            )
        else:
            parts.append(
                f'<line x1="{ex:.1f}" y1="{cy - 5:.1f}" x2="{ex:.1f}" y2="{cy + 5:.1f}" '
                f'stroke="{_BLUE}" stroke-width="2"/>'
            )
    return parts


def _diff_domain(attribute_block: dict[str, Any]) -> list[float]:
    cats = [float(c) for c in attribute_block.get("categories") or []]
    keys = [float(k) for k in attribute_block.get("differences") or {}]
    span = (max(cats) - min(cats)) if len(cats) >= 2 else max((abs(k) for k in keys), default=1)
    half = any(not float(k).is_integer() for k in keys)
    step = 0.5 if half else 1.0
    n = int(round(span / step))
    domain = [round(i * step, 9) for i in range(-n, n + 1)]
    return sorted(set(domain) | set(keys))


def difference_histogram(attribute: str, block: dict[str, Any]) -> str:
    """Bar chart of judge-minus-human-median differences for one attribute."""
    counts = {float(k): int(v) for k, v in (block.get("differences") or {}).items()}
    domain = _diff_domain(block)
    total = sum(counts.values())
    peak = max(counts.values(), default=0) or 1
    left, right, top, bottom = 34, 12, 24, 34
    plot_w, plot_h = 234, 110
    bar_w = min(30.0, plot_w / max(1, len(domain)))
    offset = (plot_w - bar_w * len(domain)) / 2
    width, height = left + plot_w + right, top + plot_h + bottom
    body = [
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
        _text(left, 15, f"{attribute} (n = {total})", size=12, font_weight="700"),
    ]
    for tick in _nice_ticks(0, peak, 3, integer=True):
        ty = top + plot_h - tick / peak * plot_h
        body.append(
            f'<line x1="{left}" y1="{ty:.1f}" x2="{left + plot_w}" y2="{ty:.1f}" stroke="#eaeef2"/>'
        )
        body.append(_text(left - 4, ty + 3, f"{tick:g}", anchor="end", size=9))
    label_every = 1 if len(domain) <= 11 else 2
    for index, value in enumerate(domain):
        count = counts.get(value, 0)
        bh = count / peak * plot_h
        bx = left + offset + index * bar_w
        colour = _BLUE if value == 0 else (_ORANGE if value > 0 else _GREY)
        if count:
            body.append(
                f'<rect x="{bx + 1:.1f}" y="{top + plot_h - bh:.1f}" width="{bar_w - 2:.1f}" '
                f'height="{bh:.1f}" fill="{colour}"><title>{_esc(_diff_label(value))}: '
                f"{count}</title></rect>"
            )
        if index % label_every == 0 or value == 0:
            body.append(
                _text(
                    bx + bar_w / 2, top + plot_h + 12, _diff_label(value), anchor="middle", size=9
                )
            )
    body.append(
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        f'stroke="#57606a"/>'
    )
    body.append(
        _text(left + plot_w / 2, height - 6, "judge - human median", anchor="middle", size=9)
    )
    return _figure(
        "diff-hist",
        _svg(width, height, body, f"Differences judge minus human median for {attribute}"),
        f"{attribute}: judge minus physicians' median (positive: judge higher).",
        width,
    )


def cost_agreement_scatter(comparison: Comparison) -> str | None:
    """Scatter of pooled ICC(3,k) (with CI) against cost per item, one point per run."""
    points = [
        r for r in comparison.rows if r["icc3k"] is not None and r["cost_per_item_usd"] is not None
    ]
    if not points:
        return None
    left, right, top, bottom = 60, 150, 20, 44
    plot_w, plot_h = 420, 260
    width, height = left + plot_w + right, top + plot_h + bottom
    costs = [r["cost_per_item_usd"] for r in points]
    c_lo, c_hi = 0.0, max(costs)
    if c_hi <= c_lo:
        c_hi = c_lo + 0.001
    c_hi *= 1.1
    values = [r["icc3k"] for r in points]
    values += [
        r["icc3k_ci95"][0] for r in points if r["icc3k_ci95"] and r["icc3k_ci95"][0] is not None
    ]
    y_lo = min(0.0, math.floor(min(values) * 10) / 10)
    y_hi = 1.0

    def px(v: float) -> float:
        pad = 0.05 * plot_w  # keep points off the frame
        return left + pad + (v - c_lo) / (c_hi - c_lo) * (plot_w - 2 * pad)

    def py(v: float) -> float:
        v = min(max(v, y_lo), y_hi)
        return top + plot_h - (v - y_lo) / (y_hi - y_lo) * plot_h

    body = [
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
        f'stroke="#d0d7de"/>',
    ]
    for tick in _nice_ticks(y_lo, y_hi):
        body.append(
            f'<line x1="{left}" y1="{py(tick):.1f}" x2="{left + plot_w}" y2="{py(tick):.1f}" '
            f'stroke="#eaeef2"/>'
        )
        body.append(_text(left - 6, py(tick) + 3, f"{tick:g}", anchor="end", size=10))
    for tick in _nice_ticks(c_lo, c_hi, 4):
        body.append(_text(px(tick), top + plot_h + 14, f"${tick:g}", anchor="middle", size=10))
    body.append(
        _text(left + plot_w / 2, height - 6, "cost per item (USD)", anchor="middle", size=11)
    )
    body.append(
        f'<text x="14" y="{top + plot_h / 2:.1f}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + plot_h / 2:.1f})">pooled ICC(3,k)</text>'
    )
    centres = [(px(r["cost_per_item_usd"]), py(r["icc3k"])) for r in points]
    for r, (cx, _) in zip(points, centres, strict=True):
        ci = r["icc3k_ci95"]
        if ci and ci[0] is not None and ci[1] is not None:
            body.append(
                f'<line x1="{cx:.1f}" y1="{py(ci[0]):.1f}" x2="{cx:.1f}" y2="{py(ci[1]):.1f}" '
                f'stroke="{_BLUE}" stroke-width="1.5"/>'
            )
    for r, (cx, cy) in zip(points, centres, strict=True):
        fill = "#fff" if r["simulated"] else _RED
        body.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{fill}" stroke="{_RED}" '
            f'stroke-width="2"><title>{_esc(_config_label(r))}</title></circle>'
        )
    labels = []
    for r in points:
        label = _config_label(r)
        label = label if len(label) <= 22 else label[:21] + "..."
        labels.append(label + (" (sim.)" if r["simulated"] else ""))
    placed = place_labels(centres, labels, (0.0, 0.0, float(width), float(top + plot_h)))
    if placed is None:  # too crowded: number the points and list them in a legend below
        numbers = [str(i + 1) for i in range(len(points))]
        placed = place_labels(centres, numbers, (0.0, 0.0, float(width), float(top + plot_h)))
        legend_top = height + 4
        height += 16 * len(points) + 8
        for index, label in enumerate(labels):
            body.append(_text(left, legend_top + 12 + 16 * index, f"{index + 1}  {label}", size=10))
        labels = numbers
        body[0] = f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>'
    for label, (cx, cy), spot in zip(labels, centres, placed or [], strict=False):
        body.extend(_label_svg(label, cx, cy, spot))
    return _figure(
        "cost-agreement",
        _svg(width, height, body, "Pooled ICC(3,k) against cost per item"),
        "Agreement (pooled ICC(3,k), judge vs human median, with 95% CI) against mean cost per "
        "item; hollow points are simulated runs.",
        width,
    )


_LABEL_SIZE = 10
_POINT_R = 6.0
_DIRECTIONS = ((1, 0), (-1, 0), (1, -1), (1, 1), (-1, -1), (-1, 1), (0, -1), (0, 1))


@dataclass(frozen=True)
class LabelSpot:
    """Where a point's label goes: text anchor point, alignment, and whether a leader line
    joins it to its point."""

    x: float
    y: float
    anchor: str
    leader: bool
    box: tuple[float, float, float, float]


def text_width(text: str, size: float = _LABEL_SIZE) -> float:
    """A generous estimate of rendered text width (sans-serif, average glyph ~0.62 em)."""
    return 0.62 * size * len(text) + 2


def _overlaps(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _spot(cx: float, cy: float, dx: int, dy: int, radius: float, text: str) -> LabelSpot:
    width, size = text_width(text), _LABEL_SIZE
    x = cx + dx * radius
    baseline = cy + dy * radius + size * 0.35
    anchor = "start" if dx > 0 else "end" if dx < 0 else "middle"
    x0 = x if dx > 0 else x - width if dx < 0 else x - width / 2
    box = (x0 - 1, baseline - size * 0.95, x0 + width + 1, baseline + size * 0.3)
    return LabelSpot(x, baseline, anchor, radius > _POINT_R + 4, box)


def place_labels(
    points: Sequence[tuple[float, float]],
    labels: Sequence[str],
    bounds: tuple[float, float, float, float],
) -> list[LabelSpot] | None:
    """Greedy label placement: beside each point if free, else further out with a leader line,
    never over another label or point and inside ``bounds``; None when some label finds no
    place (the caller then numbers the points and adds a legend).

    Args:
        points: Point centres.
        labels: One label per point.
        bounds: x0, y0, x1, y1 of the area labels may use.
    """
    taken = [(x - _POINT_R, y - _POINT_R, x + _POINT_R, y + _POINT_R) for x, y in points]
    spots = []
    for (cx, cy), text in zip(points, labels, strict=True):
        chosen = None
        for radius in (8.0, 22.0, 38.0, 56.0, 76.0):
            for dx, dy in _DIRECTIONS:
                spot = _spot(cx, cy, dx, dy, radius, text)
                b = spot.box
                inside = (b[0] >= bounds[0] and b[1] >= bounds[1] and b[2] <= bounds[2]) and b[
                    3
                ] <= bounds[3]
                if inside and not any(_overlaps(b, t) for t in taken):
                    chosen = spot
                    break
            if chosen:
                break
        if chosen is None:
            return None
        taken.append(chosen.box)
        spots.append(chosen)
    return spots


def _label_svg(text: str, cx: float, cy: float, spot: LabelSpot) -> list[str]:
    parts = []
    if spot.leader:
        box = spot.box
        lx = min(max(cx, box[0]), box[2])
        ly = min(max(cy, box[1]), box[3])
        parts.append(
            f'<line class="leader" x1="{cx:.1f}" y1="{cy:.1f}" x2="{lx:.1f}" y2="{ly:.1f}" '
            f'stroke="{_GREY}" stroke-width="0.8"/>'
        )
    parts.append(_text(spot.x, spot.y, text, anchor=spot.anchor, size=_LABEL_SIZE, class_="label"))
    return parts


def _figure(kind: str, svg: str, caption: str, width: int | None = None) -> str:
    # No style attribute: the page's CSP allows only the hashed style block; the figure is
    # as wide as its chart (width: min-content), so the caption wraps under it.
    del width
    return (
        f'<figure class="chart" data-chart="{kind}">{svg}'
        f"<figcaption>{_esc(caption)}</figcaption></figure>"
    )


# ---------------------------------------------------------------------------------------------
# Documents


def _banner(simulated: list[str]) -> str:
    which = ", ".join(simulated)
    return (
        f'<div class="banner" role="alert"><span class="big">SIMULATED</span>'
        f"{_esc(SIMULATED_TEXT)} Simulated run(s): {_esc(which)}.</div>"
    )


def _run_summary_table(summary: dict[str, Any]) -> _Table:
    keys = [
        ("status", summary["status"]),
        ("mode", summary["mode"]),
        ("rubric", summary["rubric"]),
        ("models", ", ".join(f"{k}: {v}" for k, v in (summary["models"] or {}).items())),
        ("items", summary["items"]),
        ("samples per item", summary["samples_per_item"]),
        ("items ok / failed", f"{summary.get('items_ok')} / {summary.get('items_failed')}"),
        (
            "samples ok / failed",
            f"{summary.get('samples_ok')} / {summary.get('samples_failed')}",
        ),
        ("calls", summary.get("calls")),
        ("tokens in / out", f"{summary.get('tokens_in')} / {summary.get('tokens_out')}"),
        ("cost", fmt_usd(summary.get("cost_usd"))),
        (
            "item latency p50 / p95",
            f"{fmt_seconds(summary.get('item_latency_p50_s'))} / "
            f"{fmt_seconds(summary.get('item_latency_p95_s'))}",
        ),
        ("created", summary["created_at"][:19]),
    ]
    return _Table(["what", "value"], [[k, "-" if v is None else str(v)] for k, v in keys], left=2)


@dataclass
class _Doc:
    html: list[str]
    md: list[str]

    def heading(self, level: int, text: str) -> None:
        self.html.append(f"<h{level}>{_esc(text)}</h{level}>")
        self.md.append(f"{'#' * level} {md_text(text)}\n")

    def para(self, text: str, css: str = "") -> None:
        attr = f' class="{css}"' if css else ""
        self.html.append(f"<p{attr}>{_esc(text)}</p>")
        self.md.append(f"{md_text(text)}\n")

    def table(self, table: _Table) -> None:
        self.html.append(table.to_html())
        self.md.append(table.to_markdown() + "\n")

    def notes(self, notes: list[str]) -> None:
        if not notes:
            return
        notes = [plain_note(n) for n in notes]
        self.html.append(
            '<ul class="notes">' + "".join(f"<li>{_esc(n)}</li>" for n in notes) + "</ul>"
        )
        self.md.append("\n".join(f"- {md_text(n)}" for n in notes) + "\n")


# ---------------------------------------------------------------------------------------------
# Scores without ratings: distributions, DocLens claim metrics, failures, flags, items

DEFAULT_MAX_ITEMS = 200
"""Rows of the per-item table in a report; the counts above it always cover every item."""


def fmt_score(value: float | None, scale: str) -> str:
    """A final score: proportions with three decimals, Likert and binary as they are."""
    if value is None:
        return "-"
    return f"{value:.3f}" if scale == "proportion" else f"{value:g}"


def _bins(dist: dict[str, Any]) -> list[tuple[str, int, str]]:
    """(label, count, tooltip) per bar: tenths for proportions, each value for scales."""
    counts = dist["counts"]
    if dist["scale"] == "proportion":
        tenths = [0] * 10
        for value, n in counts.items():
            tenths[min(max(int(value * 10 + 1e-9), 0), 9)] += n
        return [
            ("0" if i == 0 else f".{i}", n, f"{i / 10:.1f}-{(i + 1) / 10:.1f}: {n}")
            for i, n in enumerate(tenths)
        ]
    domain = sorted({float(v) for v in range(dist["min"], dist["max"] + 1)} | set(counts))
    return [(f"{v:g}", counts.get(v, 0), f"{v:g}: {counts.get(v, 0)}") for v in domain]


def score_histogram(dist: dict[str, Any]) -> str:
    """Bar chart of one attribute's final scores over the run's items."""
    bars = _bins(dist)
    peak = max((n for _, n, _ in bars), default=0) or 1
    left, right, top, bottom = 34, 12, 24, 34
    plot_w, plot_h = 234, 100
    bar_w = min(30.0, plot_w / max(1, len(bars)))
    offset = (plot_w - bar_w * len(bars)) / 2
    width, height = left + plot_w + right, top + plot_h + bottom
    body = [
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
        _text(left, 15, f"{dist['key']} (n = {dist['n']})", size=12, font_weight="700"),
    ]
    for tick in _nice_ticks(0, peak, 3, integer=True):
        ty = top + plot_h - tick / peak * plot_h
        body.append(
            f'<line x1="{left}" y1="{ty:.1f}" x2="{left + plot_w}" y2="{ty:.1f}" stroke="#eaeef2"/>'
        )
        body.append(_text(left - 4, ty + 3, f"{tick:g}", anchor="end", size=9))
    for index, (label, count, tip) in enumerate(bars):
        bx = left + offset + index * bar_w
        bh = count / peak * plot_h
        if count:
            body.append(
                f'<rect class="bar" x="{bx + 1:.1f}" y="{top + plot_h - bh:.1f}" '
                f'width="{bar_w - 2:.1f}" height="{bh:.1f}" fill="{_BLUE}">'
                f"<title>{_esc(tip)}</title></rect>"
            )
        body.append(_text(bx + bar_w / 2, top + plot_h + 12, label, anchor="middle", size=9))
    body.append(
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        f'stroke="#57606a"/>'
    )
    axis = "score (tenths; the last bin holds 1)" if dist["scale"] == "proportion" else "score"
    body.append(_text(left + plot_w / 2, height - 6, axis, anchor="middle", size=9))
    caption = f"{dist['name']} ({dist['key']}): final scores of {dist['n']} item(s)"
    if dist["mean"] is not None:
        caption += f", mean {dist['mean']:.2f}, median {fmt_score(dist['median'], dist['scale'])}"
    extra = []
    if dist["null"]:
        extra.append(f"{dist['null']} without a number (not applicable)")
    if dist["failed"]:
        extra.append(f"{dist['failed']} failed")
    caption += (" (" + ", ".join(extra) + ")" if extra else "") + "."
    return _figure(
        "score-dist",
        _svg(width, height, body, f"Distribution of final {dist['key']} scores"),
        caption,
    )


def distribution_table(dists: Sequence[dict[str, Any]]) -> _Table:
    """Per attribute: items with a number, mean, median, not applicable, failed, counts."""
    rows = []
    for d in dists:
        counts = ", ".join(f"{label}: {n}" for label, n, _ in _bins(d))
        rows.append(
            [
                d["key"],
                d["scale"],
                str(d["n"]),
                fmt_num(d["mean"], 2),
                fmt_score(d["median"], d["scale"]),
                str(d["null"]),
                str(d["failed"]),
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


def _tally_cell(row: dict[str, Any], hits: str, total: str, failed: str | None) -> str:
    text = f"{row.get(hits, 0)}/{row.get(total, 0)}"
    if failed and row.get(failed):
        text += f" ({row[failed]} failed)"
    return text


def doclens_section_table(report: dict[str, Any]) -> _Table:
    """DocLens pooled (micro) scores per section and total, and the per-instance mean."""
    rows, classes = [], []
    for r in report["pooled"]:
        rows.append(
            [
                str(r["section"]),
                str(r["items"]),
                *(fmt_num(r[m]) for m in DOCLENS_METRICS),
                *(_tally_cell(r, *parts) for parts in _DOCLENS_COUNTS),
                str(r["extraction_failed"]),
            ]
        )
        classes.append("pooled" if r["section"] == "total" else "")
    macro = report["macro"]
    rows.append(["mean per instance", "", *(fmt_num(macro[m]) for m in DOCLENS_METRICS)])
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


def flag_rule_table(items: dict[str, Any]) -> _Table:
    """Items flagged per rule, and items whose text addresses the judge."""
    rows = [[rule, str(n)] for rule, n in items["rule_counts"].items()]
    rows.append(["text addresses the judge (items.flags)", str(items["injected"])])
    rows.append(["any of these", str(items["flagged"])])
    classes = [""] * (len(rows) - 1) + ["pooled"]
    return _Table(["flag", "items"], rows, left=1, classes=classes, name="flag-rules")


def item_table(
    items: dict[str, Any],
    dists: Sequence[dict[str, Any]],
    tallies: dict[str, dict[str, Any]] | None = None,
) -> _Table:
    """The per-item table: final scores, status, failure reason, flags, start of the text."""
    rows_in = items["rows"]
    lead = ["item"]
    if any(r["vendor"] for r in rows_in):
        lead.append("vendor")
    if any(r["section"] for r in rows_in):
        lead.append("section")
    lead.append("status")
    counts = ["ref. claims", "output claims", "statements", "citations"] if tallies else []
    header = [*lead, *(d["key"] for d in dists), *counts, "failure reason", "flags", "text"]
    rows, classes = [], []
    for r in rows_in:
        cells = [r["item_id"]]
        cells += [r["vendor"] or ""] if "vendor" in lead else []
        cells += [r["section"] or ""] if "section" in lead else []
        cells.append(r["status"])
        cells += [fmt_score(r["values"].get(d["key"]), d["scale"]) for d in dists]
        if tallies is not None:
            mine = tallies.get(r["item_id"], {})
            cells += [_tally_cell(mine, *parts) for parts in _DOCLENS_COUNTS]
        excerpt = r["excerpt"] or ""
        if (r["text_chars"] or 0) > len(excerpt):
            excerpt += " ..."
        cells += [r["reason"], "; ".join(r["flags"]), excerpt]
        rows.append(cells)
        classes.append("bad" if r["status"] != "ok" else "flag" if r["flags"] else "")
    n = len(header)
    return _Table(
        header,
        rows,
        left=len(lead),
        classes=classes,
        wrap=frozenset({n - 3, n - 2, n - 1}),
        name="items",
        tall=True,
    )


def _items_caption(items: dict[str, Any], run_id: str) -> str:
    text = (
        f"{items['total']} item(s): {items['failed']} failed, {items['unjudged']} not judged, "
        f"{items['partial']} with some failed samples, {items['flagged']} flagged."
    )
    shown = len(items["rows"])
    if shown < items["total"]:
        text += (
            f" Showing {shown} of {items['total']} items: failed, not judged and flagged items "
            f"first, then the rest in input order. `judge export {run_id} --out FILE` writes "
            "every item's scores."
        )
    else:
        text += " Failed, not judged and flagged items come first, then input order."
    return text


def _parse_rules(rubric: Rubric, texts: Sequence[str] | None) -> list[Any]:
    # Imported here: the audit module builds its report from this one.
    from clinjudge.runs._audit import default_flag_rules, parse_flag_rule

    wanted = default_flag_rules(rubric) if texts is None else list(texts)
    return [parse_flag_rule(text, rubric) for text in wanted]


def _scores_section(
    doc: _Doc,
    store: RunStore,
    run_id: str,
    *,
    flag_rules: Sequence[str] | None,
    max_items: int | None,
    full: bool,
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
        doc.html.extend(score_histogram(d) for d in dists if d["n"])
        doc.html.append("</div>")
    claims = doclens_report(store, run_id)
    if claims is not None:
        doc.heading(3, "DocLens claim metrics per section (pooled)")
        doc.table(doclens_section_table(claims))
        doc.para(
            "Pooled (micro) scores as DocLens reports them: entailed claims over all claims of "
            "all items in the section (failed verdicts count as not entailed). The last row is "
            "the mean of the per-instance scores, for comparison.",
            "note",
        )
    if not full:
        return
    rules = _parse_rules(rubric, flag_rules)
    items = item_scores(store, run_id, rules, limit=max_items)
    doc.heading(3, "Failures by reason")
    failures = failures_by_reason(store, run_id)
    if failures or items["unjudged"]:
        doc.table(failures_table(failures, items["unjudged"]))
    else:
        doc.para("No sample failed.", "note")
    doc.heading(3, "Flags")
    doc.table(flag_rule_table(items))
    doc.heading(3, "Items")
    doc.para(_items_caption(items, run_id), "meta")
    ids = [r["item_id"] for r in items["rows"]]
    tallies = instance_tallies(store, run_id, ids) if claims is not None else None
    doc.table(item_table(items, dists, tallies))
    if tallies is not None:
        doc.para(
            "Claim counts are entailed/total over the item's samples; its scores are the "
            "median over samples.",
            "note",
        )


@dataclass(frozen=True)
class _ScoreOptions:
    flag_rules: Sequence[str] | None
    max_items: int | None
    full: bool


def _run_section(
    doc: _Doc,
    store: RunStore,
    row: dict[str, Any],
    agreement: dict[str, Any] | None,
    reason: str | None,
    options: _ScoreOptions,
) -> None:
    title = f"Run {row['run_id']}" + (f" ({row['name']})" if row["name"] else "")
    doc.heading(2, title)
    sim = " SIMULATED (mock provider)." if row["simulated"] else ""
    doc.para(
        f"{row['rubric']}, mode {row['mode']}, model {row['model']}, {row['shots']} shot(s), "
        f"{row['samples']} sample(s) per item.{sim}",
        "meta",
    )
    _scores_section(
        doc,
        store,
        row["run_id"],
        flag_rules=options.flag_rules,
        max_items=options.max_items,
        full=options.full,
    )
    doc.heading(3, "Agreement with physicians")
    if agreement is None:
        doc.para(f"Agreement not computed: {reason}", "note")
        return
    doc.para(
        f"{agreement['n_items_rated']} of {agreement['n_items_run']} items rated by "
        f"{len(agreement['raters'])} physician(s) ({', '.join(agreement['raters'])}); the "
        "judge's value is its final score (median of its valid samples).",
        "meta",
    )
    doc.table(attribute_table(agreement))
    doc.para(
        "ICC(3,k), alpha and AC2 compare the judge with the physicians' median; median diff "
        "and IQR are of judge minus human median; Wilcoxon p uses zero_method 'wilcox' "
        "(zero differences dropped). Raters' ICC(3,k) is the physicians among themselves.",
        "note",
    )
    doc.html.append('<div class="charts">')
    doc.html.append(icc_chart(agreement))
    doc.html.append("</div>")
    doc.heading(3, "Judge in place of a physician, and as an extra rater (pooled)")
    doc.table(substitution_table(agreement))
    doc.heading(3, "Differences, judge minus human median")
    doc.html.append('<div class="charts">')
    for attribute, block in agreement["per_attribute"].items():
        if block.get("differences"):
            doc.html.append(difference_histogram(attribute, block))
    doc.html.append("</div>")
    doc.md.append("Counts per difference (the histograms in report.html):\n")
    doc.md.append(difference_table(agreement).to_markdown() + "\n")
    doc.heading(3, "Notes")
    doc.notes(agreement.get("notes") or [])


def render_report(
    store: RunStore,
    comparison: Comparison,
    *,
    compare: bool,
    flag_rules: Sequence[str] | None = None,
    max_items: int | None = DEFAULT_MAX_ITEMS,
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
    """
    options = _ScoreOptions(flag_rules, max_items, full=not compare)
    rows = comparison.rows
    simulated = [r["run_id"] for r in rows if r["simulated"]]
    if compare:
        title = f"clinjudge comparison of {len(rows)} run(s)"
    else:
        title = f"clinjudge report: run {rows[0]['run_id']}"
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
        summary = run_summary(store, rows[0]["run_id"])
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
    # "agreement not computed" notes are said again in each run's section; keep the rest.
    doc.notes([n for n in comparison.notes if not _is_run_error(n, comparison.errors)])
    for row in rows:
        agreement = comparison.agreements.get(row["run_id"])
        error = comparison.errors.get(row["run_id"])
        _run_section(doc, store, row, agreement, error, options)
    return html_page(title, doc.html), "\n".join(doc.md)


def _is_run_error(note: str, errors: dict[str, str]) -> bool:
    return any(note == f"{rid}: agreement not computed: {err}" for rid, err in errors.items())


def html_page(title: str, body: Sequence[str]) -> str:
    """A complete report page: our CSS inline, a Content-Security-Policy that allows no script
    and nothing fetched, and ``body`` (already escaped HTML fragments).

    Args:
        title: Page title (escaped here).
        body: HTML fragments, joined by newlines.
    """
    style_hash = base64.b64encode(hashlib.sha256(_CSS.encode("utf-8")).digest()).decode()
    policy = CSP.format(style_hash=style_hash)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_esc(policy)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def _write(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


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
) -> ReportFiles:
    """Write ``report.html`` and ``report.md`` for one run or a comparison of runs.

    Args:
        store: The run store.
        run_ids: Run ids or unique prefixes (exactly one unless ``compare``).
        out_dir: Directory to write into (created if absent).
        compare: Comparison report across runs.
        n_boot: Bootstrap resamples of the agreement analysis.
        seed: Bootstrap seed.
        flag_rules: Flag rules such as ``accurate<=2`` (default: the audit defaults that apply
            to each run's rubric).
        max_items: Most rows of each run's per-item table (None: every item).
    """
    if not run_ids:
        raise ValueError("name at least one run")
    if not compare and len(run_ids) != 1:
        raise ValueError("a run report takes one run; use compare for several")
    comparison = compare_runs(store, run_ids, n_boot=n_boot, seed=seed)
    html_text, markdown = render_report(
        store, comparison, compare=compare, flag_rules=flag_rules, max_items=max_items
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(out / "report.html", out / "report.md")
    _write(files.html, html_text)
    _write(files.markdown, markdown)
    return files
