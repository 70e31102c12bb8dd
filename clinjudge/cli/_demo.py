"""`judge demo`: write the synthetic demo files shipped in the package and print what to run."""

from __future__ import annotations

import re
import shlex
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from clinjudge.cli._common import EXIT_USAGE, console, fail, judge_command

# Files written in the repository's examples/ say "examples/"; a copy says where it was written.
_REPO_PREFIX = "examples/"
_TEXT_SUFFIXES = {".md", ".yaml", ".yml"}


def demo_files() -> list[tuple[str, bytes]]:
    """Every demo file as (path relative to the demo folder, content)."""
    root = resources.files("clinjudge") / "demo"
    found: list[tuple[str, bytes]] = []

    def walk(folder: resources.abc.Traversable, prefix: str) -> None:
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.name.startswith((".", "__")):
                continue
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            else:
                found.append((f"{prefix}{entry.name}", entry.read_bytes()))

    walk(root, "")
    return found


def _commands(folder: str) -> list[str]:
    d = shlex.quote(folder.rstrip("/"))
    return [
        "# A panel that discusses (magentic) on 10 synthetic summaries; prints the run id.",
        f"RUN=$(judge run --data {d}/pdsqi9_demo.jsonl --mode magentic --name demo-magentic)",
        "judge runs show $RUN",
        f"judge export $RUN --out {d}/discussions.csv --table transcripts",
        "# Agreement with made-up physicians' ratings, and a report.",
        f"judge ratings import {d}/pdsqi9_demo_ratings.jsonl",
        "judge agree $RUN",
        f"judge report $RUN --out {d}/report",
        "# Three made-up vendors on the same encounters; made-up physicians rated 3 items of",
        "# each, which turns the judge's means into estimates of the physicians' (PPI++).",
        f"judge audit --data {d}/audit/vendor_a.jsonl --data {d}/audit/vendor_b.jsonl "
        f"--data {d}/audit/vendor_c.jsonl --samples 3 --ratings {d}/audit/ratings.jsonl "
        f"--out {d}/audit-report",
        "# With a real model: try a few items first.",
        f"judge run --data {d}/pdsqi9_demo.jsonl --model openai/gpt-4o-mini --limit 3 --cache",
    ]


def demo_command(
    directory: Annotated[
        Path, typer.Argument(help="Folder to write the demo files into (created if absent).")
    ] = Path("clinjudge-demo"),
    force: Annotated[
        bool, typer.Option("--force", help="Replace demo files that already exist there.")
    ] = False,
) -> None:
    """Write the synthetic demo files and print the commands to try clinjudge with them.

    Everything written is synthetic (no real patient data). Without --model the commands use
    the simulated mock/judge provider, whose scores are marked SIMULATED.
    """
    files = demo_files()
    folder = directory.as_posix().rstrip("/") + "/"
    existing = [name for name, _ in files if (directory / name).exists()]
    if existing and not force:
        fail(
            f"{directory} already holds {', '.join(existing[:3])}"
            f"{' and more' if len(existing) > 3 else ''}; pass --force to replace them",
            EXIT_USAGE,
        )
    for name, content in files:
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(name).suffix in _TEXT_SUFFIXES:
            content = content.decode("utf-8").replace(_REPO_PREFIX, folder).encode("utf-8")
        target.write_bytes(content)
    console.print(
        f"wrote {len(files)} synthetic demo files to {escape(str(directory))} (see its "
        "README.md); without --model, scores come from the SIMULATED mock/judge provider. Try:"
    )
    judge = judge_command()
    if judge != "judge":
        activate = Path(shlex.split(judge)[0]).parent / "activate"
        console.print(
            f"(`judge` is not on PATH, so the commands name {escape(judge)}; or activate its "
            f"virtual environment first: source {escape(shlex.quote(str(activate)))})"
        )
    typer.echo("\n".join(with_judge(_commands(folder), judge)))


def with_judge(lines: list[str], judge: str) -> list[str]:
    """Shell lines with each ``judge`` command run as ``judge`` (a path when it is not on
    PATH); comment lines are left alone.

    Args:
        lines: The lines, commands written as ``judge ...``.
        judge: How to run judge (:func:`clinjudge.cli._common.judge_command`).
    """
    if judge == "judge":
        return lines
    return [
        line if line.startswith("#") else re.sub(r"(^|\$\()judge ", rf"\g<1>{judge} ", line)
        for line in lines
    ]
