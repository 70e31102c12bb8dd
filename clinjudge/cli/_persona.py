"""`judge persona list|show|validate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from clinjudge.cli._common import stdout
from clinjudge.personas import (
    Persona,
    PersonaSet,
    builtin_persona_sets,
    builtin_personas,
    load_persona_file,
    load_persona_set,
    resolve_personas,
)

persona_app = typer.Typer(help="List, show and validate judge personas.", no_args_is_help=True)


@persona_app.command("list")
def list_command() -> None:
    """List the built-in persona sets and their personas."""
    table = Table()
    for column in ("set", "persona", "stance", "role"):
        table.add_column(column, no_wrap=True)
    table.add_column("description")
    for set_name in builtin_persona_sets():
        persona_set = load_persona_set(set_name)
        for persona in persona_set.personas:
            table.add_row(
                persona_set.name,
                persona.name,
                persona.stance.value,
                persona.role.value,
                escape(persona.description),
            )
    stdout.print(table)


def _print_persona(persona: Persona) -> None:
    typer.echo(f"{persona.name}  ({persona.display_name})")
    typer.echo(f"stance: {persona.stance.value}")
    typer.echo(f"role: {persona.role.value}")
    typer.echo(f"description: {persona.description}")
    typer.echo("system message:")
    typer.echo(persona.system_message)


def _print_set(persona_set: PersonaSet) -> None:
    typer.echo(f"{persona_set.name} {persona_set.version}: {persona_set.description}")
    if persona_set.source:
        typer.echo(f"source: {persona_set.source}")
    typer.echo(f"moderator: {persona_set.moderator or '(none)'}")
    for persona in persona_set.personas:
        typer.echo("")
        _print_persona(persona)


@persona_app.command("show")
def show_command(
    name: Annotated[str, typer.Argument(help="Built-in set, built-in persona, or persona file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Show a persona set or a single persona, with the full system messages."""
    shown: Persona | PersonaSet | None = builtin_personas().get(name)
    if shown is None:
        shown = resolve_personas(name)
    if as_json:
        typer.echo(json.dumps(shown.model_dump(mode="json"), indent=2, ensure_ascii=False))
    elif isinstance(shown, PersonaSet):
        _print_set(shown)
    else:
        _print_persona(shown)


@persona_app.command("validate")
def validate_command(
    path: Annotated[Path, typer.Argument(help="Persona YAML or JSON file.")],
) -> None:
    """Check a persona file against the schema."""
    persona_set = load_persona_file(path)
    stdout.print(
        f"{escape(str(path))}: valid persona set {persona_set.name} {persona_set.version} "
        f"with {len(persona_set.personas)} personas: {', '.join(persona_set.names)}"
    )
