"""`judge run`: start or resume a run through the public API (``clinjudge.evaluate``,
``clinjudge.estimate``, ``clinjudge.resume``), then print how it went.

Kept light: `judge run --help` imports this module, typer and the option registry only; the API
(AutoGen, litellm, DuckDB...) loads when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from clinjudge.cli._options import RUN_SETTINGS, SETTINGS, with_settings

if TYPE_CHECKING:
    from clinjudge import RunResult
    from clinjudge.cli._judging import RunPrinter

# What a dry run and a resume read besides the run settings (the rest do not apply to them).
_ESTIMATE = ("limit", "shuffle", "batch")
_RESUME = ("max_cost", "progress", "progress_every", "batch", "poll_interval")


def _scoped(values: dict[str, Any], *scopes: str) -> dict[str, Any]:
    """The values whose settings have one of ``scopes`` (see ``_options.Scope``)."""
    return {name: value for name, value in values.items() if SETTINGS[name].scope in scopes}


@with_settings(RUN_SETTINGS)
def run_command(**values: Any) -> None:
    """Judge a batch of items; prints the run id on stdout.

    Exits 1 when any item ends without a valid final judgment, unless --allow-failures allows
    it; 2 on bad input or settings; 130 when interrupted.
    """
    import clinjudge
    from clinjudge.cli._common import EXIT_USAGE, fail, user_error_text
    from clinjudge.cli._judging import RunPrinter, print_estimate
    from clinjudge.cli._outcome import parse_allow_failures

    allow_failures: str = values["allow_failures"]
    parse_allow_failures(allow_failures)
    printer = RunPrinter()
    source = str(values["config"] or "flags")
    try:
        if values["resume"]:
            result = _resume(values["resume"], values, printer)
        elif values["dry_run"]:
            chosen = {k: values[k] for k in _ESTIMATE}
            estimate = clinjudge.estimate(**_scoped(values, "config"), **chosen, source=source)
            print_estimate(estimate)
            return
        else:
            with printer.judging():
                result = clinjudge.evaluate(
                    **_scoped(values, "config", "call"), on_start=printer.start, source=source
                )
    except clinjudge.UserError as exc:
        fail(user_error_text(exc), EXIT_USAGE)
    printer.finish(result, allow_failures, next_steps=True)


def _resume(run_id: str, values: dict[str, Any], printer: RunPrinter) -> RunResult:
    """Finish an earlier run (``clinjudge.resume``); only the flags a resume reads count."""
    import clinjudge
    from clinjudge.cli._common import EXIT_USAGE, default_db, fail

    path = values["db"] or default_db()
    if not Path(path).exists():
        # A typo'd --db must not create a file; said as the store says it for every command.
        fail(f"{path}: no such database", EXIT_USAGE)
    with printer.judging():
        chosen = {k: values[k] for k in _RESUME}
        return clinjudge.resume(run_id, db=path, **chosen, on_start=printer.start)
