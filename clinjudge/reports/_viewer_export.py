"""`judge view --export DIR`: the viewer's pages as a static folder that opens from disk.

Pages are rendered with the same templates as the live viewer, with relative links and the
same Content-Security-Policy as a ``<meta>`` tag. The folder is built next to its destination
and moved into place at the end, so a failed export leaves nothing half-written. An existing
folder is replaced only when it is empty or a previous export (it holds :data:`MARKER`), unless
``force`` is given, which writes into it and leaves other files alone.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from clinjudge.errors import UserError
from clinjudge.reports._viewer_app import static_dir
from clinjudge.reports._viewer_compare import compare_items
from clinjudge.reports._viewer_links import (
    ExportLinks,
    audit_page_path,
    compare_page_path,
    item_page_path,
    run_page_path,
)
from clinjudge.reports._viewer_pages import Viewer
from clinjudge.reports._viewer_paging import clamp_page
from clinjudge.reports._viewer_run import is_audit_run

MARKER = ".clinjudge-view-export"


class ExportError(UserError):
    """The export cannot be written where asked."""


class FolderNotEmpty(ExportError):
    """The destination holds files that are not a previous export (``force`` writes anyway)."""


@dataclass
class ExportSummary:
    """What an export wrote."""

    path: Path
    runs: list[str] = field(default_factory=list)
    pages: int = 0


def _check_destination(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists() and not force:
        raise FolderNotEmpty(
            f"{out}: folder is not empty and is not a previous viewer export; "
            "choose an empty or new folder, or force writing into it"
        )


class _Writer:
    def __init__(self, root: Path, viewer: Viewer, compares: list[tuple[str, ...]], audits: set):
        self.root, self.viewer = root, viewer
        self.compares, self.audits = compares, audits
        self.pages = 0

    def links(self, here: str) -> ExportLinks:
        return ExportLinks(here, self.compares, self.audits)

    def write(self, here: str, html: str) -> None:
        path = self.root / here
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
        self.pages += 1


def _run_ids(viewer: Viewer, wanted: Sequence[str] | None) -> tuple[list[str], dict]:
    with viewer.reading() as store:
        if wanted:
            ids = [store.get_run(r)["run_id"] for r in wanted]
        else:
            ids = [r["run_id"] for r in store.query("SELECT run_id FROM runs ORDER BY created_at")]
        info = {
            r["run_id"]: {**r, "audit": is_audit_run(store, r["run_id"])}
            for r in store.query(
                "SELECT r.run_id, (SELECT count(*) FROM items i WHERE i.run_id = r.run_id) AS n "
                "FROM runs r"
            )
        }
    return ids, info


def export_site(
    db: str | Path,
    out: str | Path,
    *,
    runs: Sequence[str] | None = None,
    compares: Sequence[Sequence[str]] = (),
    force: bool = False,
    n_boot: int = 1000,
) -> ExportSummary:
    """Write the viewer's pages for some or all runs as static files.

    Args:
        db: The DuckDB run store (read only).
        out: Destination folder.
        runs: Run ids or prefixes to export (default: every run).
        compares: Groups of two or more run ids to export a comparison page for.
        force: Write into a non-empty folder that is not a previous export.
        n_boot: Bootstrap resamples for agreement and audit statistics.
    """
    out = Path(out)
    _check_destination(out, force)
    viewer = Viewer(Path(db), n_boot=n_boot)
    out.parent.mkdir(parents=True, exist_ok=True)
    with viewer.session():
        ids, info = _run_ids(viewer, runs)
        groups: list[tuple[str, ...]] = []
        with viewer.reading() as store:
            for group in compares:
                full = tuple(dict.fromkeys(store.get_run(r)["run_id"] for r in group))
                if len(full) < 2:
                    raise ExportError(f"compare {','.join(group)}: needs two or more runs")
                groups.append(full)
        audits = {rid for rid in ids if info[rid]["audit"]}
        with tempfile.TemporaryDirectory(prefix=f".{out.name}-", dir=out.parent) as tmp:
            writer = _Writer(Path(tmp), viewer, groups, audits)
            _write_pages(writer, ids, info, groups)
            shutil.copytree(static_dir(), Path(tmp) / "static")
            (Path(tmp) / MARKER).write_text("written by judge view --export\n")
            _move_into_place(Path(tmp), out, force)
    return ExportSummary(out, ids, writer.pages)


def _write_pages(writer: _Writer, ids: list[str], info: dict, groups: list) -> None:
    viewer = writer.viewer
    links = writer.links("index.html")
    # Every group here is exported, so each has a link.
    listed = [(list(g), link) for g in groups if (link := links.compare(g)) is not None]
    writer.write(
        "index.html",
        viewer.runs(
            writer.links("index.html"), per_page=max(len(ids), 1), compares=listed, only=ids
        ),
    )
    for rid in ids:
        paging = clamp_page(1, info[rid]["n"], viewer.items_per_page)
        for page in range(1, paging.pages + 1):
            here = run_page_path(rid, page)
            writer.write(here, viewer.run(writer.links(here), rid, page=page))
        with viewer.reading() as store:
            items = [r["item_id"] for r in store.query(
                "SELECT item_id FROM items WHERE run_id = ? ORDER BY position", [rid])]  # fmt: skip
        for item_id in items:
            here = item_page_path(rid, item_id)
            writer.write(here, viewer.item(writer.links(here), rid, item_id))
        if rid in writer.audits:
            here = audit_page_path(rid)
            writer.write(here, viewer.audit(writer.links(here), rid))
    for group in groups:
        with viewer.reading() as store:
            pages = compare_items(store, list(group)).get("paging")
        for page in range(1, (pages.pages if pages else 1) + 1):
            here = compare_page_path(group, page)
            writer.write(here, viewer.compare(writer.links(here), group, page=page))


def _move_into_place(tmp: Path, out: Path, force: bool) -> None:
    if out.is_dir() and (out / MARKER).exists():
        shutil.rmtree(out)
    if out.is_dir() and any(out.iterdir()):
        assert force
        shutil.copytree(tmp, out, dirs_exist_ok=True)
        return
    if out.is_dir():
        out.rmdir()
    # The temporary folder is renamed rather than copied; recreate it for the cleanup.
    tmp.rename(out)
    tmp.mkdir()
