"""Where each page lives: URLs for the live server, relative file paths for a static export.

Templates only ever call a :class:`Links` object, so one set of templates serves both. A link
the static export cannot offer (a filter or sort that needs the server) comes back as None and
the template leaves the control out.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Iterable, Sequence
from urllib.parse import quote, urlencode

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
DOT_SEGMENTS = frozenset({".", ".."})
"""Item ids that cannot be a URL path segment: their page is ``/runs/RUN/item?item=ID``."""
ITEM_PARAM = "item"


def item_file_name(item_id: str) -> str:
    """A file name for an item id (any characters), unique by a short hash of the id."""
    digest = hashlib.sha256(item_id.encode("utf-8")).hexdigest()[:8]
    stem = _UNSAFE.sub("_", item_id).strip("._")[:60] or "item"
    return f"{stem}-{digest}.html"


def _query(params: dict[str, object]) -> str:
    """A query string without empty values or the default first page."""
    clean = {
        key: value
        for key, value in params.items()
        if value is not None
        and value != ""
        and value is not False
        and not (key == "page" and value == 1)
    }
    return ("?" + urlencode(clean, doseq=True)) if clean else ""


class Links:
    """URLs of the live server (absolute paths with query strings)."""

    interactive = True

    def static(self, name: str) -> str:
        """A file of the viewer's own CSS or JavaScript."""
        return f"/static/{name}"

    def runs(self, **query: object) -> str | None:
        """The runs page (sort, desc, q, status, page)."""
        return "/" + _query(query)

    def run(self, run_id: str, page: int = 1, **query: object) -> str | None:
        """A run's page; ``page`` pages its items, ``query`` sorts, searches and filters them
        (:meth:`~clinjudge.reports._viewer_query.ItemQuery.params`)."""
        return f"/runs/{quote(run_id, safe='')}/" + _query({"page": page, **query})

    def item(self, run_id: str, item_id: str, **query: object) -> str | None:
        """An item's page; ``query`` is the state of the item list it is opened from (sort,
        filters), which its previous and next links keep."""
        if item_id in DOT_SEGMENTS:
            # Browsers drop a path segment of dots (and read %2E as a dot): name it in the query.
            return f"/runs/{quote(run_id, safe='')}/item" + _query({ITEM_PARAM: item_id, **query})
        path = f"/runs/{quote(run_id, safe='')}/items/{quote(item_id, safe='')}"
        return path + _query(query)

    def audit(self, run_id: str) -> str | None:
        """The audit page of a vendor-audit run."""
        return f"/runs/{quote(run_id, safe='')}/audit"

    def compare(self, run_ids: Sequence[str], page: int = 1, **query: object) -> str | None:
        """The page comparing runs item by item (``query``: its sort, desc)."""
        return "/compare" + _query({"run": list(run_ids), "page": page, **query})


class ExportLinks(Links):
    """Relative links between the files of a static export.

    Args:
        here: Path of the page being written, relative to the export root.
        compares: Run-id tuples whose comparison pages the export holds.
        audits: Runs whose audit page the export holds.
    """

    interactive = False

    def __init__(
        self, here: str, compares: Iterable[tuple[str, ...]] = (), audits: Iterable[str] = ()
    ):
        self.here = here
        self.compares = {tuple(c) for c in compares}
        self.audits = set(audits)

    def _rel(self, target: str) -> str:
        rel = posixpath.relpath(target, posixpath.dirname(self.here) or ".")
        return quote(rel)

    def static(self, name: str) -> str:
        return self._rel(f"static/{name}")

    def runs(self, **query: object) -> str | None:
        if any(v not in (None, "", 1, False) for v in query.values()):
            return None
        return self._rel("index.html")

    def run(self, run_id: str, page: int = 1, **query: object) -> str | None:
        if any(v not in (None, "") for v in query.values()):
            return None
        return self._rel(run_page_path(run_id, page))

    def item(self, run_id: str, item_id: str, **query: object) -> str | None:
        # An export holds the run's own list only (no sort or filter): an item page is the
        # same file whatever list links to it.
        return self._rel(item_page_path(run_id, item_id))

    def audit(self, run_id: str) -> str | None:
        return self._rel(audit_page_path(run_id)) if run_id in self.audits else None

    def compare(self, run_ids: Sequence[str], page: int = 1, **query: object) -> str | None:
        if tuple(run_ids) not in self.compares or any(v not in (None, "") for v in query.values()):
            return None
        return self._rel(compare_page_path(run_ids, page))


def _run_dir(run_id: str) -> str:
    return f"runs/{_UNSAFE.sub('_', run_id)}"


def run_page_path(run_id: str, page: int = 1) -> str:
    """Export path of a run's page (items page ``page``)."""
    return f"{_run_dir(run_id)}/index.html" if page <= 1 else f"{_run_dir(run_id)}/page-{page}.html"


def item_page_path(run_id: str, item_id: str) -> str:
    """Export path of an item's page."""
    return f"{_run_dir(run_id)}/items/{item_file_name(item_id)}"


def audit_page_path(run_id: str) -> str:
    """Export path of an audit page."""
    return f"{_run_dir(run_id)}/audit.html"


def compare_page_path(run_ids: Sequence[str], page: int = 1) -> str:
    """Export path of a comparison page."""
    digest = hashlib.sha256("\n".join(run_ids).encode()).hexdigest()[:10]
    suffix = "" if page <= 1 else f"-page-{page}"
    return f"compare/{digest}{suffix}.html"
