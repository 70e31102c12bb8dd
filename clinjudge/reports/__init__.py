"""Reports (HTML and Markdown, with server-drawn SVG charts) and the `judge view` web viewer over
the run store (SPEC §14).

The viewer is read-only: each page opens the DuckDB file read-only, runs paged queries and
closes it. Pages are Jinja2 templates with autoescaping, our own small CSS and script files and
server-drawn SVG; every response carries a Content-Security-Policy that forbids inline script.
``export_site`` writes the same pages as a static folder that opens from disk.
"""

from clinjudge.reports._agreement_report import comparison_cells, write_report
from clinjudge.reports._audit_report import write_audit_report
from clinjudge.reports._document import fmt_ci, fmt_num, fmt_p
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
from clinjudge.reports._viewer_app import ViewerServer, create_app, is_loopback
from clinjudge.reports._viewer_export import ExportError, FolderNotEmpty, export_site
from clinjudge.reports._viewer_pages import PageNotFound, Viewer
from clinjudge.reports._viewer_store import DatabaseBusy, DatabaseMissing

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
    "comparison_cells",
    "create_app",
    "export_site",
    "fmt_ci",
    "fmt_num",
    "fmt_p",
    "is_loopback",
    "probe_row_label",
    "probe_runs",
    "probe_share_text",
    "probe_verdict_text",
    "write_audit_report",
    "write_report",
]
