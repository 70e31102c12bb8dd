"""Shared CLI helpers: console, exit codes, error reporting."""

from __future__ import annotations

import os
from typing import Annotated, NoReturn

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape

from clinjudge._util.secrets import redact_secrets
from clinjudge.cli._options import RUN_SETTINGS
from clinjudge.errors import UserError
from clinjudge.runs import DB_ENV, RunStore, StoreError, default_db

DB_HELP = f"DuckDB file; ${DB_ENV} sets the default."
StoreDbOption = Annotated[
    str,
    typer.Option("--db", envvar=DB_ENV, help=DB_HELP, show_envvar=False),
]
"""--db of commands that read or maintain the store (default: $CLINJUDGE_DB, else DEFAULT_DB)."""

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# Re-exported for the command modules.
__all__ = ["DB_ENV", "default_db"]


class _StdoutConsole(Console):
    """stdout: as wide as the terminal, or unlimited when it is a file or pipe (no "cre…")."""

    @property
    def size(self) -> ConsoleDimensions:
        if not self.is_terminal and not os.environ.get("COLUMNS"):
            return ConsoleDimensions(10_000, super().size.height)
        return super().size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


console = Console(stderr=True)
stdout = _StdoutConsole()


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """Print an error to stderr and exit with ``code``."""
    # soft_wrap: one line per problem, whatever the terminal width (easy to grep in logs).
    console.print(
        f"[bold red]error:[/] {escape(redact_secrets(message))}", soft_wrap=True, emoji=False
    )
    raise typer.Exit(code)


def open_store(path: str, *, read_only: bool = False) -> RunStore:
    """Open the run store or exit with a clear error."""
    try:
        return RunStore(path, read_only=read_only)
    except StoreError as exc:
        fail(str(exc), EXIT_USAGE)


FLAGS = {
    **{setting.name: setting.flag for setting in RUN_SETTINGS},
    "judge.model": "--model",
    "vendors": "--data",
    "table": "--table",
}
"""The flag that sets each setting library errors name (``UserError.setting``): every run
setting's from the registry, and the few the library names otherwise."""


def user_error_text(error: UserError) -> str:
    """A library error's message, with the flags that fix it when the CLI has them.

    Args:
        error: The error; its ``setting`` is ``name`` or ``name=value``, or several names
            joined by commas (``batch,cache``) when the settings conflict.
    """
    flags = []
    for setting in (error.setting or "").split(","):
        name, _, value = setting.strip().partition("=")
        flag = FLAGS.get(name)
        if flag is not None:
            flags.append(" ".join(part for part in (flag, value) if part))
    if not flags:
        return str(error)
    return f"{error} ({', '.join(flags)})"


def judge_command(argv0: str | None = None) -> str:
    """How the user can run ``judge`` again, for commands printed to copy: ``judge`` when that
    name on PATH is the running executable, else the running executable's path (a virtual
    environment that is not activated, as after the README's install, has no ``judge`` on
    PATH: a bare ``judge ...`` would fail with "command not found").

    Args:
        argv0: The command as started (default ``sys.argv[0]``).
    """
    import shlex
    import shutil
    import sys
    from pathlib import Path

    argv0 = sys.argv[0] if argv0 is None else argv0
    if Path(argv0).name != "judge" or "/" not in argv0:
        return "judge"  # found on PATH by that name, or not started as `judge` (tests, -c)
    running = Path(argv0).absolute()
    found = shutil.which("judge")
    if found is not None and Path(found).resolve() == running.resolve():
        return "judge"
    return shlex.quote(str(running))
