"""The `judge` command-line interface."""

from clinjudge.cli._app import app


def main() -> None:
    """Entry point of the `judge` console script."""
    app()


__all__ = ["app", "main"]
