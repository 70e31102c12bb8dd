"""Jinja2 templates of the rating pages (`judge rate serve`), autoescaped like the viewer's."""

from __future__ import annotations

from typing import Any

from clinjudge.reports._viewer_render import CSP, environment, fmt_num

RATE_CSP = CSP + "; connect-src 'self'"
"""The viewer's policy, and the page's own script may send saves back to the server (only)."""
RATE_CSP_HEADER = RATE_CSP + "; frame-ancestors 'none'"


def render(template: str, **context: Any) -> str:
    """Render one rating page.

    Args:
        template: File name under ``templates/`` (``rate_*.html``).
        context: Template variables.
    """
    # The viewer's environment: autoescape for every template, the same CSP in a <meta> too.
    return environment().get_template(template).render(csp=RATE_CSP, num=fmt_num, **context)
