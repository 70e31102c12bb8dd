"""Jinja2 templates of the viewer (autoescaped) and the formatting filters they use."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader, Undefined, select_autoescape

from clinjudge._util.version import __version__
from clinjudge.reports._viewer_svg import heat_bar, histogram, score_colour

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; base-uri 'none'"
)
"""Content-Security-Policy of every page: our own script and stylesheet files only."""

CSP_HEADER = CSP + "; frame-ancestors 'none'"
"""The HTTP header form (``frame-ancestors`` is not allowed in a ``<meta>`` policy)."""


def fmt_num(value: Any, digits: int = 2) -> str:
    """A number for a table cell: integers plain, others rounded; blank when missing."""
    if isinstance(value, Undefined):
        return ""
    if value is None or isinstance(value, bool):
        return "" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:g}" if value.is_integer() else f"{value:.{digits}f}"
    return str(value)


def fmt_usd(value: Any) -> str:
    """Dollars with enough digits for tiny per-call costs."""
    if value is None or isinstance(value, Undefined):
        return ""
    return f"${value:,.4f}" if value < 100 else f"${value:,.2f}"


def fmt_seconds(value: Any) -> str:
    """Seconds as s or ms."""
    if value is None or isinstance(value, Undefined):
        return ""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def fmt_json(value: Any) -> str:
    """Indented JSON for settings and metadata."""
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def fmt_estimate(value: Any, digits: int = 2) -> str:
    """An estimate or a bound of its interval, always with ``digits`` decimals (``num`` prints an
    integral value as ``4``): the audit page reads as `judge audit` and report.md do (#39).

    Args:
        value: A number, or None (``-``).
        digits: Decimals.
    """
    if value is None or isinstance(value, bool) or not math.isfinite(float(value)):
        return "-"
    return f"{float(value):.{digits}f}"


@lru_cache(maxsize=1)
def environment() -> Environment:
    """The template environment (autoescape on for every template)."""
    env = Environment(
        loader=PackageLoader("clinjudge.reports", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        num=fmt_num, est=fmt_estimate, usd=fmt_usd, secs=fmt_seconds, tojson_pretty=fmt_json
    )
    env.globals.update(
        version=__version__,
        csp=CSP,
        histogram=histogram,
        heat_bar=heat_bar,
        score_colour=score_colour,
    )
    return env


def render(template: str, **context: Any) -> str:
    """Render one page template.

    Args:
        template: File name under ``templates/``.
        context: Template variables; ``links`` (a :class:`Links`) is required.
    """
    return environment().get_template(template).render(**context)
