"""Reports (HTML and Markdown, with server-drawn SVG charts) and the `judge view` web viewer over
the run store (SPEC §14).

The viewer is read-only: each page opens the DuckDB file read-only, runs paged queries and
closes it. Pages are Jinja2 templates with autoescaping, our own small CSS and script files and
server-drawn SVG; every response carries a Content-Security-Policy that forbids inline script.
``export_site`` writes the same pages as a static folder that opens from disk.

Names load on first use (#39): `judge agree` formats its numbers with the reports' helpers and
must not pay for the web viewer (Starlette, Jinja2, asyncio) to do so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clinjudge._util.lazy_module import lazy_exports

if TYPE_CHECKING:
    from clinjudge.reports._agreement_report import comparison_cells, write_report
    from clinjudge.reports._audit_report import write_audit_report
    from clinjudge.reports._document import fmt_num
    from clinjudge.reports._probe_section import (
        PROBE_NOTE,
        probe_row_label,
        probe_runs,
        probe_share_text,
        probe_verdict_text,
    )
    from clinjudge.reports._rating_app import (
        RatingDesk,
        RatingServer,
        create_rating_app,
        issue_link,
        revoke_links,
    )
    from clinjudge.reports._scores_section import DEFAULT_MAX_ITEMS
    from clinjudge.reports._statistic_cells import (
        column_cells,
        column_headers,
        statistic_cells,
    )
    from clinjudge.reports._viewer_app import ViewerServer, create_app, is_loopback
    from clinjudge.reports._viewer_export import ExportError, FolderNotEmpty, export_site
    from clinjudge.reports._viewer_pages import PageNotFound, Viewer
    from clinjudge.reports._viewer_store import DatabaseBusy, DatabaseMissing

_LAZY = {
    "comparison_cells": "_agreement_report",
    "write_report": "_agreement_report",
    "write_audit_report": "_audit_report",
    "fmt_num": "_document",
    "PROBE_NOTE": "_probe_section",
    "probe_row_label": "_probe_section",
    "probe_runs": "_probe_section",
    "probe_share_text": "_probe_section",
    "probe_verdict_text": "_probe_section",
    "RatingDesk": "_rating_app",
    "RatingServer": "_rating_app",
    "create_rating_app": "_rating_app",
    "issue_link": "_rating_app",
    "revoke_links": "_rating_app",
    "DEFAULT_MAX_ITEMS": "_scores_section",
    "column_cells": "_statistic_cells",
    "column_headers": "_statistic_cells",
    "statistic_cells": "_statistic_cells",
    "ViewerServer": "_viewer_app",
    "create_app": "_viewer_app",
    "is_loopback": "_viewer_app",
    "ExportError": "_viewer_export",
    "FolderNotEmpty": "_viewer_export",
    "export_site": "_viewer_export",
    "PageNotFound": "_viewer_pages",
    "Viewer": "_viewer_pages",
    "DatabaseBusy": "_viewer_store",
    "DatabaseMissing": "_viewer_store",
}
"""Each exported name to the private module that defines it."""

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "PROBE_NOTE",
    "DatabaseBusy",
    "DatabaseMissing",
    "ExportError",
    "FolderNotEmpty",
    "PageNotFound",
    "RatingDesk",
    "RatingServer",
    "create_rating_app",
    "issue_link",
    "revoke_links",
    "Viewer",
    "ViewerServer",
    "column_cells",
    "column_headers",
    "comparison_cells",
    "create_app",
    "export_site",
    "fmt_num",
    "is_loopback",
    "probe_row_label",
    "probe_runs",
    "probe_share_text",
    "probe_verdict_text",
    "statistic_cells",
    "write_audit_report",
    "write_report",
]

__getattr__ = lazy_exports(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return sorted(__all__)
