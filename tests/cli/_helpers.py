"""Helpers shared by the CLI tests."""

from __future__ import annotations

import json
import subprocess
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


# Runs `judge ARGS...` for each argv in one fresh interpreter; after each, which of the watched
# modules are loaded. Each command's stdout ends with a NUL line; the lists go to stderr as JSON
# on its last line.
_MODULES_PROBE = """
import json, sys
from clinjudge.cli import main
watched, commands = json.loads(sys.argv[1])
loaded = []
for argv in commands:
    sys.argv = ["judge", *argv]
    try:
        main()
    except SystemExit as exc:
        assert not exc.code, (argv, exc.code)
    print("\\x00", flush=True)
    loaded.append([m for m in watched if m in sys.modules])
print(json.dumps(loaded), file=sys.stderr)
"""


def modules_after(
    watched: list[str], *commands: list[str], timeout: float = 300
) -> tuple[list[list[str]], list[str]]:
    """Run the commands one after another in a fresh interpreter: for each, which of
    ``watched`` were loaded after it, and its stdout.

    Args:
        watched: Module names to look for in ``sys.modules``.
        commands: Each command's arguments after ``judge``.
        timeout: Seconds for the whole process.
    """
    done = subprocess.run(
        [sys.executable, "-c", _MODULES_PROBE, json.dumps([watched, list(commands)])],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    outputs = done.stdout.split("\x00\n")
    return json.loads(done.stderr.strip().splitlines()[-1]), outputs[: len(commands)]
