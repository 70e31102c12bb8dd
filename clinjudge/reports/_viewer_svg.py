"""Small inline SVG charts drawn on the server: histograms, heat bars and forest plots.

Every label is escaped here, and colours are SVG attributes rather than inline CSS, so the
charts pass a Content-Security-Policy that forbids inline styles and scripts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from markupsafe import Markup


def _text(x: float, y: float, label: str, anchor: str = "middle", size: int = 11) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}">'
        f"{escape(str(label))}</text>"
    )


def _svg(width: int, height: int, body: list[str], title: str) -> Markup:
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>{''.join(body)}</svg>"
    )


def histogram(bins: Sequence[tuple[str, int]], title: str, width: int = 220) -> Markup:
    """Bars of counts with the bin labels below and counts above.

    Args:
        bins: (label, count) per bin, in axis order.
        title: Accessible title.
        width: Width in pixels.
    """
    height, top, bottom = 120, 16, 20
    plot = height - top - bottom
    peak = max((n for _, n in bins), default=0) or 1
    step = (width - 10) / max(len(bins), 1)
    body = [
        f'<line x1="5" y1="{height - bottom}" x2="{width - 5}" y2="{height - bottom}" '
        'stroke="#8c959f"/>'
    ]
    for index, (label, count) in enumerate(bins):
        bar = plot * count / peak
        x = 5 + index * step
        body.append(
            f'<rect x="{x + step * 0.12:.1f}" y="{height - bottom - bar:.1f}" '
            f'width="{step * 0.76:.1f}" height="{bar:.1f}" fill="#4f7cac"/>'
        )
        if count:
            body.append(_text(x + step / 2, height - bottom - bar - 3, str(count), size=10))
        if len(bins) <= 12 or index % 2 == 0:
            body.append(_text(x + step / 2, height - 6, label, size=10))
    return _svg(width, height, body, title)


def score_colour(score: float | None) -> str:
    """Red (0) through amber to green (1); grey when unscored."""
    if score is None or math.isnan(score):
        return "#afb8c1"
    score = min(max(score, 0.0), 1.0)
    if score < 0.5:
        red, green = 207, int(60 + 2 * score * 150)
    else:
        red, green = int(207 - (score - 0.5) * 2 * 160), 160
    return f"#{red:02x}{green:02x}40"


def heat_bar(score: float | None, width: int = 160) -> Markup:
    """A bar whose length and colour show a probability in [0, 1]."""
    filled = 0.0 if score is None or math.isnan(score) else min(max(score, 0.0), 1.0) * width
    label = "unscored" if score is None else f"{score:.3f}"
    body = [
        f'<rect x="0" y="2" width="{width}" height="12" fill="#eaeef2"/>',
        f'<rect x="0" y="2" width="{filled:.1f}" height="12" fill="{score_colour(score)}"/>',
        f'<line x1="{width / 2}" y1="0" x2="{width / 2}" y2="16" stroke="#57606a" '
        'stroke-dasharray="2,2"/>',
    ]
    return _svg(width, 16, body, f"step score {label}")


def forest(
    rows: Sequence[tuple[str, float | None, float | None, float | None]],
    title: str,
    lo: float = -1.0,
    hi: float = 1.0,
) -> Markup:
    """Point estimates with 95% CIs, one row per label, on a shared axis clipped to [lo, hi].

    Args:
        rows: (label, value, ci low, ci high); missing values are drawn as "n/a".
        title: Accessible title.
        lo: Axis minimum (intervals beyond it are clipped and marked with an arrow).
        hi: Axis maximum.
    """
    label_w, plot_w, row_h = 150, 320, 20
    height = 30 + row_h * len(rows)
    width = label_w + plot_w + 60

    def x(v: float) -> float:
        return label_w + (min(max(v, lo), hi) - lo) / (hi - lo) * plot_w

    body = []
    for tick in sorted({lo, (lo + hi) / 2, hi, 0.0}):
        if lo <= tick <= hi:
            body.append(
                f'<line x1="{x(tick):.1f}" y1="10" x2="{x(tick):.1f}" '
                f'y2="{height - 16}" stroke="#d0d7de"/>'
            )
            body.append(_text(x(tick), height - 4, f"{tick:g}", size=10))
    for index, (label, value, ci_lo, ci_hi) in enumerate(rows):
        y = 20 + index * row_h
        body.append(_text(label_w - 6, y + 4, label, anchor="end"))
        if value is None:
            body.append(_text(label_w + 6, y + 4, "n/a", anchor="start"))
            continue
        if ci_lo is not None and ci_hi is not None:
            body.append(
                f'<line x1="{x(ci_lo):.1f}" y1="{y}" x2="{x(ci_hi):.1f}" y2="{y}" '
                'stroke="#24292f" stroke-width="1.5"/>'
            )
            if ci_lo < lo:
                body.append(_text(label_w - 1, y + 4, "\u25c0", anchor="start", size=8))
        body.append(f'<circle cx="{x(value):.1f}" cy="{y}" r="4" fill="#4f7cac"/>')
        body.append(_text(label_w + plot_w + 8, y + 4, f"{value:.2f}", anchor="start"))
    return _svg(width, height, body, title)
