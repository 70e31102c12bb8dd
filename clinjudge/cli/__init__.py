"""The `judge` command-line interface."""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    """Entry point of the `judge` console script."""
    if sys.argv[1:] == ["--version"]:
        # Answered before typer and rich load: the cheapest possible startup.
        from clinjudge import __version__

        print(f"clinjudge {__version__}")
        return
    from clinjudge.cli._app import app

    app()


def __getattr__(name: str) -> Any:
    # `app` is built on first use so that `judge --version` does not import typer.
    if name == "app":
        from clinjudge.cli._app import app

        return app
    raise AttributeError(f"module 'clinjudge.cli' has no attribute {name!r}")


__all__ = ["app", "main"]
