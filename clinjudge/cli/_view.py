"""`judge view`: the local, read-only web viewer over the run store, or its static export."""

from __future__ import annotations

import webbrowser
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from clinjudge.cli._common import EXIT_USAGE, StoreDbOption, console, fail
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
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks a free one).")] = 8765,
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
    from clinjudge.reports import FolderNotEmpty, ViewerServer, export_site, is_loopback

    if not Path(db).exists():
        fail(f"{db}: no such database (judge something first, or pass --db)", EXIT_USAGE)
    if export is not None:
        groups = [[r.strip() for r in c.split(",") if r.strip()] for c in compare or []]
        try:
            summary = export_site(db, export, runs=run or None, compares=groups, force=force)
        except FolderNotEmpty as exc:
            fail(f"{exc} (--force)", EXIT_USAGE)
        console.print(
            f"wrote {summary.pages} page(s) for {len(summary.runs)} run(s) to "
            f"{escape(str(summary.path))}; open {escape(str(summary.path / 'index.html'))}"
        )
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
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc}", EXIT_USAGE)
    except KeyboardInterrupt:
        console.print("stopped")
