"""Shared CLI helpers: console, exit codes, error reporting."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from clinjudge.runs import RunStore, StoreError

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

console = Console(stderr=True)
stdout = Console()


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """Print an error to stderr and exit with ``code``."""
    # soft_wrap: one line per problem, whatever the terminal width (easy to grep in logs).
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def open_store(path: str, *, read_only: bool = False) -> RunStore:
    """Open the run store or exit with a clear error."""
    try:
        return RunStore(path, read_only=read_only)
    except StoreError as exc:
        fail(str(exc), EXIT_USAGE)
