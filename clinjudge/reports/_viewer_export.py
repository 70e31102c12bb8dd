"""`judge view --export DIR`: the viewer's pages as a static folder that opens from disk.

Pages are rendered with the same templates as the live viewer, with relative links and the
same Content-Security-Policy as a ``<meta>`` tag. Item pages, nearly all of a large export, are
built from rows read for a few hundred items at a time (one query per table, not ten per item)
and the run's settings read once, not once per page; run, audit and comparison pages are the
live viewer's own.

The folder is built in a hidden temporary folder next to its destination and moved into place
at the end, so a failed export leaves the destination as it was. The marker file
:data:`MARKER` lists every file and folder the export wrote; a later export deletes only those
(never a path outside the folder, never through a symbolic link), so files of the user's in
the folder survive. A temporary folder left by a killed export is removed by the next export
to the same destination.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clinjudge.errors import ClinJudgeError, UserError
from clinjudge.reports._viewer_app import static_dir
from clinjudge.reports._viewer_compare import compare_items
from clinjudge.reports._viewer_item import (
    assemble_item_page,
    calls_from_rows,
    claims_from_rows,
    inputs_from_row,
    prm_from_rows,
    ratings_from_rows,
    views_from_rows,
)
from clinjudge.reports._viewer_item_table import item_context
from clinjudge.reports._viewer_links import (
    ExportLinks,
    audit_page_path,
    compare_page_path,
    item_page_path,
    run_page_path,
)
from clinjudge.reports._viewer_pages import Viewer
from clinjudge.reports._viewer_paging import clamp_page
from clinjudge.reports._viewer_probe import probe_views
from clinjudge.reports._viewer_render import render
from clinjudge.reports._viewer_run import run_and_rubric
from clinjudge.runs import FLAG_MEANINGS, RunStore
from clinjudge.runs.report_reads import (
    ItemTable,
    is_audit_run,
    item_flag_rows_by_item,
    item_order,
    item_ratings_by_item,
    item_table_rows_by_item,
    run_ids_by_creation,
    scored_item_ids,
    stored_items_by_id,
)

MARKER = ".clinjudge-view-export"
"""File in an export's folder: says it is one and lists what it wrote (JSON)."""

CHUNK_ITEMS = 400
"""Item pages built from one read of their rows (memory stays small on any run)."""

_TEMP_INFIX = ".clinjudge-export-"
_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class ExportError(UserError):
    """The export cannot be written where asked."""


class FolderNotEmpty(ExportError):
    """The destination holds files that are not a previous export (``force`` writes anyway)."""


class DiskFull(ClinJudgeError, OSError):
    """The disk filled up while the export was written (the message says whether the
    destination changed: only if it filled up while files moved into it).

    An ``OSError``, not a :class:`UserError`: the command exits 1, as `judge run` does on a
    full disk."""


@dataclass
class ExportSummary:
    """What an export wrote."""

    path: Path
    runs: list[str] = field(default_factory=list)
    pages: int = 0


ProgressCallback = Callable[[int, int], None]
"""Called with (pages written, pages in all) as the export goes."""


# -- the destination and its manifest ---------------------------------------------------------


@dataclass
class _Manifest:
    """What an earlier export wrote into the destination (relative POSIX paths)."""

    files: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)
    legacy: bool = False
    """Written by a version that kept no list: its pages may be overwritten, none deleted."""


def _safe_rel(path: object) -> str | None:
    """``path`` when it names something inside the folder; None for ``..``, absolute paths,
    drive letters and other names an export never writes."""
    if not isinstance(path, str) or not path or "\\" in path or "\0" in path:
        return None
    parts = path.split("/")
    if any(p in ("", ".", "..") or ":" in p for p in parts) or path == MARKER:
        return None
    return path


def _read_manifest(marker: Path) -> _Manifest:
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        return _Manifest(legacy=True)
    listed: list[list[Any]] = [
        value if isinstance(value := data.get(key), list) else [] for key in ("files", "dirs")
    ]
    files, dirs = ({p for p in map(_safe_rel, paths) if p} for paths in listed)
    return _Manifest(files, dirs)


def _manifest_text(files: Iterable[str], dirs: Iterable[str]) -> str:
    return json.dumps(
        {
            "written_by": "judge view --export",
            "note": "files and folders this export wrote; the next export deletes only these",
            "files": sorted(files),
            "dirs": sorted(dirs),
        },
        indent=1,
    )


def _check_destination(out: Path, force: bool) -> _Manifest | None:
    """The earlier export's manifest (None: nothing to replace); refuses unusable folders."""
    if out.is_symlink():
        raise ExportError(
            f"{out}: is a symbolic link; give the folder itself (an export never writes or "
            "deletes through a link)"
        )
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out}: exists and is not a folder")
    if not out.is_dir():
        return None
    marker = out / MARKER
    if marker.is_symlink() or (marker.exists() and not marker.is_file()):
        raise ExportError(f"{marker}: is not a file written by an export; move it away")
    if marker.is_file():
        return _read_manifest(marker)
    if any(out.iterdir()) and not force:
        raise FolderNotEmpty(
            f"{out}: folder is not empty and is not a previous viewer export; "
            "choose an empty or new folder, or force writing into it"
        )
    return _Manifest()


def _blocking_parent(out: Path, rel: str) -> Path | None:
    """The first folder on the way to ``rel`` that is a link or a file (None: all folders, or
    not there yet)."""
    here = out
    for part in rel.split("/")[:-1]:
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(mode):  # lstat: a link to a folder is not a folder here
            return here
    return None


def _parents(rel: str) -> list[str]:
    parts = rel.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


# -- temporary folders -------------------------------------------------------------------------


def _temp_pattern(out: Path) -> re.Pattern[str]:
    return re.compile(re.escape(f".{out.name}{_TEMP_INFIX}") + r"(\d+)-[A-Za-z0-9_]+")


def _remove_stale_temps(out: Path) -> None:
    """Delete temporary folders of earlier exports to ``out`` whose process is gone."""
    if os.name != "posix":  # os.kill(pid, 0) would end the process on Windows
        return
    pattern = _temp_pattern(out)
    with suppress(OSError):
        for folder in out.parent.iterdir():
            match = pattern.fullmatch(folder.name)
            if not match:
                continue
            info = os.lstat(folder)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                continue
            try:
                os.kill(int(match.group(1)), 0)
            except ProcessLookupError:  # its export was killed
                shutil.rmtree(folder, ignore_errors=True)
            except OSError:  # alive, but not ours to judge
                continue


def _write_error(
    out: Path, exc: OSError, tmp: Path | None = None, moving: bool = False
) -> Exception:
    """One line for a failed write: ``disk full`` and the path, or the system's reason.

    Args:
        out: The destination.
        exc: The error.
        tmp: The temporary folder (its paths are shown as the destination's).
        moving: The error came while files moved into ``out`` (so it may be half-changed).
    """
    where = Path(exc.filename) if isinstance(exc.filename, str) else out
    if tmp is not None and where.is_relative_to(tmp):
        where = out / where.relative_to(tmp)
    if exc.errno in _DISK_FULL:
        outcome = (
            f"{out} is partly updated: export again when there is space"
            if moving
            else f"{out} was left as it was: free some space or export elsewhere"
        )
        return DiskFull(f"disk full: cannot write {where}; {outcome}")
    return ExportError(f"cannot write the export to {out}: {where}: {exc.strerror or exc}")


# -- writing pages -----------------------------------------------------------------------------


def _write_file(path: Path, text: str) -> None:
    """Write one text file (a page or the marker)."""
    path.write_text(text, encoding="utf-8")


class _Pages:
    """Writes pages under a root folder, making each folder once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: set[Path] = set()

    def write(self, here: str, html: str) -> None:
        path = self.root / here
        if path.parent not in self.made:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.made.add(path.parent)
        _write_file(path, html)


@dataclass
class _Plan:
    """What one export holds."""

    ids: list[str]
    groups: list[tuple[str, ...]]
    audits: set[str]
    items: dict[str, list[str]]
    """Each run's items in page order."""
    neighbours: dict[str, dict[str, tuple[str | None, str | None]]]
    steps_only: set[str]
    """`judge prm score` runs: no ``items`` rows; their few pages are built one by one."""
    compare_pages: dict[tuple[str, ...], int]

    def run_pages(self, run_id: str, per_page: int) -> int:
        return clamp_page(1, len(self.items[run_id]), per_page).pages

    def total(self, per_page: int) -> int:
        runs = sum(
            self.run_pages(r, per_page) + len(self.items[r]) + (r in self.audits) for r in self.ids
        )
        return 1 + runs + sum(self.compare_pages.values())


def _neighbours(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str | None, str | None]]:
    """Previous and next item of each, as the live item page finds them: the nearest position
    below and above (an item without a position has neither).

    Args:
        rows: A run's items (``item_id``, ``position``) ordered by position.
    """
    out: dict[str, tuple[str | None, str | None]] = {}
    groups: list[list[str]] = []  # item ids by position (a run never writes two at one)
    last: object = None
    for row in rows:
        if row["position"] is None:
            out[row["item_id"]] = (None, None)
            continue
        if not groups or row["position"] != last:
            groups.append([])
            last = row["position"]
        groups[-1].append(row["item_id"])
    for k, ids in enumerate(groups):
        before = groups[k - 1][-1] if k else None
        after = groups[k + 1][0] if k + 1 < len(groups) else None
        out.update((i, (before, after)) for i in ids)
    return out


def _plan(viewer: Viewer, wanted: Sequence[str] | None, compares: Sequence[Sequence[str]]) -> _Plan:
    """Which runs, items and comparisons the export holds, read before any page is written.

    Args:
        viewer: The viewer over the database.
        wanted: Run ids or prefixes (None: every run).
        compares: Groups of run ids or prefixes to compare.
    """
    with viewer.reading() as store:
        ids = [store.get_run(r)["run_id"] for r in wanted] if wanted else run_ids_by_creation(store)
        groups: list[tuple[str, ...]] = []
        for group in compares:
            full = tuple(dict.fromkeys(store.get_run(r)["run_id"] for r in group))
            if len(full) < 2:
                raise ExportError(f"compare {','.join(group)}: needs two or more runs")
            groups.append(full)
        # A comparison links to its runs' pages and items: they are exported too.
        ids = list(dict.fromkeys([*ids, *(r for g in groups for r in g)]))
        items: dict[str, list[str]] = {}
        neighbours = {}
        steps_only: set[str] = set()
        has_steps = store.has_table("prm_steps")
        for rid in ids:
            rows = item_order(store, rid)
            if not rows and has_steps:
                scored = scored_item_ids(store, rid)
                if scored:
                    steps_only.add(rid)
                    items[rid] = scored
                    continue
            items[rid] = [r["item_id"] for r in rows]
            neighbours[rid] = _neighbours(rows)
        audits = {rid for rid in ids if is_audit_run(store, rid)}
        compare_pages = {}
        for group in groups:
            paging = compare_items(store, list(group)).get("paging")
            compare_pages[group] = paging.pages if paging else 1
    return _Plan(ids, groups, audits, items, neighbours, steps_only, compare_pages)


def item_pages_data(
    store: RunStore,
    run: dict[str, Any],
    rubric: Any,
    ids: list[str],
    neighbours: dict[str, tuple[str | None, str | None]],
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Item pages' data (as :func:`~clinjudge.reports._viewer_item.item_page` builds it) for
    many items of one run, from one query per table.

    Args:
        store: The run store.
        run: The run's row.
        rubric: The run's rubric (None for a PRM scoring run).
        ids: Item ids (with ``items`` rows).
        neighbours: Previous and next item id of each.
    """
    if not ids:
        return
    rid = run["run_id"]
    claims_run = bool(rubric is not None and getattr(rubric, "method", "scores") == "claims")
    rows = stored_items_by_id(store, rid, ids)
    # Databases from older versions may lack the newer tables.
    newer: tuple[ItemTable, ...] = ("claims", "prm_steps")
    tables: list[ItemTable] = ["judgments", "samples", "messages", "calls"]
    tables += [t for t in newer if store.has_table(t)]
    got = {t: item_table_rows_by_item(store, t, rid, ids) for t in tables}
    humans = item_ratings_by_item(store, ids)
    keys = [a.key for a in rubric.attributes] if rubric is not None else []
    probes = probe_views(store, run, ids, keys)
    suspect = item_flag_rows_by_item(store, rid, ids)
    for item_id in ids:
        if item_id not in rows:
            continue
        previous, next_ = neighbours.get(item_id, (None, None))
        data = assemble_item_page(
            inputs_from_row(run, rows[item_id], previous, next_, claims_run),
            views_from_rows(
                run,
                got["judgments"][item_id],
                got["samples"][item_id],
                got["messages"][item_id],
            ),
            calls_from_rows(got["calls"][item_id]),
            ratings_from_rows(humans[item_id]),
            claims_from_rows(got["claims"][item_id]) if "claims" in got else [],
            prm_from_rows(got["prm_steps"][item_id]) if "prm_steps" in got else [],
            claims_run,
        )
        data["probe"] = probes.get(item_id)
        data["suspect"] = suspect.get(item_id, [])  # the live item page shows them too
        yield item_id, data


def item_html(
    viewer: Viewer,
    links: ExportLinks,
    run: dict[str, Any],
    rubric: Any,
    data: dict[str, Any],
    audit_reasons: list[str],
) -> str:
    """An item page from its data: what :meth:`Viewer.item` renders, without its queries."""
    item_id = data["inputs"]["item_id"]
    return render(
        "item.html",
        **viewer._common(links, f"Item {item_id}", bool(run["simulated"])),
        run=run,
        **item_context(data, rubric),
        chat=run.get("mode") == "magentic",
        audit_reasons=audit_reasons,
        suspect=data.get("suspect", []),
        flag_meanings=FLAG_MEANINGS,
    )


class _Writer:
    """Writes the pages of a plan and reports progress."""

    def __init__(
        self, root: Path, viewer: Viewer, plan: _Plan, progress: ProgressCallback | None
    ) -> None:
        self.root, self.viewer, self.plan = root, viewer, plan
        self.pages = _Pages(root)
        self.done = 0
        self.total = plan.total(viewer.items_per_page)
        self.progress = progress

    def links(self, here: str) -> ExportLinks:
        return ExportLinks(here, self.plan.groups, self.plan.audits)

    def write(self, here: str, html: str) -> None:
        self.pages.write(here, html)
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)

    def item_pages(self, run_id: str) -> None:
        """A run's item pages, from rows read :data:`CHUNK_ITEMS` items at a time."""
        viewer, ids = self.viewer, self.plan.items[run_id]
        reasons = _audit_reasons(viewer, run_id) if run_id in self.plan.audits else {}
        with viewer.reading() as store:
            run, rubric = run_and_rubric(store, run_id)
            for start in range(0, len(ids), CHUNK_ITEMS):
                part = ids[start : start + CHUNK_ITEMS]
                near = self.plan.neighbours[run_id]
                for item_id, data in item_pages_data(store, run, rubric, part, near):
                    here = item_page_path(run_id, item_id)
                    html = item_html(
                        viewer, self.links(here), run, rubric, data, reasons.get(item_id, [])
                    )
                    self.write(here, html)


def _audit_reasons(viewer: Viewer, run_id: str) -> dict[str, list[str]]:
    """The audit's flags of each item (the first entry of an item, as the item page shows)."""
    with viewer.reading() as store:
        audit = viewer._audit(store, run_id)
    reasons: dict[str, list[str]] = {}
    for flagged in audit.flagged if audit else []:
        reasons.setdefault(flagged.item_id, flagged.reasons)
    return reasons


def _write_pages(writer: _Writer) -> None:
    """The runs page; each run's pages, audit and items; the comparisons."""
    viewer, plan = writer.viewer, writer.plan
    home = writer.links("index.html")
    listed = [(list(g), link) for g in plan.groups if (link := home.compare(g)) is not None]
    writer.write(
        "index.html",
        viewer.runs(home, per_page=max(len(plan.ids), 1), compares=listed, only=plan.ids),
    )
    for rid in plan.ids:
        for page in range(1, plan.run_pages(rid, viewer.items_per_page) + 1):
            here = run_page_path(rid, page)
            writer.write(here, viewer.run(writer.links(here), rid, page=page))
        if rid in plan.audits:
            here = audit_page_path(rid)
            writer.write(here, viewer.audit(writer.links(here), rid))
        if rid in plan.steps_only:  # a few items: the live viewer's page of each
            for item_id in plan.items[rid]:
                here = item_page_path(rid, item_id)
                writer.write(here, viewer.item(writer.links(here), rid, item_id))
        else:
            writer.item_pages(rid)
    for group, pages in plan.compare_pages.items():
        for page in range(1, pages + 1):
            here = compare_page_path(group, page)
            writer.write(here, viewer.compare(writer.links(here), group, page=page))


# -- the export --------------------------------------------------------------------------------


def export_site(
    db: str | Path,
    out: str | Path,
    *,
    runs: Sequence[str] | None = None,
    compares: Sequence[Sequence[str]] = (),
    force: bool = False,
    n_boot: int = 1000,
    progress: ProgressCallback | None = None,
) -> ExportSummary:
    """Write the viewer's pages for some or all runs as static files.

    Args:
        db: The DuckDB run store (read only).
        out: Destination folder (not a symbolic link).
        runs: Run ids or prefixes to export (default: every run).
        compares: Groups of two or more run ids to export a comparison page for; their runs
            are exported too, so the page's links lead somewhere.
        force: Write into a non-empty folder that is not a previous export (its files stay).
        n_boot: Bootstrap resamples for agreement and audit statistics.
        progress: Called with (pages written, pages in all) as pages are written.

    Raises:
        ExportError: The destination cannot be used (a link, a file, someone else's folder)
            or written.
        DiskFull: The disk filled up; the destination was left as it was.
        DatabaseBusy: Another process holds the database for writing.
        DatabaseMissing: The database cannot be opened (missing, or from a newer clinjudge).
    """
    # Absolute (links not resolved): "." has a name and a parent to build the export in.
    out = Path(os.path.abspath(out))
    earlier = _check_destination(out, force)
    viewer = Viewer(Path(db), n_boot=n_boot)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _write_error(out, exc) from exc
    _remove_stale_temps(out)
    with viewer.session():
        plan = _plan(viewer, runs, compares)
        try:
            # The process id in the name lets a later export tell a killed export's folder.
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}{_TEMP_INFIX}{os.getpid()}-",
                                        dir=out.parent))  # fmt: skip
        except OSError as exc:
            raise _write_error(out, exc) from exc
        try:
            writer = _Writer(tmp, viewer, plan, progress)
            try:
                _write_pages(writer)
                shutil.copytree(static_dir(), tmp / "static")
            except OSError as exc:
                raise _write_error(out, exc, tmp) from exc
            _move_into_place(tmp, out, earlier)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return ExportSummary(out, plan.ids, writer.done)


def _tree(root: Path) -> tuple[list[str], list[str]]:
    """Files and folders under ``root`` as relative POSIX paths."""
    files, dirs = [], []
    for folder, subdirs, names in os.walk(root):
        rel = Path(folder).relative_to(root).as_posix()
        prefix = "" if rel == "." else rel + "/"
        dirs += [prefix + d for d in subdirs]
        files += [prefix + n for n in names]
    return files, dirs


def _move_into_place(tmp: Path, out: Path, earlier: _Manifest | None) -> None:
    """Put the finished export at ``out``, deleting only what an earlier export wrote.

    A new or empty destination is replaced by the temporary folder in one rename. Otherwise
    files move in one by one: the marker first lists what the earlier and this export wrote,
    so an export killed half-way is still cleaned up by the next one.
    """
    files, dirs = _tree(tmp)
    try:
        if earlier is None or not any(out.iterdir()):
            _write_file(tmp / MARKER, _manifest_text(files, dirs))
            with suppress(OSError):  # another filesystem or not empty after all: merge below
                os.replace(tmp, out)
                return
            (tmp / MARKER).unlink()
            earlier = earlier or _Manifest()
        _merge(tmp, out, files, earlier)
    except OSError as exc:
        raise _write_error(out, exc, tmp, moving=True) from exc


def _merge(tmp: Path, out: Path, files: list[str], earlier: _Manifest) -> None:
    """Move the export's files into a folder that holds others, then delete the earlier
    export's files that this one did not write again, and its folders left empty.

    Args:
        tmp: The finished export.
        out: The destination (an earlier export, or any folder with ``force``).
        files: The export's files, relative to ``tmp``.
        earlier: What the earlier export wrote (empty for a folder that held none).
    """
    # Check everything before changing anything: no writing through links, no overwriting
    # files the earlier export did not write.
    for rel in files:
        blocked = _blocking_parent(out, rel)
        if blocked is not None:
            raise ExportError(
                f"{blocked}: is a symbolic link or a file where the export needs a folder; "
                "an export never writes through a link: move it away"
            )
        try:
            mode = os.lstat(out / rel).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode) or not (earlier.legacy or rel in earlier.files):
            raise ExportError(
                f"{out / rel}: exists and was not written by an earlier export; an export never "
                "replaces other files: move it away"
            )
    needed = {d for rel in files for d in _parents(rel)}
    created = {d for d in needed if not (out / d).exists()}
    new_files = set(files)
    # Until the end, the marker lists both exports' files: a kill half-way leaves nothing
    # that the next export would not recognise.
    _write_file(tmp / MARKER, _manifest_text(earlier.files | new_files, earlier.dirs | created))
    os.replace(tmp / MARKER, out / MARKER)
    for rel in sorted(needed, key=lambda d: d.count("/")):
        (out / rel).mkdir(mode=0o700, exist_ok=True)
    for rel in files:
        _move_file(tmp / rel, out / rel)
    for rel in sorted(earlier.files - new_files):
        _remove_listed_file(out, rel)
    for rel in sorted(earlier.dirs - needed, key=lambda d: -d.count("/")):
        if _blocking_parent(out, rel + "/x") is None and _is_real_dir(out / rel):
            with suppress(OSError):  # not empty: it holds other files now
                (out / rel).rmdir()
    kept = {d for d in earlier.dirs | created if _is_real_dir(out / d)}
    _write_file(tmp / MARKER, _manifest_text(new_files, kept))
    os.replace(tmp / MARKER, out / MARKER)


def _is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _move_file(src: Path, dst: Path) -> None:
    try:
        os.replace(src, dst)  # replaces a file, or a link itself: never writes through one
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.copyfile(src, dst)  # the destination is a mount point: another filesystem
        src.unlink()


def _remove_listed_file(out: Path, rel: str) -> None:
    """Delete a page an earlier export wrote, unless a link now leads to it or it is no longer
    a plain file."""
    if _blocking_parent(out, rel) is not None:
        return
    path = out / rel
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            path.unlink()
    except FileNotFoundError:
        pass
