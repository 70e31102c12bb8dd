"""`judge rubric list|show|validate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from clinjudge.cli._common import stdout
from clinjudge.rubrics import (
    builtin_rubric_names,
    load_rubric,
    load_rubric_file,
    render_system,
)

rubric_app = typer.Typer(help="List, show and validate rubrics.", no_args_is_help=True)


@rubric_app.command("list")
def list_command() -> None:
    """List built-in rubrics."""
    table = Table()
    for column in ("name", "version", "title", "keys"):
        table.add_column(column)
    for name in builtin_rubric_names():
        rubric = load_rubric(name)
        table.add_row(rubric.name, rubric.version, rubric.title, str(len(rubric.attributes)))
    stdout.print(table)


@rubric_app.command("show")
def show_command(
    name: Annotated[str, typer.Argument(help="Built-in name or rubric file.")],
    prompt: Annotated[bool, typer.Option(help="Print the rendered judge system prompt.")] = False,
) -> None:
    """Show a rubric's attributes, scales and gates."""
    rubric = load_rubric(name)
    if prompt:
        typer.echo(render_system(rubric))
        return
    stdout.print(f"[bold]{rubric.title}[/] ({rubric.name} {rubric.version})")
    stdout.print(f"source: {rubric.provenance.source}")
    stdout.print(f"licence: {rubric.provenance.licence}")
    table = Table()
    for column in ("key", "name", "scale", "polarity", "gate", "agreement"):
        table.add_column(column)
    for a in rubric.attributes:
        scale = f"{a.scale.value} {a.min}-{a.max}" + (" or null" if a.nullable else "")
        gate = f"null when {a.gate.attribute}={a.gate.null_when}" if a.gate else ""
        table.add_row(a.key, a.name, scale, a.polarity.value, gate, "yes" if a.agreement else "no")
    stdout.print(table)


@rubric_app.command("validate")
def validate_command(
    path: Annotated[Path, typer.Argument(help="Rubric YAML or JSON file.")],
) -> None:
    """Check a rubric file against the schema."""
    rubric = load_rubric_file(path)
    stdout.print(
        f"{path}: valid rubric {rubric.name} {rubric.version} "
        f"with {len(rubric.attributes)} attributes"
    )
