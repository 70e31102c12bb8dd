"""The `judge` command-line application."""

from __future__ import annotations

import typer

from clinjudge import __version__
from clinjudge.cli._agree import agree_command, compare_command, report_command
from clinjudge.cli._audit import audit_command
from clinjudge.cli._db import db_app
from clinjudge.cli._persona import persona_app
from clinjudge.cli._prm import prm_app
from clinjudge.cli._quiet import configure_verbose
from clinjudge.cli._ratings import ratings_app
from clinjudge.cli._rubric import rubric_app
from clinjudge.cli._run import run_command
from clinjudge.cli._runs import export_command, runs_app
from clinjudge.cli._view import view_command

app = typer.Typer(
    name="judge",
    help="Judge AI-written clinical text with LLMs and store every judgment in DuckDB.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("run")(run_command)
app.command("export")(export_command)
app.command("agree")(agree_command)
app.command("compare")(compare_command)
app.command("report")(report_command)
app.command("audit")(audit_command)
app.command("view")(view_command)
app.add_typer(runs_app, name="runs")
app.add_typer(ratings_app, name="ratings")
app.add_typer(rubric_app, name="rubric")
app.add_typer(persona_app, name="persona")
app.add_typer(prm_app, name="prm")
app.add_typer(db_app, name="db")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"clinjudge {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Show debug logs on stderr, including what libraries print (hidden otherwise).",
    ),
) -> None:
    """Judge AI-written clinical text with LLMs and store every judgment in DuckDB."""
    configure_verbose(verbose)
