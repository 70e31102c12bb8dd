"""Reports and the `judge view` web viewer over the run store (SPEC §14).

The viewer is read-only: each page opens the DuckDB file read-only, runs paged queries and
closes it. Pages are Jinja2 templates with autoescaping, our own small CSS and script files and
server-drawn SVG; every response carries a Content-Security-Policy that forbids inline script.
``export_site`` writes the same pages as a static folder that opens from disk.
"""

from clinjudge.reports._viewer_app import ViewerServer, create_app, is_loopback
from clinjudge.reports._viewer_export import ExportError, ExportSummary, export_site
from clinjudge.reports._viewer_pages import PageNotFound, Viewer
from clinjudge.reports._viewer_render import CSP
from clinjudge.reports._viewer_store import DatabaseBusy, DatabaseMissing, read_store

__all__ = [
    "CSP",
    "DatabaseBusy",
    "DatabaseMissing",
    "ExportError",
    "ExportSummary",
    "PageNotFound",
    "Viewer",
    "ViewerServer",
    "create_app",
    "export_site",
    "is_loopback",
    "read_store",
]
