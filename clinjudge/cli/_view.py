"""`judge view`: the local, read-only web viewer over the run store, or its static export."""

from __future__ import annotations

import time
import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from clinjudge.cli._common import EXIT_FAILURE, EXIT_USAGE, StoreDbOption, console, fail
from clinjudge.runs import DEFAULT_DB


def view_command(
    db: StoreDbOption = str(DEFAULT_DB),
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on. Anything but loopback lets other machines read the "
            "pages, which show clinical text."
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="Port to listen on, 1-65535 (0 picks a free one).")
    ] = 8765,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the runs page in the default web browser.")
    ] = False,
    export: Annotated[
        Path | None,
        typer.Option(
            help="Write the pages as a static folder that opens from disk (no server), then exit."
        ),
    ] = None,
    run: Annotated[
        list[str] | None,
        typer.Option("--run", help="--export: only this run (repeatable; default every run)."),
    ] = None,
    compare: Annotated[
        list[str] | None,
        typer.Option(
            help="--export: also a comparison page of these runs, comma-separated (repeatable)."
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(help="--export: write into a non-empty folder that is not an earlier export."),
    ] = False,
) -> None:
    """Browse runs, items, discussions, claims, PRM steps, comparisons and audits in a web
    browser. Read-only; binds 127.0.0.1 unless told otherwise."""
    from clinjudge.reports import ViewerServer, is_loopback

    if export is None and not 0 <= port <= 65535:
        fail(f"--port {port}: a port must be 1-65535 (0 picks a free one)", EXIT_USAGE)
    if not Path(db).exists():
        fail(f"{db}: no such database (judge something first, or pass --db)", EXIT_USAGE)
    if export is not None:
        _export(db, export, run or None, compare or [], force)
        return
    if run or compare or force:
        fail("--run, --compare and --force go with --export", EXIT_USAGE)
    if not is_loopback(host):
        console.print(
            f"[bold yellow]warning:[/] listening on {escape(host)}: other machines can reach "
            "these pages, which show clinical text (PHI). There is no login."
        )
    try:
        server = ViewerServer(db, host=host, port=port)
        with server:
            console.print(f"judge view: {server.url}/ (read-only; Ctrl-C to stop)")
            if open_browser:
                webbrowser.open(server.url + "/")
            server.wait()
    except OSError as exc:  # ListenError: the port is in use, the host unknown, ...
        fail(f"cannot listen on {host}:{port}: {exc}", EXIT_USAGE)
    except KeyboardInterrupt:
        console.print("stopped")


# -- --export ----------------------------------------------------------------------------------


def _export(db: str, out: Path, runs: list[str] | None, compare: list[str], force: bool) -> None:
    """`judge view --export`: write the static folder with progress; one line on failure.

    Args:
        db: The run store.
        out: Destination folder.
        runs: --run values (None: every run).
        compare: --compare values (comma-separated run ids).
        force: --force.
    """
    from clinjudge.errors import ClinJudgeError
    from clinjudge.reports import (
        DatabaseBusy,
        DatabaseMissing,
        ExportError,
        FolderNotEmpty,
        export_site,
    )

    groups = [[r.strip() for r in c.split(",") if r.strip()] for c in compare]
    try:
        with _ExportProgress(console) as progress:
            summary = export_site(
                db, out, runs=runs, compares=groups, force=force, progress=progress
            )
    except FolderNotEmpty as exc:
        fail(f"{exc} (--force)", EXIT_USAGE)
    except (ExportError, DatabaseBusy, DatabaseMissing) as exc:
        # A busy or newer database exits 2, as every command on it does (docs/reliability.md).
        fail(str(exc), EXIT_USAGE)
    except OSError as exc:  # a full disk (the export's DiskFull), or a failure it did not name
        fail(str(exc) if isinstance(exc, ClinJudgeError) else f"{out}: {exc}", EXIT_FAILURE)
    console.print(
        f"wrote {summary.pages} page(s) for {len(summary.runs)} run(s) to "
        f"{escape(str(summary.path))}; open {escape(str(summary.path / 'index.html'))}"
    )


def _progress_seconds() -> float:
    """Seconds between progress lines off a terminal, as for `judge run`."""
    from clinjudge.orchestration import progress_interval

    return progress_interval()


class _ExportProgress:
    """Pages written so far: a bar on a terminal, else a plain line every
    ``$CLINJUDGE_PROGRESS_SECONDS`` seconds (default 30) and one at the end.

    Args:
        out: Where progress goes (stderr).
        clock: Time source (tests inject one).
    """

    def __init__(self, out: Console, clock: Callable[[], float] = time.monotonic) -> None:
        self.console = out
        self.interval = _progress_seconds()
        self._clock = clock
        self._started = self._last = clock()
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._state = (0, 0)

    def __enter__(self) -> _ExportProgress:
        self._started = self._last = self._clock()
        if self.console.is_terminal:
            self._bar = Progress(
                TextColumn("[bold]exporting"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("pages"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._task = self._bar.add_task("export", total=None)
            self._bar.start()
        return self

    def __call__(self, done: int, total: int) -> None:
        """Count ``done`` of ``total`` pages written."""
        self._state = (done, total)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done, total=total)
            return
        now = self._clock()
        if now - self._last >= self.interval:
            self._last = now
            self._line(now)

    def __exit__(self, kind: object, *rest: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif kind is None and self._state[1]:
            self._line(self._clock())

    def _line(self, now: float) -> None:
        done, total = self._state
        elapsed = now - self._started
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = f"{(total - done) / rate:.0f}s" if rate and done < total else "0s"
        self.console.print(
            f"export: {done}/{total} pages ({100 * done / max(total, 1):.0f}%), "
            f"{rate:,.0f} pages/s, elapsed {elapsed:.0f}s, ETA {eta}",
            highlight=False, soft_wrap=True,
        )  # fmt: skip
