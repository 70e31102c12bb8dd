"""Helpers shared by the CLI tests."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import duckdb
from typer.testing import CliRunner

from clinjudge.cli import app

JUDGE = str(Path(sys.executable).parent / "judge")
WIDE = {"COLUMNS": "250", "NO_COLOR": "1"}


def invoke(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Any:  # noqa: A002
    """Run `judge ARGS` in-process; stdout and stderr are captured separately.

    Args:
        args: Command-line arguments.
        env: Extra environment variables.
        input: Text typed on stdin (answers to prompts).
    """
    return CliRunner().invoke(
        app, list(args), env={**WIDE, **(env or {})}, input=input, catch_exceptions=False
    )


def query(db: Path, sql: str, params: list[Any] | None = None) -> list[tuple]:
    """Read the database with a separate read-only connection."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def scalar(db: Path, sql: str, params: list[Any] | None = None) -> Any:
    """First column of the first row."""
    return query(db, sql, params)[0][0]


def batch_run(data: Path, db: Path, base_url: str, *extra: str) -> Any:
    """`judge run --batch` of ``data`` against a fake server's Files and Batches endpoints,
    polling at once and without a progress bar.

    Args:
        data: The items file.
        db: The store.
        base_url: The fake server's base URL.
        extra: More command-line arguments.
    """
    return invoke(
        "run", "--data", str(data), "--model", "openai/gpt-4o-mini", "--base-url", base_url,
        "--db", str(db), "--batch", "--poll-interval", "0", "--no-progress", *extra,
    )  # fmt: skip
