"""`judge view --export DIR`: what a re-export may delete, one-line failures (busy or newer
database, a link, a full disk), killed exports, links that lead somewhere, progress, and pages
built from rows read in bulk that equal the live viewer's."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import duckdb
import pytest

from clinjudge.reports import Viewer, export_site
from clinjudge.reports._viewer_export import MARKER
from clinjudge.reports._viewer_links import (
    ExportLinks,
    audit_page_path,
    compare_page_path,
    item_page_path,
    run_page_path,
)
from clinjudge.runs import RunStore
from tests.cli._helpers import JUDGE, invoke
from tests.factories import small_tmpfs
from tests.reports._store import ViewerStore

ENV = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _copy_db(viewer_store: ViewerStore, tmp_path: Path) -> Path:
    db = tmp_path / "copy.duckdb"
    db.write_bytes(viewer_store.db.read_bytes())
    return db


def _error_line(stderr: str) -> str:
    """The one line a failed command prints (and nothing else: no traceback)."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


def _leftovers(parent: Path, name: str) -> list[str]:
    """Hidden folders next to the destination (temporary folders of exports)."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}"))


# -- finding 2: an export deletes only what it wrote -----------------------------------------


def test_force_then_export_again_keeps_the_users_files(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    s = viewer_store
    mine = tmp_path / "mine"
    (mine / "photos").mkdir(parents=True)
    (mine / "notes.txt").write_text("keep me")
    (mine / "photos" / "a.txt").write_text("and me")
    first = invoke("view", "--db", str(s.db), "--export", str(mine), "--force", "--run", s.single)
    assert first.exit_code == 0, first.stderr
    assert (mine / "index.html").exists()
    # The user keeps working in the folder, also inside a folder the export made.
    run_dir = mine / run_page_path(s.single).rsplit("/", 1)[0]
    (run_dir / "my-notes.md").write_text("mine too")

    again = invoke("view", "--db", str(s.db), "--export", str(mine), "--run", s.doclens)
    assert again.exit_code == 0, again.stderr
    assert (mine / "notes.txt").read_text() == "keep me"
    assert (mine / "photos" / "a.txt").read_text() == "and me"
    assert (run_dir / "my-notes.md").read_text() == "mine too"
    # The first export's pages are gone, the second's are there and listed in the marker.
    assert not (mine / item_page_path(s.single, "item-0000")).exists()
    assert (mine / run_page_path(s.doclens)).exists()
    listed = json.loads((mine / MARKER).read_text())["files"]
    assert set(listed) == _files(mine) - {
        MARKER, "notes.txt", "photos/a.txt", (run_dir / "my-notes.md").relative_to(mine).as_posix()
    }  # fmt: skip
    assert _leftovers(tmp_path, "mine") == []


def test_a_marker_deletes_only_the_files_it_lists_and_never_outside(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    s = viewer_store
    victim = tmp_path / "victim.txt"
    victim.write_text("outside")
    site = tmp_path / "site"
    export_site(s.db, site, runs=[s.single], n_boot=20)
    (site / "mine.txt").write_text("a file of the user's")
    marker = json.loads((site / MARKER).read_text())
    marker["files"] += ["../victim.txt", str(victim), "mine.txt/../../victim.txt"]
    (site / MARKER).write_text(json.dumps(marker))
    # A folder the export wrote, now a link to somewhere else holding a page of the same name.
    elsewhere = tmp_path / "elsewhere"
    items = site / item_page_path(s.single, "item-0000").rsplit("/", 1)[0]
    shutil.move(items, elsewhere)
    items.symlink_to(elsewhere, target_is_directory=True)

    export_site(s.db, site, runs=[s.doclens], n_boot=20)
    assert victim.read_text() == "outside"
    assert (site / "mine.txt").read_text() == "a file of the user's"
    assert sorted(p.name for p in elsewhere.iterdir()) == sorted(
        Path(item_page_path(s.single, i)).name
        for i in ("item-0000", "item-0001", "item-0002", "item-xss", "item-fail")
    )
    assert items.is_symlink()


def test_force_never_writes_through_a_link_or_over_a_users_file(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    s = viewer_store
    outside = tmp_path / "outside"
    outside.mkdir()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "runs").symlink_to(outside, target_is_directory=True)
    result = invoke("view", "--db", str(s.db), "--export", str(mine), "--force", "--run", s.single)
    assert result.exit_code == 2
    assert "symbolic link" in _error_line(result.stderr)
    assert list(outside.iterdir()) == [] and sorted(p.name for p in mine.iterdir()) == ["runs"]

    (mine / "runs").unlink()
    (mine / "index.html").write_text("my own page")
    result = invoke("view", "--db", str(s.db), "--export", str(mine), "--force", "--run", s.single)
    assert result.exit_code == 2
    assert "not written by an earlier export" in _error_line(result.stderr)
    assert (mine / "index.html").read_text() == "my own page"
    assert sorted(p.name for p in mine.iterdir()) == ["index.html"]
    assert _leftovers(tmp_path, "mine") == []


# -- finding 6: one line, not a traceback ----------------------------------------------------

_HOLD = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("CREATE TABLE IF NOT EXISTS lock_probe (x INTEGER)")
print("locked", flush=True)
sys.stdin.readline()
con.close()
"""


def _judge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [JUDGE, *args], capture_output=True, text=True, env=ENV, timeout=300, check=False
    )


def test_export_of_a_database_held_by_a_writer_is_one_line(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    db = _copy_db(viewer_store, tmp_path)
    writer = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "locked"
        done = _judge("view", "--db", str(db), "--export", str(tmp_path / "site"))
    finally:
        assert writer.stdin is not None
        writer.stdin.write("\n")
        writer.stdin.flush()
        writer.wait(timeout=30)
    assert done.returncode == 2
    assert "in use by another process" in _error_line(done.stderr)
    assert not (tmp_path / "site").exists() and _leftovers(tmp_path, "site") == []


def test_export_of_a_database_from_a_newer_version_is_one_line(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    db = _copy_db(viewer_store, tmp_path)
    con = duckdb.connect(str(db))
    con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', '99')")
    con.close()
    done = _judge("view", "--db", str(db), "--export", str(tmp_path / "site"))
    assert done.returncode == 2
    assert "schema version 99" in _error_line(done.stderr)
    assert not (tmp_path / "site").exists()


def test_export_to_a_symbolic_link_is_refused_in_one_line(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    done = _judge("view", "--db", str(viewer_store.db), "--export", str(tmp_path / "link"))
    assert done.returncode == 2
    assert "symbolic link" in _error_line(done.stderr)
    assert list(real.iterdir()) == [] and (tmp_path / "link").is_symlink()


def test_a_full_disk_says_so_and_leaves_the_earlier_export(
    viewer_store: ViewerStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = viewer_store
    site = tmp_path / "site"
    export_site(s.db, site, runs=[s.single], n_boot=20)
    before = {name: (site / name).read_bytes() for name in _files(site)}
    real = Path.write_text
    written: list[Path] = []

    def write_text(self: Path, *args: object, **kwargs: object) -> int:
        if self.suffix == ".html":
            written.append(self)
            if len(written) > 3:  # a few pages fit, then the disk is full
                raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", write_text)
    result = invoke("view", "--db", str(s.db), "--export", str(site), "--run", s.doclens)
    assert result.exit_code == 1
    line = _error_line(result.stderr)
    assert "disk full" in line and str(site) in line
    assert {name: (site / name).read_bytes() for name in _files(site)} == before
    assert _leftovers(tmp_path, "site") == []


@pytest.fixture
def tiny_filesystem(tmp_path: Path):  # noqa: ANN201
    """A 200 KiB tmpfs (needs root, as in CI); skipped where mounting is not allowed."""
    with small_tmpfs(tmp_path, "200k") as mount:
        yield mount


def test_a_really_full_disk_says_so_and_writes_nothing(
    viewer_store: ViewerStore, tiny_filesystem: Path
) -> None:
    site = tiny_filesystem / "site"
    done = _judge("view", "--db", str(viewer_store.db), "--export", str(site))
    assert done.returncode == 1
    line = _error_line(done.stderr)
    assert "disk full" in line and str(site) in line
    assert list(tiny_filesystem.iterdir()) == []


# -- finding 10: killed exports, links that lead nowhere -------------------------------------


def _grow(db: Path, run_id: str, copies: int) -> None:
    """Give a run ``copies`` more copies of each of its items (new ids and positions)."""
    con = duckdb.connect(str(db))
    try:
        for table in ("items", "judgments", "samples", "calls", "message_rows"):
            columns = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
            picks = []
            for column in columns:
                if column == "item_id":
                    picks.append("item_id || '-c' || k AS item_id")
                elif column == "call_id":
                    picks.append("call_id || '-c' || k AS call_id")
                elif column == "position" and table == "items":
                    picks.append("position + 1000 * (k + 1) AS position")
                else:
                    picks.append(column)
            con.execute(
                f"INSERT INTO {table} SELECT {', '.join(picks)} FROM {table}, range(?) r(k) "
                "WHERE run_id = ?",
                [copies, run_id],
            )
    finally:
        con.close()


def test_a_killed_export_leaves_nothing_the_next_one_does_not_clean(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    s = viewer_store
    db = _copy_db(viewer_store, tmp_path)
    _grow(db, s.single, 400)  # about 2,000 item pages: seconds to write
    site = tmp_path / "site"
    proc = subprocess.Popen(
        [JUDGE, "view", "--db", str(db), "--export", str(site), "--run", s.single],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        temps = _leftovers(tmp_path, "site")
        if temps and len(list((tmp_path / temps[0]).rglob("*.html"))) > 50:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the export ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert _leftovers(tmp_path, "site") != [] and not site.exists()

    # A folder of the same pattern whose process lives (ours) is another export's: it stays.
    alive = tmp_path / f".site.clinjudge-export-{os.getpid()}-busy1234"
    alive.mkdir()
    done = invoke("view", "--db", str(db), "--export", str(site), "--run", s.doclens)
    assert done.exit_code == 0, done.stderr
    assert _leftovers(tmp_path, "site") == [alive.name]
    assert (site / "index.html").exists()


def _broken_links(root: Path) -> list[tuple[str, str]]:
    """Every local href/src of every exported page whose file is missing."""
    broken = []
    for page in root.rglob("*.html"):
        for target in re.findall(r'(?:href|src)="([^"]*)"', page.read_text(encoding="utf-8")):
            url = urlsplit(target.replace("&amp;", "&"))
            if url.scheme or url.netloc or not url.path:  # an anchor on the page, or mailto:
                continue
            if not (page.parent / unquote(url.path)).is_file():
                broken.append((page.relative_to(root).as_posix(), target))
    return broken


def test_every_link_of_an_export_leads_to_an_exported_file(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    s = viewer_store
    site = tmp_path / "compare"
    # single and panel share items; neither run is asked for by --run.
    result = invoke(
        "view", "--db", str(s.db), "--export", str(site), "--run", s.doclens,
        "--compare", f"{s.single},{s.panel}",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert (site / compare_page_path((s.single, s.panel))).exists()
    assert _broken_links(site) == []
    everything = tmp_path / "all"
    export_site(s.db, everything, n_boot=20)  # PRM scoring runs' items included
    assert _broken_links(everything) == []


# -- finding 11: progress, and pages from rows read in bulk ----------------------------------


def test_export_shows_progress_off_a_terminal(viewer_store: ViewerStore, tmp_path: Path) -> None:
    s = viewer_store
    result = invoke(
        "view", "--db", str(s.db), "--export", str(tmp_path / "site"), "--run", s.single,
        env={"CLINJUDGE_PROGRESS_SECONDS": "0"},
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    lines = re.findall(r"export: (\d+)/(\d+) pages", result.stderr)
    assert len(lines) >= 2, result.stderr
    assert lines[-1] == ("7", "7")  # runs page, run page, five items
    assert [int(d) for d, _ in lines] == sorted(int(d) for d, _ in lines)


def test_item_pages_are_read_in_bulk(
    viewer_store: ViewerStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = viewer_store
    db = _copy_db(viewer_store, tmp_path)
    _grow(db, s.single, 100)  # 505 items
    real = RunStore.query
    queries: list[str] = []

    def query(self: RunStore, sql: str, params: object = None) -> list:
        queries.append(sql)
        return real(self, sql, params)  # type: ignore[arg-type]

    monkeypatch.setattr(RunStore, "query", query)
    summary = export_site(db, tmp_path / "site", runs=[s.single], n_boot=20)
    assert summary.pages == 1 + 6 + 505
    # Per item page the live viewer asks ten or more queries; the export a few per 400 items.
    assert len(queries) < 200, len(queries)


def _expected_pages(s: ViewerStore, site: Path) -> dict[str, str]:
    """Each exported page as the live viewer's own page functions render it, one by one."""
    marker = json.loads((site / MARKER).read_text())
    runs = [r for r in (s.single, s.panel, s.magentic, s.doclens, s.audit, s.prm, s.prm_score) if r]
    audits = {s.audit}
    groups = [(s.single, s.panel)]
    viewer = Viewer(s.db, n_boot=20)
    out = {}
    with viewer.session(), RunStore(s.db, read_only=True) as store:
        for rid in runs:
            items = [r["item_id"] for r in store.query(
                "SELECT item_id FROM items WHERE run_id = ? UNION "
                "SELECT item_id FROM prm_steps WHERE run_id = ?", [rid, rid])]  # fmt: skip
            for item in items:
                here = item_page_path(rid, item)
                out[here] = viewer.item(ExportLinks(here, groups, audits), rid, item)
            here = run_page_path(rid)
            out[here] = viewer.run(ExportLinks(here, groups, audits), rid)
        here = audit_page_path(s.audit)
        out[here] = viewer.audit(ExportLinks(here, groups, audits), s.audit)
    assert set(out) <= set(marker["files"])
    return out


def test_exported_pages_equal_the_viewers_pages(viewer_store: ViewerStore, tmp_path: Path) -> None:
    s = viewer_store
    site = tmp_path / "site"
    export_site(s.db, site, compares=[[s.single, s.panel]], n_boot=20)
    expected = _expected_pages(s, site)
    assert len(expected) > 30
    for here, html in expected.items():
        assert (site / here).read_text(encoding="utf-8") == html, here
