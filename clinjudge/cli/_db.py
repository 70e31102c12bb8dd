"""`judge db`: maintenance of run databases (merging shards)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from clinjudge.cli._common import console
from clinjudge.runs import merge_databases

db_app = typer.Typer(help="Run databases: merge shards.", no_args_is_help=True)


@db_app.command("merge")
def merge_command(
    sources: Annotated[list[Path], typer.Argument(help="Databases to merge (read only).")],
    into: Annotated[
        Path, typer.Option("--into", help="Output database (created owner-only if absent).")
    ],
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Exit 1 when any conflict was found (replies cached under the same request key "
            "are kept once and are not conflicts).",
        ),
    ] = False,
) -> None:
    """Merge run databases (e.g. shards of `judge run --shard i/n`) into one.

    Rows are copied by key, so merging again adds nothing; the shards of one run become one
    run. A key seen with different content is a conflict: it is reported and the first-seen
    row is kept. Every input is checked before anything is written, and all are merged in one
    transaction: an input that is not a run database, of a newer schema or damaged leaves
    --into unchanged (exit 2).
    """
    summary = merge_databases(sources, into)
    table = Table(title=f"Merged {len(sources)} database(s) into {escape(str(into))}")
    table.add_column("table")
    table.add_column("rows added", justify="right")
    table.add_column("conflicts", justify="right")
    for name, tally in sorted(summary.tables.items()):
        table.add_row(name, str(tally.added), str(tally.conflicts))
    console.print(table)
    console.print(f"runs: {escape(', '.join(summary.runs)) or 'none'}")
    if summary.conflicts:
        console.print(
            f"[yellow]{summary.conflicts} conflicting row(s): same key, different content; "
            "the first-seen row was kept. Examples:[/]"
        )
        for name, tally in sorted(summary.tables.items()):
            for example in tally.examples:
                console.print(f"  {name}: {escape(example)}")
        if strict:
            raise typer.Exit(1)
