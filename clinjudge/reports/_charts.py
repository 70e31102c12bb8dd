"""The reports' charts, drawn as inline SVG: the ICC forest plot, difference histograms and
the agreement-against-cost scatter (labels placed apart, with leader lines or a legend)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clinjudge.analysis import (
    AgreementAnalysis,
    AttributeAgreement,
    Comparison,
    ComparisonRow,
    block_summary,
)
from clinjudge.reports._document import _esc, fmt_ci

_BLUE, _RED, _GREY, _ORANGE = "#1f6feb", "#b42318", "#8c959f", "#d97706"


def _config_label(row: ComparisonRow) -> str:
    return row.name or row.run_id


def _diff_label(value: float) -> str:
    return f"{value:+g}" if value else "0"


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


def icc_chart(agreement: AgreementAnalysis) -> str:
    """Forest plot: ICC(3,k) of judge vs human median with 95% CI, per attribute and pooled."""
    entries = []
    for name, block in agreement.blocks():
        s = block_summary(block)
        if s.binary:
            continue
        entries.append((name, s.icc3k, s.icc3k_ci95))
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


def _block_differences(block: AttributeAgreement) -> dict[str, int]:
    judged = block.judge_vs_physicians
    return judged.differences if judged else {}


def _diff_domain(attribute_block: AttributeAgreement) -> list[float]:
    cats = [float(c) for c in attribute_block.categories]
    keys = [float(k) for k in _block_differences(attribute_block)]
    span = (max(cats) - min(cats)) if len(cats) >= 2 else max((abs(k) for k in keys), default=1)
    half = any(not float(k).is_integer() for k in keys)
    step = 0.5 if half else 1.0
    n = int(round(span / step))
    domain = [round(i * step, 9) for i in range(-n, n + 1)]
    return sorted(set(domain) | set(keys))


@dataclass(frozen=True)
class Bar:
    """One bar of a bar chart: its tick label (None: unlabelled), height, tooltip and colour."""

    label: str | None
    count: int
    tip: str
    colour: str = _BLUE


def bar_chart_body(
    title: str, bars: Sequence[Bar], axis: str, *, plot_h: int, bar_class: str | None = None
) -> tuple[list[str], int, int]:
    """SVG elements of a small bar chart (title, grid, bars, axis), with its width and height.

    Args:
        title: Text above the plot (escaped here).
        bars: The bars, left to right.
        axis: Label under the x axis.
        plot_h: Height of the plotting area.
        bar_class: CSS class of the bars' rectangles, if any.
    """
    peak = max((bar.count for bar in bars), default=0) or 1
    left, right, top, bottom = 34, 12, 24, 34
    plot_w = 234
    bar_w = min(30.0, plot_w / max(1, len(bars)))
    offset = (plot_w - bar_w * len(bars)) / 2
    width, height = left + plot_w + right, top + plot_h + bottom
    body = [
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
        _text(left, 15, title, size=12, font_weight="700"),
    ]
    for tick in _nice_ticks(0, peak, 3, integer=True):
        ty = top + plot_h - tick / peak * plot_h
        body.append(
            f'<line x1="{left}" y1="{ty:.1f}" x2="{left + plot_w}" y2="{ty:.1f}" stroke="#eaeef2"/>'
        )
        body.append(_text(left - 4, ty + 3, f"{tick:g}", anchor="end", size=9))
    css = f'class="{bar_class}" ' if bar_class else ""
    for index, bar in enumerate(bars):
        bx = left + offset + index * bar_w
        bh = bar.count / peak * plot_h
        if bar.count:
            body.append(
                f'<rect {css}x="{bx + 1:.1f}" y="{top + plot_h - bh:.1f}" '
                f'width="{bar_w - 2:.1f}" height="{bh:.1f}" fill="{bar.colour}">'
                f"<title>{_esc(bar.tip)}</title></rect>"
            )
        if bar.label is not None:
            body.append(
                _text(bx + bar_w / 2, top + plot_h + 12, bar.label, anchor="middle", size=9)
            )
    body.append(
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        f'stroke="#57606a"/>'
    )
    body.append(_text(left + plot_w / 2, height - 6, axis, anchor="middle", size=9))
    return body, width, height


def difference_histogram(attribute: str, block: AttributeAgreement) -> str:
    """Bar chart of judge-minus-human-median differences for one attribute."""
    counts = {float(k): int(v) for k, v in _block_differences(block).items()}
    domain = _diff_domain(block)
    label_every = 1 if len(domain) <= 11 else 2
    bars = [
        Bar(
            _diff_label(value) if index % label_every == 0 or value == 0 else None,
            counts.get(value, 0),
            f"{_diff_label(value)}: {counts.get(value, 0)}",
            _BLUE if value == 0 else (_ORANGE if value > 0 else _GREY),
        )
        for index, value in enumerate(domain)
    ]
    title = f"{attribute} (n = {sum(counts.values())})"
    body, width, height = bar_chart_body(title, bars, "judge - human median", plot_h=110)
    return _figure(
        "diff-hist",
        _svg(width, height, body, f"Differences judge minus human median for {attribute}"),
        f"{attribute}: judge minus physicians' median (positive: judge higher).",
        width,
    )


def cost_agreement_scatter(comparison: Comparison) -> str | None:
    """Scatter of pooled ICC(3,k) (with CI) against cost per item, one point per run."""
    points = [r for r in comparison.rows if r.icc3k is not None and r.cost_per_item_usd is not None]
    if not points:
        return None
    cost = {r.run_id: r.cost_per_item_usd or 0.0 for r in points}  # none is None here
    icc = {r.run_id: r.icc3k or 0.0 for r in points}
    left, right, top, bottom = 60, 150, 20, 44
    plot_w, plot_h = 420, 260
    width, height = left + plot_w + right, top + plot_h + bottom
    costs = list(cost.values())
    c_lo, c_hi = 0.0, max(costs)
    if c_hi <= c_lo:
        c_hi = c_lo + 0.001
    c_hi *= 1.1
    values = list(icc.values())
    values += [lo for r in points if r.icc3k_ci95 and (lo := r.icc3k_ci95[0]) is not None]
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
    centres = [(px(cost[r.run_id]), py(icc[r.run_id])) for r in points]
    for r, (cx, _) in zip(points, centres, strict=True):
        ci = r.icc3k_ci95
        if ci and ci[0] is not None and ci[1] is not None:
            body.append(
                f'<line x1="{cx:.1f}" y1="{py(ci[0]):.1f}" x2="{cx:.1f}" y2="{py(ci[1]):.1f}" '
                f'stroke="{_BLUE}" stroke-width="1.5"/>'
            )
    for r, (cx, cy) in zip(points, centres, strict=True):
        fill = "#fff" if r.simulated else _RED
        body.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{fill}" stroke="{_RED}" '
            f'stroke-width="2"><title>{_esc(_config_label(r))}</title></circle>'
        )
    labels = []
    for r in points:
        label = _config_label(r)
        label = label if len(label) <= 22 else label[:21] + "..."
        labels.append(label + (" (sim.)" if r.simulated else ""))
    area = (0.0, 0.0, float(width), float(top + plot_h))
    placed = place_labels(centres, labels, area)
    if None in placed:  # too crowded: number the points and list them in a legend below
        numbers = [str(i + 1) for i in range(len(points))]
        placed = place_labels(centres, numbers, area)
        legend_top = height + 4
        height += 16 * len(points) + 8
        for index, r in enumerate(points):
            full = _config_label(r) + (" (sim.)" if r.simulated else "")
            hidden = "" if placed[index] else " (its number did not fit beside the point)"
            body.append(
                _text(left, legend_top + 12 + 16 * index, f"{index + 1}  {full}{hidden}", size=10)
            )
        labels = numbers
        body[0] = f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>'
    for label, (cx, cy), spot in zip(labels, centres, placed, strict=True):
        if spot is not None:
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
) -> list[LabelSpot | None]:
    """Greedy label placement: beside each point if free, else further out with a leader line,
    never over another label or point and inside ``bounds``; None for a label that finds no
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
        if chosen is not None:
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
