"""Building blocks of the reports: text for HTML and Markdown, tables, the page frame.

Untrusted text (item ids, summaries, model replies, error messages) goes through :func:`_esc`
in HTML and :func:`md_text` in Markdown; the page carries a Content-Security-Policy that allows
no script and no fetch, and only our own style block (by its hash).
"""

from __future__ import annotations

import ast
import base64
import contextlib
import errno
import hashlib
import html
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clinjudge.errors import UserError
from clinjudge.runs import check_output_file

SIMULATED_TEXT = (
    "Scores from the mock provider are not judgments of any model or person. "
    "Agreement figures below only exercise the pipeline."
)

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
 margin:0;padding:0 2rem 3rem;color:#1d232a;background:#fff;line-height:1.45}
h1{font-size:1.6rem;margin:1.2rem 0 .3rem}h2{font-size:1.25rem;margin:2rem 0 .5rem;
 border-bottom:1px solid #d0d7de;padding-bottom:.2rem}h3{font-size:1.05rem;margin:1.4rem 0 .4rem}
.meta{color:#57606a;font-size:.9rem}
.banner{background:#b42318;color:#fff;font-size:1.25rem;font-weight:700;padding:1rem 1.5rem;
 margin:0 -2rem 1rem;border-bottom:6px solid #7a1109;letter-spacing:.02em}
.banner .big{font-size:2rem;display:block;letter-spacing:.2em}
h1,h2,h3,p,li{overflow-wrap:anywhere}
table{border-collapse:collapse;margin:0;font-size:.88rem}
th,td{border:1px solid #d0d7de;padding:.25rem .55rem;text-align:right;white-space:nowrap;
 vertical-align:top}
th{background:#f6f8fa;position:sticky;top:0}td.l,th.l{text-align:left}
td.w,th.w{white-space:normal;text-align:left;min-width:16rem;max-width:32rem;overflow-wrap:anywhere}
td.wide,th.wide{min-width:30rem;max-width:40rem}
tr.pooled td{font-weight:700;background:#f6f8fa}tr.sim td{background:#fff4e5}
tr.bad td{background:#fff1f0}tr.flag td{background:#fff8c5}
.scroll{overflow:auto;max-width:100%;margin:.5rem 0 1rem}.scroll.tall{max-height:75vh}
.charts{display:flex;flex-wrap:wrap;gap:1rem}
figure.chart{margin:.3rem 0;border:1px solid #d0d7de;border-radius:6px;padding:.4rem .6rem;
 width:min-content;max-width:100%;box-sizing:border-box;overflow-x:auto}
figcaption{font-size:.82rem;color:#57606a;min-width:12rem}
svg{display:block}
.note{font-size:.85rem;color:#57606a}ul.notes{font-size:.85rem;color:#57606a}
.warning{color:#9a6700;font-weight:600}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif}
"""

CSP = (
    "default-src 'none'; script-src 'none'; style-src 'sha256-{style_hash}'; img-src 'none'; "
    "font-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'"
)
"""Content-Security-Policy of every report page: no script at all, only our own inline style
(allowed by its hash), nothing fetched."""


@dataclass(frozen=True)
class ReportFiles:
    """Paths written by :func:`write_report`."""

    html: Path
    markdown: Path


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


_MD_ALWAYS = re.compile(r"([\\`*\[\]<|~])")

_MD_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")

_MD_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")

_MD_LINE_START = re.compile(r"^(\s*)(>|#{1,6}(?=\s|$)|[+=-]+(?=\s|$)|\d{1,9}(?=[.)](?:\s|$)))")

_LITERAL = r"""(?:'[^'\\]*'|"[^"\\]*"|-?\d+(?:\.\d+)?(?:[eE]-?\d+)?)"""

_LIST_REPR = re.compile(rf"\[(?:{_LITERAL}(?:,\s*{_LITERAL})*)?\]")


def _listed(match: re.Match[str]) -> str:
    values = ast.literal_eval(match.group(0))
    if not values:
        return "none"
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


def plain_note(text: str) -> str:
    """A note with Python list literals (``['a', 'b']``, ``[1.0, 2.0]``) written as text
    (``a, b``; ``1, 2``), as analysis messages may hold them.

    Args:
        text: The note.
    """
    return _LIST_REPR.sub(_listed, text)


def md_text(value: Any, *, cell: bool = False) -> str:
    """Text for Markdown that renders as itself: no emphasis, code, links, HTML, headings,
    quotes, lists or table breaks. Newlines become spaces, so it fits a table cell or a line.

    Args:
        value: Any text (untrusted text included); None gives an empty string.
        cell: For a table cell, where block markers (``#``, ``>``, ``-``, ``1.``) mean nothing.
    """
    text = " ".join(("" if value is None else str(value)).split())
    text = _MD_ALWAYS.sub(r"\\\1", text)
    text = _MD_ENTITY.sub(r"\\&", text)
    text = _MD_UNDERSCORE.sub(r"\\_", text)
    match = None if cell else _MD_LINE_START.match(text)
    if match:  # a block marker at the start: '# x', '> x', '- x', '1. x'
        end = match.end()
        if match.group(2).isdigit():
            return text[:end] + "\\" + text[end:]
        return text[: match.start(2)] + "\\" + text[match.start(2) :]
    return text


def fmt_num(value: Any, digits: int = 3) -> str:
    """A number for a table cell; ``-`` when missing."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def fmt_ci(ci: Sequence[Any] | None) -> str:
    """``[lo, hi]`` or ``-``."""
    if not ci or any(v is None for v in ci):
        return "-"
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def fmt_p(value: Any) -> str:
    """A p value: three decimals, or ``<0.001``."""
    if value is None:
        return "-"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def fmt_usd(value: Any, known: bool = True) -> str:
    """Dollars with enough decimals for per-item costs."""
    if value is None:
        return "-"
    return f"${value:.4f}" + ("" if known else " (partial)")


def fmt_seconds(value: Any) -> str:
    """Seconds with two decimals."""
    return "-" if value is None else f"{value:.2f} s"


@dataclass
class _Table:
    header: list[str]
    rows: list[list[str]]
    left: int = 1  # leading columns aligned left
    classes: list[str] | None = None  # one CSS class per row
    wrap: frozenset[int] = frozenset()  # columns of running text, wrapped
    wide: frozenset[int] = frozenset()  # wrapped columns of longer text, given more room
    name: str = ""  # data-table attribute, for tests and styling
    tall: bool = False  # many rows: scroll inside a box of bounded height

    def _cell(self, tag: str, index: int, text: str) -> str:
        css = "w" if index in self.wrap else "l" if index < self.left else ""
        css = (css + (" wide" if index in self.wide else "")).strip()
        attr = f' class="{css}"' if css else ""
        return f"<{tag}{attr}>{_esc(text)}</{tag}>"

    def to_html(self) -> str:
        head = "".join(self._cell("th", i, h) for i, h in enumerate(self.header))
        body = []
        for index, row in enumerate(self.rows):
            css = (self.classes or [""] * len(self.rows))[index]
            cells = "".join(self._cell("td", i, c) for i, c in enumerate(row))
            body.append(f'<tr class="{css}">{cells}</tr>' if css else f"<tr>{cells}</tr>")
        box = "scroll tall" if self.tall else "scroll"
        named = f' data-table="{_esc(self.name)}"' if self.name else ""
        return (
            f'<div class="{box}"><table{named}><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )

    def to_markdown(self) -> str:
        def cell(text: str) -> str:
            return md_text(text, cell=True)

        lines = ["| " + " | ".join(cell(h) for h in self.header) + " |"]
        lines.append(
            "|"
            + "|".join(":---" if i < self.left else "---:" for i in range(len(self.header)))
            + "|"
        )
        lines.extend("| " + " | ".join(cell(c) for c in row) + " |" for row in self.rows)
        return "\n".join(lines)


def _banner(simulated: list[str]) -> str:
    which = ", ".join(simulated)
    return (
        f'<div class="banner" role="alert"><span class="big">SIMULATED</span>'
        f"{_esc(SIMULATED_TEXT)} Simulated run(s): {_esc(which)}.</div>"
    )


@dataclass
class _Doc:
    html: list[str]
    md: list[str]

    def heading(self, level: int, text: str) -> None:
        self.html.append(f"<h{level}>{_esc(text)}</h{level}>")
        self.md.append(f"{'#' * level} {md_text(text)}\n")

    def para(self, text: str, css: str = "") -> None:
        attr = f' class="{css}"' if css else ""
        self.html.append(f"<p{attr}>{_esc(text)}</p>")
        self.md.append(f"{md_text(text)}\n")

    def table(self, table: _Table) -> None:
        self.html.append(table.to_html())
        self.md.append(table.to_markdown() + "\n")

    def notes(self, notes: list[str]) -> None:
        if not notes:
            return
        notes = [plain_note(n) for n in notes]
        self.html.append(
            '<ul class="notes">' + "".join(f"<li>{_esc(n)}</li>" for n in notes) + "</ul>"
        )
        self.md.append("\n".join(f"- {md_text(n)}" for n in notes) + "\n")


def html_page(title: str, body: Sequence[str]) -> str:
    """A complete report page: our CSS inline, a Content-Security-Policy that allows no script
    and nothing fetched, and ``body`` (already escaped HTML fragments).

    Args:
        title: Page title (escaped here).
        body: HTML fragments, joined by newlines.
    """
    style_hash = base64.b64encode(hashlib.sha256(_CSS.encode("utf-8")).digest()).decode()
    policy = CSP.format(style_hash=style_hash)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_esc(policy)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def _partial(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial")


def _write_partial(path: Path, text: str) -> None:
    """Write ``text`` beside ``path``, under a hidden name, for :func:`write_report_files` to
    move into place."""
    # A link, FIFO or folder in the way is refused, as for exports.
    check_output_file(path)
    partial = _partial(path)
    partial.unlink(missing_ok=True)
    # Reports quote clinical text: owner-only, like the store they come from. O_EXCL also
    # refuses a link planted at the partial name between the unlink and the open.
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


def _write_error(path: Path, exc: OSError) -> UserError:
    """One line for a report file that could not be written (nothing of the report was)."""
    kept = " (the report already there is unchanged)" if path.exists() else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        reason = "no space left on device" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        return UserError(
            f"{path}: disk full ({reason}): no report was written{kept}; free some space or "
            "write the report elsewhere"
        )
    return UserError(f"{path}: cannot write the report: {exc.strerror or exc}{kept}")


def write_report_files(out_dir: str | Path, html_text: str, markdown: str) -> ReportFiles:
    """Write ``report.html`` and ``report.md`` into a folder (created if absent), owner-only.

    Args:
        out_dir: The report folder.
        html_text: The HTML page.
        markdown: The Markdown text.

    Raises:
        UserError: The folder cannot be made, or a report file's place holds a link, a FIFO or
            a folder.
    """
    out = Path(out_dir)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise UserError(f"{out}: is not a folder; a report is written into a folder") from exc
    except OSError as exc:
        raise UserError(f"{out}: cannot create the report folder: {exc.strerror or exc}") from exc
    files = ReportFiles(out / "report.html", out / "report.md")
    # Both files are written in full before either replaces an older one: a full disk leaves
    # the old report (or none), never a new page beside an old or missing Markdown.
    current = files.html
    try:
        _write_partial(files.html, html_text)
        current = files.markdown
        _write_partial(files.markdown, markdown)
        current = files.html
        os.replace(_partial(files.html), files.html)
        current = files.markdown
        os.replace(_partial(files.markdown), files.markdown)
    except BaseException as exc:
        for path in (files.html, files.markdown):
            _partial(path).unlink(missing_ok=True)
        if created:
            with contextlib.suppress(OSError):  # only when empty: nothing else is touched
                out.rmdir()
        if isinstance(exc, OSError):
            raise _write_error(current, exc) from exc
        raise
    return files
