"""The `judge` command-line application.

Commands are imported only when they run (or when their own --help is asked for): `judge
--version` and `judge --help` must not pay seconds for AutoGen, litellm, scipy and DuckDB.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from clinjudge import __version__
from clinjudge.cli._help import tidy_help
from clinjudge.cli._quiet import configure_verbose
from clinjudge.errors import UserError


class _Lazy:
    """A command or sub-app imported on first use, with the one-line help shown in listings."""

    def __init__(self, module: str, attribute: str, summary: str, panel: str) -> None:
        self.module = module
        self.attribute = attribute
        self.summary = summary
        self.panel = panel

    def load(self, name: str) -> Any:
        target = getattr(importlib.import_module(self.module), self.attribute)
        if isinstance(target, typer.Typer):
            command: Any = typer.main.get_group(target)
        else:
            holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
            holder.command(name)(target)
            command = typer.main.get_command(holder)
        command.name = name
        tidy_help(command)
        return command

    def stub(self, name: str) -> TyperCommand:
        return TyperCommand(name, help=self.summary, rich_help_panel=self.panel)


_RUN = "Judge and analyse"
_STORE = "Runs and data"
_SETUP = "Rubrics, personas, PRM"
# Listing order; the summaries are the first line of each command's own help (a test checks it).
COMMANDS: dict[str, _Lazy] = {
    "run": _Lazy(
        "clinjudge.cli._run",
        "run_command",
        "Judge a batch of items; prints the run id on stdout.",
        _RUN,
    ),
    "audit": _Lazy(
        "clinjudge.cli._audit",
        "audit_app",
        "Audit several vendors on the same encounters: one run, then per-vendor statistics, "
        "paired tests (Wilcoxon, Holm), flagged items, cost and a report. Prints the run id.",
        _RUN,
    ),
    "probe": _Lazy(
        "clinjudge.cli._probe",
        "probe_command",
        "Test a judge with controlled edits of each item: does its score drop when the summary "
        "gets worse, and hold still when it should? Prints the run id.",
        _RUN,
    ),
    "agree": _Lazy(
        "clinjudge.cli._agree",
        "agree_command",
        "Agreement of each run's judge with the imported physicians' ratings.",
        _RUN,
    ),
    "compare": _Lazy(
        "clinjudge.cli._agree",
        "compare_command",
        "One table of judge configurations: agreement, failures, cost and latency per item.",
        _RUN,
    ),
    "report": _Lazy(
        "clinjudge.cli._agree",
        "report_command",
        "Write report.html (self-contained, inline SVG charts) and report.md: final scores per "
        "attribute, failures, flags and items, and agreement where physicians' ratings exist.",
        _RUN,
    ),
    "view": _Lazy(
        "clinjudge.cli._view",
        "view_command",
        "Browse runs, items, discussions, claims, PRM steps, comparisons and audits in a web "
        "browser. Read-only; binds 127.0.0.1 unless told otherwise.",
        _RUN,
    ),
    "demo": _Lazy(
        "clinjudge.cli._demo",
        "demo_command",
        "Write the synthetic demo files and print the commands to try clinjudge with them.",
        _RUN,
    ),
    "runs": _Lazy(
        "clinjudge.cli._runs",
        "runs_app",
        "List, inspect, rename and delete stored runs.",
        _STORE,
    ),
    "export": _Lazy(
        "clinjudge.cli._runs",
        "export_command",
        "Export judgments (one row per item_id, sample, agent, attribute), discussions, DocLens "
        "claims or scores, or PRM steps; the file appears only once it is complete.",
        _STORE,
    ),
    "ratings": _Lazy(
        "clinjudge.cli._ratings", "ratings_app", "Import and list physicians' ratings.", _STORE
    ),
    "rate": _Lazy(
        "clinjudge.cli._rate",
        "rate_app",
        "Physicians rate a run's items in the browser: plan, serve, link, revoke.",
        _STORE,
    ),
    "db": _Lazy("clinjudge.cli._db", "db_app", "Run databases: merge shards.", _STORE),
    "rubric": _Lazy(
        "clinjudge.cli._rubric", "rubric_app", "List, show and validate rubrics.", _SETUP
    ),
    "persona": _Lazy(
        "clinjudge.cli._persona", "persona_app", "List, show and validate judge personas.", _SETUP
    ),
    "prm": _Lazy(
        "clinjudge.cli._prm",
        "prm_app",
        "Score steps with a process reward model (PRM): score, best-of-n, eval.",
        _SETUP,
    ),
}


class LazyGroup(TyperGroup):
    """The root group: lists every command from :data:`COMMANDS` and imports one only to run
    it or show its own help."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), *COMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in COMMANDS:
            return command
        lazy = COMMANDS[cmd_name]
        if self._listing:
            return lazy.stub(cmd_name)
        command = lazy.load(cmd_name)
        self.add_command(command, cmd_name)
        return command

    def invoke(self, ctx: Any) -> Any:
        # The one place a library UserError becomes its message alone and exit code 2;
        # any other exception is a fault and keeps its traceback.
        try:
            return super().invoke(ctx)
        except UserError as exc:
            from clinjudge.cli._common import EXIT_USAGE, fail, user_error_text

            fail(user_error_text(exc), EXIT_USAGE)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            tidy_help(self)
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="judge",
    cls=LazyGroup,
    help="Judge AI-written clinical text with LLMs and store every judgment in DuckDB.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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
